"""How the ``durably`` command writes: secrets masked, untrusted text neutralised, one JSON document per read.

A store URL may carry a password (``postgresql://app:pw@db/agents``). Every byte
a command writes goes through its ``Output``, which masks the passwords of the
store URLs it was given (``durably.storage._url_redaction``), so no command,
table title or error line can print one, however it built its text.

Nearly everything the CLI shows was written by someone else: a model chose the
call ids, tool names and arguments, a tool returned the results, a user wrote
the task. Such text may carry terminal control sequences (erase line, move the
cursor, write the clipboard with OSC 52, hyperlinks) or bidirectional overrides
that make a line read differently than it is. ``neutralise`` turns every such
character into a visible escape (``\\x1b``, ``\\u202e``) before it reaches a
terminal, and rich is never asked to interpret markup in it. JSON output is
written with ``ensure_ascii``: every control and non-ASCII character is a
``\\uXXXX`` escape, so a JSON document is safe on a terminal too.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from durably.storage._url_redaction import SecretScrubber

if TYPE_CHECKING:  # rich is imported on first use: a --json command never loads it
    from rich.console import Console

# Categories shown escaped: controls (C0, DEL, C1), format characters (bidi
# overrides and isolates, zero-width joiners), line and paragraph separators,
# surrogates and private-use or unassigned code points.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})

#: The width a table is measured at when stdout is not a terminal: wider than any row.
_UNBOUNDED = 1_000_000


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def neutralise(text: Any, *, newlines: bool = False) -> str:
    """``text`` (any value; non-strings via ``str``) with every control, format and
    unassigned character replaced by a visible escape. ``newlines``: keep ``\\n``
    (multi-line blocks); otherwise it is escaped too (one cell, one line). Never raises."""
    text = text if isinstance(text, str) else str(text)
    if text.isprintable() and (newlines or "\n" not in text):
        return str(text)  # the common case, checked in C (str of a str is that str)
    out = []
    for ch in text:
        if ch == "\n" and newlines:
            out.append(ch)
        elif ch == " " or (ch.isprintable() and unicodedata.category(ch) not in _UNSAFE_CATEGORIES):
            out.append(ch)
        else:
            out.append(_escape(ch))
    return "".join(out)


def when(at: float | None) -> str:
    """Unix seconds as ``2026-12-01 09:30:00Z`` (UTC); ``-`` for None."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def to_json(document: Any) -> str:
    """``document`` as indented JSON, ASCII only (safe on a terminal), keys in the given order."""
    return json.dumps(document, ensure_ascii=True, indent=2, default=_jsonable, allow_nan=False)


def error_json(exc: BaseException) -> dict[str, Any]:
    """The ``--json`` document of a refused command: ``{"error": {"type", "message"}}``."""
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class Output:
    """The CLI's writer: ``line`` and ``table`` for people, ``json`` for programs.

    In: ``json_mode`` (the command's ``--json``) and ``store_urls``, the store URLs the
    command was given. Everything written goes through ``secrets`` (a
    ``SecretScrubber`` of those URLs: each shows redacted, its passwords as ``***``,
    whoever built the text: a command's line, a table title, a driver's error) and
    ``neutralise``; nothing is read as rich markup. A command that prints through
    ``Output`` cannot print its store's password.
    """

    def __init__(self, json_mode: bool = False, *, store_urls: Iterable[str | None] = ()) -> None:
        self.json_mode = json_mode
        self.secrets = SecretScrubber(store_urls)
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The rich console everything is printed on, made (and rich imported) on first use."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True)
        return self._console

    @console.setter
    def console(self, console: Console) -> None:
        self._console = console

    def line(self, text: Any, *, style: str | None = None) -> None:
        """Print one line of untrusted text, neutralised."""
        from rich.text import Text

        self.console.print(Text(self._safe(text, newlines=True), style=style or ""), soft_wrap=True)

    def _safe(self, text: Any, *, newlines: bool = False) -> str:
        return neutralise(self.secrets.text(text if isinstance(text, str) else str(text)), newlines=newlines)

    def block(self, text: str) -> None:
        """Print text that is already safe (our own JSON)."""
        if self._console is not None:
            file = self._console.file
        else:  # the file a new console would write to (rich's ``Console.file``), without making one
            file = getattr(sys.stdout, "rich_proxied_file", sys.stdout)
            if file is None:
                return  # no stdout at all (pythonw): rich would discard it too
        file.write(self.secrets.text(text) + "\n")
        file.flush()

    def json(self, document: Any) -> None:
        """Print ``document`` as one JSON document."""
        self.block(to_json(self.secrets.value(document)))

    def table(
        self,
        columns: list[str],
        rows: list[list[Any]],
        *,
        title: str | None = None,
        caption: str | None = None,
        keep: tuple[str, ...] = (),
    ) -> None:
        """Print a table whose every cell is neutralised text.

        ``keep``: the columns (by name) whose cells are never cut short, e.g. ids and
        statuses someone greps for; on a narrow terminal they fold onto a second line
        instead of ending in an ellipsis. When stdout is not a terminal (a pipe, a
        file) nothing is wrapped or cut at all: the table is as wide as its widest row.
        """
        from rich.console import Console
        from rich.measure import Measurement
        from rich.table import Table
        from rich.text import Text

        table = Table(
            title=Text(self._safe(title)) if title else None, caption=Text(self._safe(caption)) if caption else None
        )
        for name in columns:
            if name in keep:
                table.add_column(name, no_wrap=True, overflow="fold")
            else:
                table.add_column(name)
        for row in rows:
            table.add_row(*(Text(self._safe(cell)) for cell in row))
        if self.console.is_terminal:
            self.console.print(table)
            return
        natural = Measurement.get(self.console, self.console.options.update(width=_UNBOUNDED), table).maximum
        Console(file=self.console.file, highlight=False, width=max(natural, self.console.width)).print(table)

    def error(self, exc: BaseException) -> None:
        """Report a refused command: one line (or a JSON ``{"error": ...}`` document)."""
        if self.json_mode:
            self.json(error_json(exc))
        else:
            from rich.text import Text

            self.console.print(
                Text.assemble(("error: ", "red"), self._safe(f"{type(exc).__name__}: {exc}")), soft_wrap=True
            )


def stdin_is_terminal() -> bool:
    """True when a person can answer a confirmation prompt."""
    return sys.stdin.isatty()
