"""The stored-data side of ``Runtime``: purge, sweep (retention) and reencrypt (key rotation).

These delete or rewrite what the store keeps of a namespace's agents, on an
operator's word or a retention policy, and each is a thin call into the module
that holds its logic (``retention``, ``reencrypt``). They are separate from
``runtime`` (one idea per module): ``Runtime`` inherits this mixin, as it does
``Inspection``; it provides ``store``, ``codec``, ``telemetry``, ``namespace``,
``stream()``, its live actors and the snapshot writer (a purge stops the one
and drops what the other queued). ``retention`` and ``reencrypt`` are imported
when first called: a runtime that only runs agents never loads them (import time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durably.errors import AgentNotFoundError

if TYPE_CHECKING:
    from durably._journal.records import RecordCodec
    from durably._journal.writer import JournalServices
    from durably._loop.actor import AgentActor
    from durably._telemetry import Telemetry
    from durably._upkeep.reencrypt import ReencryptReport
    from durably._upkeep.retention import RetentionPolicy, SweepItem
    from durably.storage._spi import Store, StreamId


class Housekeeping:
    """Methods of ``Runtime`` that delete or rewrite stored agents (see the module docstring)."""

    if TYPE_CHECKING:  # the host's (Runtime), declared for the type checker
        store: Store
        codec: RecordCodec
        telemetry: Telemetry
        namespace: str
        _live: dict[str, AgentActor]
        _services: JournalServices

        def stream(self, agent_id: str) -> StreamId: ...

    async def purge(self, agent_id: str) -> None:
        """Delete everything stored of an agent in this namespace: records, snapshots, blobs, its seq.

        The id may then be started anew, as a new run (fresh run id, so fresh
        idempotency keys): nothing of the old one is seen. A live activation in
        this runtime is stopped first and its queued snapshot dropped. Another
        process still running the agent is fenced at its next append (the
        stream it expects is gone).

        Args:
            agent_id: The agent in this runtime's namespace.

        Raises:
            AgentNotFoundError: Nothing of the agent is stored.
            PurgeIncompleteError: Something of the stream is left after the delete.
            StoreUnavailableError: The store cannot be reached.
        """
        stream = self.stream(agent_id)
        if await self.store.last_seq(stream) == 0:
            listed = [s async for s in self.store.list_streams(self.namespace, agent_id)]
            if stream not in listed:
                raise AgentNotFoundError(f"no agent {agent_id!r} in namespace {self.namespace!r}")
        await self._purge_stream(stream)

    async def sweep(
        self, retention: RetentionPolicy, *, now: float | None = None, dry_run: bool = False
    ) -> list[SweepItem]:
        """Purge this namespace's agents whose time-to-live (by status, from their last record) has passed.

        A stream that cannot be read or dated is kept (and reported so).

        Args:
            retention: The ``durably.RetentionPolicy`` setting the TTLs.
            now: Unix seconds to measure ages from (None: the clock).
            dry_run: Report what would be purged (``expired``) without deleting.

        Returns:
            One ``durably.SweepItem`` per agent looked at (what was done and
                why), in the store's listing order.

        Raises:
            InvalidArgumentError: ``now`` is NaN or infinite (before anything is read or purged).
            ArgumentTypeError: ``now`` is not a number, ``dry_run`` not a bool or
                ``retention`` not a ``RetentionPolicy`` (before anything is read or purged).
            StoreUnavailableError: The store cannot be reached.
            PurgeIncompleteError: A purge left something of a stream behind.
        """
        from durably._upkeep.retention import sweep

        return await sweep(
            self.store,
            self.codec,
            self.namespace,
            retention,
            telemetry=self.telemetry,
            now=now,
            dry_run=dry_run,
            purge=self._purge_stream,
        )

    async def reencrypt(self) -> list[ReencryptReport]:
        """Rewrite this namespace's streams so every frame uses the current key.

        The history before the rewrite is compacted into a snapshot (see
        ``durably reencrypt``).

        Returns:
            One ``durably.ReencryptReport`` per stream, in the store's listing
                order.

        Raises:
            InvalidArgumentError: The runtime has no ``encryption`` (a
                ``ValueError``; raised at the first stream, so an empty
                namespace returns ``[]``).
            DecryptionError: A frame does not decrypt (also ``UnknownKeyError``);
                that stream is not changed.
            ConflictError: A live writer kept appending to a stream.
        """
        from durably._upkeep.reencrypt import reencrypt

        return await reencrypt(self.store, self.codec, self.namespace, telemetry=self.telemetry)

    async def _purge_stream(self, stream: StreamId) -> None:
        actor = self._live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            actor.cancel_scope.cancel()
            await actor.done.wait()
        await self._services.snapshots.discard(stream)
        from durably._upkeep.retention import purge_stream

        await purge_stream(self.store, stream)
