"""Leases (``CAP_LEASES``) for the SQLite adapter: which worker runs a stream now.

One row per stream in a ``leases`` table, keyed by namespace and agent id (not
by the ``streams`` row, so a lease never makes a stream exist: ``list_streams``
and ``last_seq`` do not see it). A released or expired lease keeps its row with
its last token, so the next owner's token is that token + 1: tokens never
decrease for a stream id, across owners, releases, expiry, reopen and purge.
``delete_stream`` keeps the row too: it ends the lease and empties its owner
(``_end_lease``), and the token stays the floor of the next one. An empty owner
is what marks a lease ended by a purge: no fencing token is admitted by it
(``durably.adapters.sqlite._fencing``), while an expired or released lease still
admits its holder's token until another owner takes it.

The table is created lazily, by the first ``acquire_lease`` on a file
(``CREATE TABLE IF NOT EXISTS`` inside its write transaction), and not by
``open``: a file on which no lease was ever taken keeps exactly the schema of
its ``SCHEMA_VERSION``, so older files (the golden v1 database) are neither
changed nor refused, and no version bump is needed. Reads and releases on a
file without the table answer "no lease".

Clock: ``time.time()`` of the calling process, read when the statement runs in
its lease transaction (write lock held), not when the call was made: a call may
wait in the lease queue and for the lock, and a lease that expired meanwhile must
be seen expired. Processes sharing the file are on one machine, so they share that clock.

Atomicity: acquire is one upsert (check and write in the same statement) inside
a ``BEGIN IMMEDIATE`` transaction, so the write lock is held from the check to
the commit: of two connections racing for a free or expired lease, in one
process or several, exactly one gets it.

Group commit: acquisitions and releases made while another one is being
committed wait and then share one transaction (the leader/follower scheme of
``durably.storage._group_commit``), so a scan resuming ten agents pays about two
lease transactions, not ten. Each statement keeps its own outcome.

Durability: lease transactions commit without syncing the WAL (``synchronous =
NORMAL`` for that transaction, with the URL's ``synchronous=FULL``). A committed
lease is visible to every process at once and survives a process crash (it is in
the WAL); only a power loss or OS crash before the next synced commit can undo
it, and that stops every process on the machine, its holder included (processes
sharing a SQLite file share a machine). Nothing durable is done under a lease
without a synced append, and syncing the WAL makes every frame before it durable
(the WAL is a log replayed up to its last valid frame), so no surviving record
depends on a lease that was undone, and a token reissued after such a loss was
used by nothing that lasted. What it saves: two fsyncs per agent run (the lease
taken at start, given back at the end).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from durably.storage._spi import Lease, StreamId, check_lease, check_lease_renewal

if TYPE_CHECKING:
    import aiosqlite

_CREATE_TABLE = """CREATE TABLE IF NOT EXISTS leases (
    namespace TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    token INTEGER NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (namespace, agent_id)
) WITHOUT ROWID"""

# Take a free lease (token 1), take over a released or expired one (token + 1),
# or renew one this owner holds (same token); all in one statement. In the DO
# UPDATE part a bare column is the stored row, ``excluded`` the proposed one, and
# every SET expression reads the stored row as it was before the update. When
# another owner holds an unexpired lease the WHERE fails: nothing is written and
# RETURNING yields no row.
_ACQUIRE = """INSERT INTO leases (namespace, agent_id, owner, token, expires_at)
VALUES (:namespace, :agent_id, :owner, 1, :expires_at)
ON CONFLICT (namespace, agent_id) DO UPDATE SET
    token = CASE WHEN owner = excluded.owner AND expires_at > :now THEN token ELSE token + 1 END,
    owner = excluded.owner,
    expires_at = excluded.expires_at
WHERE owner = excluded.owner OR expires_at <= :now
RETURNING token, expires_at"""

# Renew many leases of one owner in one statement: each row still held by the owner under the
# same token and unexpired gets the new expiry; any other row (released, expired, purged, taken
# by another owner or granted again under a new token) is left as it is and not returned. The
# leases come as one JSON array of [namespace, agent_id, token] (one parameter whatever their
# number, so no limit on bound variables); the row-value IN looks each one up by primary key.
_RENEW = """UPDATE leases SET expires_at = :expires_at
WHERE owner = :owner AND expires_at > :now AND (namespace, agent_id, token) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
    FROM json_each(:leases)
)
RETURNING namespace, agent_id, token, expires_at"""

# Releasing ends the lease now but keeps the row: its token is the floor of the next one.
_RELEASE = "UPDATE leases SET expires_at = 0 WHERE namespace = ? AND agent_id = ? AND owner = ? AND token = ?"
_GET = "SELECT owner, token, expires_at FROM leases WHERE namespace = ? AND agent_id = ? AND expires_at > ?"
# A purge ends whoever's lease and forgets its owner, but keeps the row's token:
# tokens never decrease for a stream id, purge included.
_END = "UPDATE leases SET expires_at = 0, owner = '' WHERE namespace = ? AND agent_id = ?"
_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'leases'"


@dataclass(slots=True)
class _Queued:
    """One lease statement waiting for the next lease transaction, then its rows or error;
    ``done`` is set when the transaction that took it has ended (or gave it back unrun).
    ``params`` may be a function, called when the statement runs (for a clock read then)."""

    sql: str
    params: Callable[[], dict[str, Any]] | Any
    rows: list[Any] | None = None
    error: BaseException | None = None
    done: anyio.Event = field(default_factory=anyio.Event)


class SQLiteLeases:
    """Mixin giving ``SQLiteStore`` the ``LeaseStore`` methods (see ``durably.storage._spi``).

    It relies on the host's ``_check_open()``, ``_connection()``, ``_transaction()``
    (a ``BEGIN IMMEDIATE`` transaction yielding the aiosqlite connection, errors
    translated to the SPI's) and ``_fetch(sql, params)`` (one autocommitted read).
    Errors: ``StoreClosedError`` outside open/close, ``InvalidRequestError`` for a
    malformed call, ``StoreUnavailableError`` for SQLite errors (busy past the
    busy timeout, I/O).
    """

    #: The connection on which the ``leases`` table is known to exist (None: not
    #: checked yet). Compared by identity, so a reopened store checks again.
    _leases_checked_on: object | None = None
    _lease_queue: list[_Queued] | None = None
    _lease_lock: anyio.Lock | None = None

    async def _lease_statement(self, sql: str, params: Any) -> list[Any]:
        """Run ``sql`` in the next lease transaction, shared with every lease statement
        queued meanwhile (one commit, not synced); its rows. Errors as ``_transaction``'s."""
        if self._lease_lock is None:
            self._lease_lock, self._lease_queue = anyio.Lock(), []
        queue = self._lease_queue
        assert queue is not None
        mine = _Queued(sql, params)
        queue.append(mine)
        try:
            async with self._lease_lock:
                if mine.rows is None and mine.error is None:  # no leader took it: lead
                    batch = list(queue)
                    queue.clear()
                    await self._commit_leases(batch)
        except BaseException:
            if mine not in queue:
                # Cancelled once a leader took it: wait for the end of that one transaction
                # (shielded, as it is; its rows are set before the COMMIT), so the outcome is
                # settled when the cancellation goes on: an acquire granted meanwhile is then
                # committed, visible to the caller's clean-up read (LeaseKeeper gives it back).
                with anyio.CancelScope(shield=True):
                    await mine.done.wait()
            if mine in queue:
                queue.remove(mine)  # cancelled while waiting, never sent
            raise
        if mine.error is not None:
            raise mine.error
        assert mine.rows is not None
        return mine.rows

    async def _commit_leases(self, batch: list[_Queued]) -> None:
        try:
            # Not synced (see the module docstring, "Durability"): a lease only matters while
            # its holder lives, and whatever it does under the lease is a synced append later.
            async with self._transaction(fsync=False) as db:
                if self._leases_checked_on is not db:
                    await db.execute(_CREATE_TABLE)
                for queued in batch:
                    params = queued.params() if callable(queued.params) else queued.params
                    queued.rows = list(await db.execute_fetchall(queued.sql, params))
            self._leases_checked_on = db
        except Exception as exc:
            for queued in batch:
                queued.rows, queued.error = None, exc
        except BaseException:
            # Cancelled before the transaction began (once begun it is shielded): the
            # statements not run go back to the queue for the next leader, each with a new
            # ``done`` (the old one wakes a cancelled waiter, which then takes it out again).
            assert self._lease_queue is not None
            unrun = [queued for queued in batch if queued.rows is None]
            for queued in unrun:
                queued.done.set()
                queued.done = anyio.Event()
            self._lease_queue[:0] = unrun
            raise
        finally:
            for queued in batch:
                if queued.rows is not None or queued.error is not None:
                    queued.done.set()

    if TYPE_CHECKING:  # the host's (SQLiteStore), declared for the type checker
        _db: aiosqlite.Connection | None

        def _check_open(self) -> None: ...

        async def _fetch(self, sql: str, params: Sequence[object]) -> list[Any]: ...

        def _transaction(self, *, fsync: bool = True) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

        async def _has_leases_table(self, db: aiosqlite.Connection) -> bool: ...

    async def _leases_table_exists(self) -> bool:
        """Whether the file has the ``leases`` table (cached per connection once true)."""
        db = self._db  # None until a file absent at open exists
        if db is not None and self._leases_checked_on is db:
            return True
        if not await self._fetch(_HAS_TABLE, ()):
            return False
        self._leases_checked_on = self._db
        return True

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take, or renew, the lease of ``stream`` for ``owner`` for ``ttl`` seconds; see ``LeaseStore.acquire_lease``.

        One upsert (check and write in the same statement) in a ``BEGIN IMMEDIATE``
        transaction shared with the lease statements queued meanwhile (one fsync for them
        all); the first one on a file creates the ``leases`` table. A lease that expired is
        taken anew with the next token (the stored one + 1), also by its former owner; only an
        unexpired lease is renewed in place, keeping its token. ``expires_at`` is in unix
        seconds of this process's clock (``time.time()``).

        Args:
            stream: The stream to lease.
            owner: The worker's name, a non-empty string.
            ttl: How long the lease lasts, in seconds, finite and > 0.

        Returns:
            The lease now held by ``owner``, or None when another owner holds an unexpired
                one (nothing changed).

        Raises:
            InvalidRequestError: For an empty owner or a ttl that is not a finite number > 0
                (``check_lease``), before any I/O.
        """
        self._check_open()
        check_lease(owner, ttl)

        def params() -> dict[str, Any]:
            # Read the clock once the write lock is held, not before the wait for it: a lease of
            # this owner that expired meanwhile is then taken anew under the next token, never
            # renewed in place under the old one.
            now = time.time()
            return {
                "namespace": stream.namespace,
                "agent_id": stream.agent_id,
                "owner": owner,
                "now": now,
                "expires_at": now + ttl,
            }

        rows = await self._lease_statement(_ACQUIRE, params)
        if not rows:
            return None
        ((token, expires_at),) = rows
        return Lease(stream, owner, token, expires_at)

    async def renew_leases(self, owner: str, ttl: float, leases: Collection[Lease]) -> list[Lease]:
        """Renew each of ``leases`` still ``owner``'s under its token and unexpired; see ``LeaseRenewStore.renew_leases``.

        One ``UPDATE`` for them all, in the lease transaction shared with the lease statements
        queued meanwhile (as ``acquire_lease``), so a runtime's renewal round is one statement
        instead of one per lease. The clock is this process's ``time.time()``, as
        ``acquire_lease``'s; no write at all on a file without the ``leases`` table.

        Args:
            owner: The worker's name, a non-empty string; every lease's owner.
            ttl: How long each renewed lease lasts, in seconds, finite and > 0.
            leases: The leases to renew, one per stream.

        Returns:
            The leases renewed (same token, new ``expires_at``), in no particular order.

        Raises:
            InvalidRequestError: For a malformed call (``check_lease_renewal``), before any I/O.
        """
        self._check_open()
        wanted = check_lease_renewal(owner, ttl, leases)
        if not wanted or not await self._leases_table_exists():
            return []
        listed = json.dumps([[lease.stream.namespace, lease.stream.agent_id, lease.token] for lease in wanted])

        def params() -> dict[str, Any]:
            # The clock is read inside the lease transaction, write lock held: read before the
            # wait in the lease queue and for the lock, it could renew a lease that expired
            # during that wait, which the batch promises never to revive.
            now = time.time()
            return {"owner": owner, "now": now, "expires_at": now + ttl, "leases": listed}

        rows = await self._lease_statement(_RENEW, params)
        return [
            Lease(StreamId(namespace, agent_id), owner, token, expires_at)
            for namespace, agent_id, token, expires_at in rows
        ]

    async def release_lease(self, lease: Lease) -> None:
        """End ``lease`` if its owner still holds it with its token; otherwise (stale, foreign, unknown) a no-op.

        Keeps the row, marked expired, so its token is the floor of the next one. Shares a
        transaction with the lease statements queued meanwhile; no write at all on a file
        without the ``leases`` table.

        Args:
            lease: The lease as ``acquire_lease`` returned it.
        """
        self._check_open()
        if not await self._leases_table_exists():
            return
        stream = lease.stream
        await self._lease_statement(_RELEASE, (stream.namespace, stream.agent_id, lease.owner, lease.token))

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """The unexpired lease of ``stream``, by this process's clock: one read.

        Args:
            stream: The stream to look up.

        Returns:
            The lease, or None when none is held (also on a file without the ``leases`` table).
        """
        self._check_open()
        if not await self._leases_table_exists():
            return None
        rows = await self._fetch(_GET, (stream.namespace, stream.agent_id, time.time()))
        if not rows:
            return None
        ((owner, token, expires_at),) = rows
        return Lease(stream, owner, token, expires_at)

    async def _end_lease(self, db: aiosqlite.Connection, stream: StreamId) -> None:
        """End ``stream``'s lease, whoever holds it, on ``db`` inside the caller's write transaction
        (``delete_stream``'s): the owner is emptied, which no fence ever matches, and the token
        stays as the floor of the next one (tokens never decrease, purge included)."""
        if await self._has_leases_table(db):
            await db.execute(_END, (stream.namespace, stream.agent_id))
