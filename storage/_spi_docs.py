"""The adapter guide's contract table, generated from the SPI's docstrings (the contract is stated once).

``contract_table()`` renders every method of ``Store``, ``BlobStore``, ``BlobDeleteStore``,
``LeaseStore``, ``LeaseRenewStore`` and ``IndexStore``, the helpers ``check_append``, ``check_blob``,
``check_blob_digests``, ``check_lease`` and ``check_lease_renewal`` and the
common rules of the ``Store`` docstring as one Markdown table.
docs/writing-an-adapter.md holds it between ``BEGIN``/``END`` markers; the
test suite fails when the two differ, and ``python -m durably.storage._spi_docs
docs/writing-an-adapter.md`` rewrites the guide's copy after the docstrings changed.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

from durably.errors import InvalidArgumentError

from . import _spi as spi
from ._errors import ConflictError

BEGIN = "<!-- BEGIN contract table: generated from the SPI's docstrings (storage/_spi*.py) by `python -m durably.storage._spi_docs` -->"
END = "<!-- END contract table -->"


_SECTION = re.compile(r"(Args|Attributes|Returns|Yields|Raises):")
_ENTRY = re.compile(r"    (\*{0,2}\w+):\s+(.*)")  # "    name: text" under Args/Attributes/Raises


def _markdown(text: str) -> str:
    """A docstring as one table cell: Google sections as bold labels with an entry per line,
    paragraphs joined, RST literals as Markdown code, pipes escaped."""
    parts: list[str] = []
    section = ""
    for line in inspect.cleandoc(text).splitlines():
        if _SECTION.fullmatch(line):
            section = line[:-1]
            parts.append(f"<br>**{section}:**")
        elif section in ("Args", "Attributes", "Raises") and (entry := _ENTRY.fullmatch(line)):
            parts.append(f"<br>`{entry.group(1)}`: {entry.group(2)}")
        else:
            parts.append(line.strip())
    text = re.sub(r"\s+", " ", " ".join(parts)).strip()
    return text.replace("``", "`").replace("|", "\\|")


def _signature(function: Callable[..., object]) -> str:
    """``name(a, b=1, *, c=2)``: the parameters as a caller writes them (keyword-only after ``*``)."""
    signature = inspect.signature(function)
    shown = inspect.Signature(
        [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values() if p.name != "self"]
    )
    return f"{function.__name__}{shown}"


def contract_rows() -> list[tuple[str, str]]:
    """``(what, must)`` per row: the protocols' methods in declaration order, then the helpers."""
    rows: list[tuple[str, str]] = [("any method", _markdown((spi.Store.__doc__ or "").split("\n\n", 1)[1]))]
    seen: set[str] = set()
    for protocol in (
        spi.Store,
        spi.BlobStore,
        spi.BlobDeleteStore,
        spi.LeaseStore,
        spi.LeaseRenewStore,
        spi.IndexStore,
    ):
        for name, member in vars(protocol).items():
            if name.startswith("_") or name in seen or not callable(member) or not member.__doc__:
                continue
            seen.add(name)
            rows.append((f"`{_signature(member)}`", _markdown(member.__doc__)))
    for helper in (spi.check_append, spi.check_blob, spi.check_blob_digests, spi.check_lease, spi.check_lease_renewal):
        rows.append((f"`{_signature(helper)}`", _markdown(helper.__doc__ or "")))
    rows.append(("`ConflictError(stream, expected_seq, actual_seq)`", _markdown(ConflictError.__doc__ or "")))
    return rows


def contract_table() -> str:
    """The whole table, between its markers, as the guide holds it."""
    lines = [BEGIN, "", "| what | contract |", "| --- | --- |"]
    lines += [f"| {what} | {must} |" for what, must in contract_rows()]
    return "\n".join([*lines, "", END])


def guide_table(guide: str) -> str | None:
    """The generated block as found in ``guide`` (markers included), or None when it has none."""
    start, end = guide.find(BEGIN), guide.find(END)
    return None if start < 0 or end < start else guide[start : end + len(END)]


def rewrite(path: Path) -> bool:
    """Replace the table in the guide at ``path`` by a fresh one; True if it changed. Raises ``ValueError``."""
    guide = path.read_text()
    found = guide_table(guide)
    if found is None:
        raise InvalidArgumentError(f"{path} has no contract table markers")
    fresh = guide.replace(found, contract_table())
    if fresh != guide:
        path.write_text(fresh)
    return fresh != guide


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: {'rewritten' if rewrite(Path(name)) else 'up to date'}")
