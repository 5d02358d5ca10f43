"""Leases (``CAP_LEASES``) of the PostgreSQL adapter: which worker runs a stream now.

One row per stream in ``leases`` (schema version 2), keyed by namespace and
agent id, not by the ``streams`` row, so a lease never makes a stream exist.

* **Acquire** is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` statement:
  the row is locked from the check to the write, so of workers racing for a
  free or expired lease, on any number of hosts, exactly one gets it; the
  others' WHERE fails on the row the winner committed and they get no row.
* **Fencing tokens come from a database sequence** (``lease_tokens``): taking
  a free, released or expired lease writes ``nextval``, which is greater than
  every token the sequence ever gave, for this stream or any other, across
  releases, purges, reopen and server restarts; a renewal by the owner of an
  unexpired lease keeps its token. Release keeps the row and marks it expired.
* **The clock is the database's** (``clock_timestamp()``, unix seconds), one
  clock for every worker, so lease expiry does not depend on the workers'
  clocks agreeing; ``expires_at`` is in that clock.
* **Renewing many** (``CAP_LEASE_RENEW``) is one ``UPDATE ... FROM unnest(...)``: only rows
  still held by the owner under the same token and unexpired move their expiry.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from durably.storage._spi import Lease, StreamId, check_lease, check_lease_renewal

if TYPE_CHECKING:
    import asyncpg

_NOW = "extract(epoch FROM clock_timestamp())::double precision"


class PostgresLeases:
    """Mixin giving ``PostgresStore`` the ``LeaseStore`` methods (see ``durably.storage._spi``).

    Relies on the host's ``_check_open()``, ``_fetch(what, sql, *args)``,
    ``_execute(what, sql, *args)`` and ``_sql``. Errors as the host's: ``StoreClosedError``,
    ``InvalidRequestError`` (owner, ttl), ``StoreUnavailableError`` past the retry deadline.
    A retried acquire is safe: if the first attempt took the lease, the retry finds
    its own unexpired lease and renews it with the same token.
    """

    if TYPE_CHECKING:  # the host's (PostgresStore), declared for the type checker
        _sql: dict[str, str]

        def _check_open(self) -> None: ...

        async def _fetch(self, what: str, sql: str, *args: Any) -> list[asyncpg.Record]: ...

        async def _execute(self, what: str, sql: str, *args: Any) -> str: ...

    @staticmethod
    def _lease_sql(s: str) -> dict[str, str]:
        return {
            "acquire_lease": (
                f"INSERT INTO {s}.leases AS l (namespace, agent_id, owner, token, expires_at) "
                f"VALUES ($1, $2, $3, nextval('{s}.lease_tokens'), {_NOW} + $4) "
                "ON CONFLICT (namespace, agent_id) DO UPDATE SET "
                f"token = CASE WHEN l.owner = excluded.owner AND l.expires_at > {_NOW} THEN l.token ELSE excluded.token END, "
                "owner = excluded.owner, expires_at = excluded.expires_at "
                f"WHERE l.owner = excluded.owner OR l.expires_at <= {_NOW} "
                "RETURNING token, expires_at"
            ),
            "renew_leases": (
                f"UPDATE {s}.leases AS l SET expires_at = {_NOW} + $2 "
                "FROM unnest($3::text[], $4::text[], $5::bigint[]) AS r (namespace, agent_id, token) "
                "WHERE l.namespace = r.namespace AND l.agent_id = r.agent_id AND l.token = r.token "
                f"AND l.owner = $1 AND l.expires_at > {_NOW} "
                "RETURNING l.namespace, l.agent_id, l.token, l.expires_at"
            ),
            "release_lease": f"UPDATE {s}.leases SET expires_at = 0 WHERE namespace = $1 AND agent_id = $2 "
            "AND owner = $3 AND token = $4",
            "get_lease": f"SELECT owner, token, expires_at FROM {s}.leases WHERE namespace = $1 AND agent_id = $2 "
            f"AND expires_at > {_NOW}",
            "delete_lease": f"DELETE FROM {s}.leases WHERE namespace = $1 AND agent_id = $2",
        }

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take, or renew, the lease of ``stream`` for ``owner`` for ``ttl`` seconds; see ``LeaseStore.acquire_lease``.

        One ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` statement, atomic in the database. A
        free, released or expired lease is taken with a new token from the ``lease_tokens``
        sequence, also by its former owner; only an unexpired lease is renewed in place,
        keeping its token. ``expires_at`` is in unix seconds of the database's clock. A retried
        acquire is safe: if the first attempt took the lease, the retry renews it.

        Args:
            stream: The stream to lease.
            owner: The worker's name, a non-empty string.
            ttl: How long the lease lasts, in seconds, finite and > 0.

        Returns:
            The lease now held by ``owner``, or None when another owner holds an unexpired one
                (nothing changed).

        Raises:
            InvalidRequestError: For an empty owner or a ttl that is not a finite number > 0
                (``check_lease``), before any I/O.
        """
        self._check_open()
        check_lease(owner, ttl)
        rows = await self._fetch(
            "acquire_lease", self._sql["acquire_lease"], stream.namespace, stream.agent_id, owner, float(ttl)
        )
        if not rows:
            return None
        token, expires_at = rows[0]
        return Lease(stream, owner, token, expires_at)

    async def renew_leases(self, owner: str, ttl: float, leases: Collection[Lease]) -> list[Lease]:
        """Renew each of ``leases`` still ``owner``'s under its token and unexpired; see ``LeaseRenewStore.renew_leases``.

        One ``UPDATE ... FROM unnest(...)`` for them all, by the database's clock. A retried
        call is safe: a lease the first attempt renewed is renewed again.

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
        if not wanted:
            return []
        rows = await self._fetch(
            "renew_leases",
            self._sql["renew_leases"],
            owner,
            float(ttl),
            [lease.stream.namespace for lease in wanted],
            [lease.stream.agent_id for lease in wanted],
            [lease.token for lease in wanted],
        )
        return [
            Lease(StreamId(namespace, agent_id), owner, token, expires_at)
            for namespace, agent_id, token, expires_at in rows
        ]

    async def release_lease(self, lease: Lease) -> None:
        """End ``lease`` if its owner still holds it with its token; otherwise (stale, foreign, unknown) a no-op.

        One ``UPDATE`` that marks the row expired and keeps it.

        Args:
            lease: The lease as ``acquire_lease`` returned it.
        """
        self._check_open()
        stream = lease.stream
        await self._execute(
            "release_lease", self._sql["release_lease"], stream.namespace, stream.agent_id, lease.owner, lease.token
        )

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """The unexpired lease of ``stream``, by the database's clock: one query.

        Args:
            stream: The stream to look up.

        Returns:
            The lease, or None when none is held.
        """
        self._check_open()
        rows = await self._fetch("get_lease", self._sql["get_lease"], stream.namespace, stream.agent_id)
        if not rows:
            return None
        owner, token, expires_at = rows[0]
        return Lease(stream, owner, token, expires_at)
