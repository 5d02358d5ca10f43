"""The SQLite adapter's connections: opening the file, setting it up, closing, and taking a connection.

``SQLiteConnections`` gives ``SQLiteStore`` its lifecycle (``_open``, ``_close``:
the writer connection and ``READERS`` reader connections, the schema created or
checked) and the ways every data method reaches the file: ``_transaction`` (one
``BEGIN IMMEDIATE`` write transaction), ``_write`` (one autocommitted statement),
``_fetch`` (one read on a reader connection) and ``_ready`` (the writer
connection, connecting to a file that was absent at open). Why one writer and
several readers: ``SQLiteStore``'s docstring.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, overload

import aiosqlite
import anyio

from durably.storage._errors import StoreClosedError, StoreUnavailableError, UnknownSchemaVersionError
from durably.storage._urls import check_parent

from . import _index as sqlite_index
from . import _layout as layout
from ._file import daemonize, locked, make_parents, prepare_file, translate, unavailable
from ._layout import SCHEMA_VERSION

if TYPE_CHECKING:
    from pathlib import Path


#: Reader connections per store (each one aiosqlite thread): restores of several agents at
#: once (a scan resuming them, ``status()`` under load) overlap their reads.
READERS = 2


class SQLiteConnections:
    """Mixin giving ``SQLiteStore`` its lifecycle and its connection access (see the module docstring).

    The state is the host's, set in ``SQLiteStore.__init__``: the URL's options
    (``path``, ``synchronous``, ``busy_timeout_ms``, ``create``), the writer
    connection ``_db`` and its ``_lock``, the ``_readers`` and their
    ``_read_locks``, and ``_absent`` (the file did not exist at open).
    """

    if TYPE_CHECKING:  # the host's (SQLiteStore, StoreBase), declared for the type checker
        path: Path
        synchronous: str
        busy_timeout_ms: int
        create: bool
        _db: aiosqlite.Connection | None
        _readers: list[aiosqlite.Connection]
        _read_locks: list[anyio.Lock]
        _next_reader: int
        _absent: bool
        _lock: anyio.Lock
        _is_open: bool

    #: True from a ``fsync=False`` transaction's start until ``synchronous`` is the URL's again.
    _unsynced_writer = False

    # -- lifecycle ---------------------------------------------------------------

    async def _open(self) -> None:
        if sqlite3.sqlite_version_info < layout.MIN_SQLITE:
            raise StoreUnavailableError(
                f"the sqlite adapter needs SQLite >= {'.'.join(map(str, layout.MIN_SQLITE))} (RETURNING); "
                f"this Python links {sqlite3.sqlite_version}"
            )
        # A file that is not there yet is created by the first write, not here: reading
        # through a mistyped path must not leave an empty database behind.
        try:
            self._absent = not await anyio.to_thread.run_sync(self.path.exists)
            if self._absent:  # a mistyped folder is refused, not created (unless ?create=1)
                await anyio.to_thread.run_sync(partial(check_parent, self.path, create=self.create, url=str(self.path)))
                if self.create:
                    await anyio.to_thread.run_sync(make_parents, self.path)
        except OSError as exc:  # a name too long, a path through a file, no permission: the SPI's outage, typed
            raise StoreUnavailableError(f"cannot use {self.path}: {exc}") from exc
        if not self._absent:
            await self._connect()

    async def _connect(self) -> None:
        """Create the file (owner-only) if missing, connect, set it up."""
        try:
            await anyio.to_thread.run_sync(prepare_file, self.path)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot create {self.path}: {exc}") from exc
        db = await self._new_connection()
        try:
            await self._prepare_connection(db)
            readers: list[aiosqlite.Connection] = []
            try:
                for _ in range(READERS):
                    readers.append(await self._connect_reader())
            except BaseException:
                with anyio.CancelScope(shield=True):
                    for reader in readers:
                        await reader.close()
                raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await db.close()
            raise
        self._db, self._readers = db, readers

    async def _new_connection(self) -> aiosqlite.Connection:
        """A connection to the file, on a daemon aiosqlite thread; ``StoreUnavailableError`` if
        SQLite refuses it. ``isolation_level`` None: autocommit, so a lone write statement is
        its own transaction (the fast append path), a read its own read transaction; longer
        transactions ``BEGIN IMMEDIATE``."""
        try:
            connecting = aiosqlite.connect(
                self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None, cached_statements=256
            )
            daemonize(connecting)
            return await connecting
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc

    async def _connect_reader(self) -> aiosqlite.Connection:
        """The reader connection (to a file the writer has set up): autocommit, so each
        read is its own read transaction and sees every commit before it; query_only."""
        reader = await self._new_connection()
        try:
            await reader.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await reader.close()
            if isinstance(exc, sqlite3.Error):
                raise unavailable(exc) from exc
            raise
        return reader

    async def _prepare_connection(self, db: aiosqlite.Connection) -> None:
        """Set the connection up, retrying while another connection holds the file's lock.

        Two connections opening a fresh file at once both hold a shared lock when they
        switch it to WAL; SQLite then refuses one with SQLITE_BUSY at once instead of
        calling the busy handler (waiting could deadlock), so the busy timeout alone does
        not cover it. Every step is idempotent, so the whole set-up is tried again, with
        jittered backoff, until ``busy_timeout`` has passed (tenacity is imported only then).
        """
        try:
            await self._set_up(db)
            return  # the common case: no other connection was setting the file up
        except sqlite3.Error as exc:
            if not locked(exc):
                raise unavailable(exc) from exc
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

        retrying = AsyncRetrying(
            retry=retry_if_exception(locked),
            stop=stop_after_delay(self.busy_timeout_ms / 1000),
            wait=wait_random_exponential(multiplier=0.005, max=0.2),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._set_up(db)
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc

    async def _set_up(self, db: aiosqlite.Connection) -> None:
        """Check the schema version, set the pragmas, create the schema if missing."""
        await self._schema_version(db)  # before any write: a newer file is left untouched
        ((mode,),) = await db.execute_fetchall("PRAGMA journal_mode = WAL")
        if str(mode).lower() != "wal":
            raise StoreUnavailableError(f"{self.path}: SQLite refused WAL journal mode (got {mode!r})")
        await db.execute(f"PRAGMA synchronous = {self.synchronous}")
        await db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        # Deleted rows (purge, compaction) are overwritten with zeros, freelist pages
        # included, so a purged value cannot be read back from the file.
        await db.execute("PRAGMA secure_delete = ON")
        await db.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have just created it.
            if await self._schema_version(db) < SCHEMA_VERSION:
                for statement in layout.SCHEMA:
                    await db.execute(statement)
                await sqlite_index.upgrade(db)
                await db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            await db.commit()
        except BaseException:
            await self._rollback(db)
            raise

    async def _schema_version(self, db: aiosqlite.Connection) -> int:
        """The file's ``user_version``; ``UnknownSchemaVersionError`` when newer than ``SCHEMA_VERSION``."""
        ((version,),) = await db.execute_fetchall("PRAGMA user_version")
        if version > SCHEMA_VERSION:
            raise UnknownSchemaVersionError(f"durably sqlite schema of {self.path}", version, SCHEMA_VERSION)
        return int(version)

    async def _close(self) -> None:
        # Taking the lock lets an in-flight transaction finish before the connection
        # goes; shielded so a cancelled close still joins aiosqlite's thread.
        with anyio.CancelScope(shield=True):
            readers, self._readers = self._readers, []
            for reader, lock in zip(readers, self._read_locks, strict=False):
                async with lock:
                    await reader.close()
            async with self._lock:
                db, self._db = self._db, None
                if db is not None:
                    await db.close()  # returns once aiosqlite's worker thread has stopped

    # -- connection access -------------------------------------------------------

    @asynccontextmanager
    async def _transaction(self, *, fsync: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        """Hold the connection for one ``BEGIN IMMEDIATE`` write transaction; commit on success.

        Shielded from cancellation: a transaction, once started, ends in COMMIT or
        ROLLBACK, never half-open. SQLite errors roll back and become
        ``StoreUnavailableError``. ``fsync=False`` commits without syncing the WAL
        (``synchronous = NORMAL`` for this one transaction): visible to every connection
        at once and kept across a process crash, made durable by the next synced commit
        (the WAL is a log: a synced frame makes every frame before it durable); only a
        power loss or an OS crash before that commit can undo it.
        """
        async with self._lock:
            db = await self._ready(create=True)
            with anyio.CancelScope(shield=True):
                relaxed = not fsync and self.synchronous != "NORMAL"
                try:
                    if relaxed:
                        self._unsynced_writer = True
                        await db.execute("PRAGMA synchronous = NORMAL")
                    await db.execute("BEGIN IMMEDIATE")
                    yield db
                    if db.in_transaction:
                        await db.commit()
                except BaseException as exc:
                    await self._rollback(db)
                    translated = translate(exc)
                    if translated is exc:
                        raise
                    raise translated from exc
                finally:
                    if relaxed:
                        await self._resync(db)

    async def _resync(self, db: aiosqlite.Connection) -> None:
        """Put the writer's ``synchronous`` back to the URL's after a ``fsync=False`` transaction.

        Until that succeeds no write runs: ``_ready`` tries again before each one, so a
        failure here is an outage (``StoreUnavailableError``), never an unsynced append.
        """
        try:
            await db.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc
        self._unsynced_writer = False

    @staticmethod
    async def _rollback(db: aiosqlite.Connection) -> None:
        try:
            await db.rollback()
        except sqlite3.Error:
            pass  # SQLite already rolled back (it does on some I/O errors); nothing to undo

    async def _write(self, sql: str, params: Sequence[object]) -> int:
        """Run one write statement in autocommit mode (its own transaction: one hop,
        durable on return); returns the rows it changed. Shielded from cancellation,
        so the caller always learns the outcome."""
        async with self._lock:
            db = await self._ready(create=True)
            with anyio.CancelScope(shield=True):
                try:
                    cursor = await db.execute(sql, params)
                except (sqlite3.Error, UnicodeEncodeError) as exc:
                    raise translate(exc) from exc
            return cursor.rowcount  # after the scope: mypy cannot know a shield never swallows

    async def _fetch(self, sql: str, params: Sequence[object], *, writer: bool = False) -> list[Any]:
        """Run one read statement (autocommit, so it sees only committed data) on the
        reader connection, or on the writer's (``writer``: a WAL checkpoint)."""
        if writer or not self._readers:  # also: a file absent at open, connected (or not) here
            async with self._lock:
                db = await self._ready(create=False)
                if db is None:
                    return []  # no file yet: nothing stored
                return await self._run_read(db, sql, params)
        # A free reader if there is one, else the next in turn.
        free = [i for i, lock in enumerate(self._read_locks) if not lock.locked()]
        if free:
            choice = free[0]
        else:
            choice = self._next_reader = (self._next_reader + 1) % READERS
        async with self._read_locks[choice]:
            if not self._readers:
                raise StoreClosedError("SQLiteStore is not open")
            return await self._run_read(self._readers[choice], sql, params)

    @staticmethod
    async def _run_read(db: aiosqlite.Connection, sql: str, params: Sequence[object]) -> list[Any]:
        try:
            return list(await db.execute_fetchall(sql, params))
        except (sqlite3.Error, UnicodeEncodeError) as exc:
            raise translate(exc) from exc

    def _connection(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreClosedError("SQLiteStore is not open")
        return self._db

    @overload
    async def _ready(self, *, create: Literal[True]) -> aiosqlite.Connection: ...

    @overload
    async def _ready(self, *, create: bool) -> aiosqlite.Connection | None: ...

    async def _ready(self, *, create: bool) -> aiosqlite.Connection | None:
        """The connection, under ``self._lock``; for a file absent at open, None while it
        still is (reads see an empty store), or connected now: created by a write
        (``create``), or found because another process created it meanwhile."""
        if self._db is None and self._absent and self._is_open:
            if not create and not await anyio.to_thread.run_sync(self.path.exists):
                return None
            await self._connect()
            self._absent = False
        db = self._connection()
        if self._unsynced_writer:  # a fsync=False transaction could not put synchronous back
            await self._resync(db)
        return db
