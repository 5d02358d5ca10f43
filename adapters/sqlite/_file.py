"""Opening the SQLite adapter's file: the URL, owner-only creation, and how
SQLite's errors map to the SPI's typed errors (and ``_seq``: a seq cell read
back that holds no integer is damage too)."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from durably.storage._errors import CorruptRecordError, InvalidRequestError, InvalidStoreURLError, StoreUnavailableError
from durably.storage._urls import CREATE, flag, parse_store_url

from ._layout import SYNCHRONOUS

if TYPE_CHECKING:
    from durably.storage._spi import StreamId


def path_from_url(url: str) -> tuple[Path, str, int, bool]:
    """``(path, synchronous, busy_timeout_ms, create)`` from a ``sqlite:///`` URL.

    Parsed by ``durably.storage._urls`` like every adapter's URL: options
    ``synchronous=FULL|NORMAL``, ``busy_timeout=<ms>``, ``create=1`` (make missing
    parent directories). Raises ``InvalidStoreURLError`` (a ValueError) if malformed.
    """
    parsed = parse_store_url(
        url, ("sqlite",), {"synchronous": _synchronous, "busy_timeout": _milliseconds, CREATE: flag}
    )
    if parsed.netloc or not parsed.path.startswith("/") or len(parsed.path) < 2:
        raise InvalidStoreURLError(f"{parsed.url!r} is not a sqlite:///path/to.db URL", url=parsed.url)
    raw_path = unquote(parsed.path[1:])
    if raw_path == ":memory:" or raw_path.startswith("file:"):
        raise InvalidStoreURLError(
            "the sqlite adapter needs a database file path, not :memory: or a file: URI", url=parsed.url
        )
    options = parsed.options
    return (
        Path(raw_path),
        options.get("synchronous", "FULL"),
        options.get("busy_timeout", 10_000),
        options.get(CREATE, False),
    )


def _synchronous(raw: str) -> str:
    if raw.upper() not in SYNCHRONOUS:
        raise ValueError("known: FULL, NORMAL")
    return raw.upper()


def _milliseconds(raw: str) -> int:
    if not raw.isdigit():
        raise ValueError("a whole number of milliseconds")
    return int(raw)


def prepare_file(path: Path) -> None:
    """Create missing parent directories (0o700) and the database file (0o600).

    Blocking; run in a worker thread. SQLite gives its -wal and -shm files the
    database file's permissions, so the whole journal stays owner-only.
    """
    make_parents(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def make_parents(path: Path) -> None:
    """Create the missing parent directories of ``path``, owner-only (0o700). Blocking."""
    missing: list[Path] = []
    parent = path.absolute().parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)  # exact, whatever the umask


def daemonize(connection: object) -> None:
    """Make an aiosqlite connection's worker thread a daemon, before it starts.

    aiosqlite runs every connection on a non-daemon thread that waits for work
    until the connection is closed, so a store left open (an exception before
    ``close``, a ``Runtime`` entered and never exited) would keep the interpreter
    from exiting. A daemon thread lets it exit; what was committed
    is durable (SQLite's WAL), and a transaction cut short is rolled back on the
    next open. aiosqlite >= 0.22 keeps the thread in ``_thread`` (no public
    handle); older versions' connection is the thread itself.
    """
    thread = getattr(connection, "_thread", connection)
    if isinstance(thread, threading.Thread) and not thread.is_alive():
        thread.daemon = True


def unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    error = StoreUnavailableError(f"sqlite: {exc}")
    error.__cause__ = exc
    return error


def locked(exc: BaseException) -> bool:
    """True for SQLite's lock refusals (SQLITE_BUSY, SQLITE_LOCKED and their extended codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.OperationalError)
        and code is not None
        and code & 0xFF
        in (
            sqlite3.SQLITE_BUSY,
            sqlite3.SQLITE_LOCKED,
        )
    )


def damaged(exc: sqlite3.Error) -> bool:
    """True for SQLite's own corruption reports (SQLITE_CORRUPT, SQLITE_NOTADB) and
    for a BLOB column that reads back as text (a flipped type byte in a cell)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "Could not decode to UTF-8" in str(exc)


def translate(exc: BaseException) -> BaseException:
    """The SPI's error for ``exc``: a damaged file becomes ``CorruptRecordError``;
    other SQLite errors (locked past the busy timeout, I/O, disk full) become
    ``StoreUnavailableError``; an id SQLite cannot store as UTF-8
    (a lone surrogate) is the caller's ``InvalidRequestError``; others pass as they are."""
    if isinstance(exc, sqlite3.Error) and damaged(exc):
        # Not an outage: retrying cannot help, and the caller must not treat it as one.
        error = CorruptRecordError(f"the SQLite file is damaged: {exc}")
        error.__cause__ = exc
        return error
    if isinstance(exc, sqlite3.Error):
        return unavailable(exc)
    if isinstance(exc, UnicodeEncodeError):
        return InvalidRequestError(f"stream ids must be valid Unicode text: {exc}")
    return exc


def _seq(cell: Any, stream: StreamId) -> int:
    """A seq (or last seq) cell as read: an ``int``, else ``CorruptRecordError``. INTEGER affinity
    keeps what it cannot convert (a REAL with a fraction, a non-numeric TEXT) as it is, and
    such a cell must be reported as damage, not raise a ``TypeError`` deep in a restore."""
    if type(cell) is not int:
        raise CorruptRecordError(
            f"a seq must be an integer, the SQLite file holds {type(cell).__name__} {cell!r:.40}", stream=stream
        )
    return cell
