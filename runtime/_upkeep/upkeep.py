"""The upkeep part of ``Runtime``: purge, sweep (retention) and reencrypt (key rotation).

These delete or rewrite what the store keeps of a namespace's agents, on an
operator's word or a retention policy, and each is a call into the module that
holds its logic (``retention``, ``reencrypt``), imported when first called: a
runtime that only runs agents never loads them (import time). ``Upkeep`` holds
the store, codec, telemetry and namespace, and the runtime's ``Activations``
(a purge stops a live activation here and drops the snapshot it queued). Every
rewrite of a stream another worker may be running (reencrypt, purge, a sweep's
purge) is made under that stream's lease (``durably._upkeep.exclusive``), so
nothing a live worker holds is thrown away. The contracts are on the
``Runtime`` methods of the same names, which delegate here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from durably.errors import AgentLeasedError, AgentNotFoundError
from durably.storage._spi import Lease, StreamId

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._journal.records import RecordCodec
    from durably._telemetry import Telemetry
    from durably._upkeep.exclusive import RewriteLeases
    from durably._upkeep.reencrypt import ReencryptReport
    from durably._upkeep.retention import RetentionPolicy, SweepItem
    from durably.storage._spi import Store


class Upkeep:
    """Deletes or rewrites the stored agents of one namespace (see the module docstring)."""

    def __init__(
        self, store: Store, codec: RecordCodec, telemetry: Telemetry, namespace: str, activations: Activations
    ) -> None:
        self.store = store
        self.codec = codec
        self.telemetry = telemetry
        self.namespace = namespace
        self.activations = activations
        self._rewrites: RewriteLeases | None = None

    async def purge(self, agent_id: str, *, force: bool = False) -> None:
        """``Runtime.purge``."""
        stream = StreamId(self.namespace, agent_id)
        if await self.store.last_seq(stream) == 0:
            listed = [s async for s in self.store.list_streams(self.namespace, agent_id)]
            if stream not in listed:
                raise AgentNotFoundError(f"no agent {agent_id!r} in namespace {self.namespace!r}")
        if force:
            await self._purge_stream(stream)
        else:
            await self._purge_held(stream)

    async def sweep(
        self, retention: RetentionPolicy, *, now: float | None = None, dry_run: bool = False
    ) -> list[SweepItem]:
        """``Runtime.sweep``."""
        from durably._upkeep.retention import sweep

        return await sweep(
            self.store,
            self.codec,
            self.namespace,
            retention,
            telemetry=self.telemetry,
            now=now,
            dry_run=dry_run,
            purge=self._purge_held,
        )

    async def reencrypt(self, *, wait: float) -> list[ReencryptReport]:
        """``Runtime.reencrypt``."""
        from durably._upkeep.reencrypt import reencrypt

        return await reencrypt(
            self.store, self.codec, self.namespace, telemetry=self.telemetry, held=self._rewriting, wait=wait
        )

    @asynccontextmanager
    async def _rewriting(self, stream: StreamId) -> AsyncIterator[Lease | None]:
        """Hold ``stream`` for a rewrite (``RewriteLeases.held``); ``AgentLeasedError`` when a live
        worker runs it, this runtime included (on a store without leases, its only workers)."""
        if stream.namespace == self.namespace and stream.agent_id in self.activations.live:
            raise AgentLeasedError(stream.agent_id, self.activations.leases.owner, None)
        if self._rewrites is None:
            from durably._upkeep.exclusive import RewriteLeases

            leases = self.activations.leases
            self._rewrites = RewriteLeases(self.store, self.activations.worker_id, leases.ttl, leases.is_dead)
        async with self._rewrites.held(stream) as lease:
            yield lease

    async def _purge_held(self, stream: StreamId) -> None:
        """Purge ``stream`` under its lease: ``AgentLeasedError`` while another live worker runs it.
        An activation of this runtime is stopped first (its own caller asked for the purge)."""
        actor = self.activations.live.get(stream.agent_id) if stream.namespace == self.namespace else None
        await self.activations.evict(stream)
        if actor is not None:
            await actor.exited.wait()  # its lease given back: ours to take
        from durably._upkeep.retention import purge_stream

        async with self._rewriting(stream):
            await purge_stream(self.store, stream)

    async def _purge_stream(self, stream: StreamId) -> None:
        await self.activations.evict(stream)
        from durably._upkeep.retention import purge_stream

        await purge_stream(self.store, stream)
