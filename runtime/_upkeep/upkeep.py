"""The upkeep part of ``Runtime``: purge, sweep (retention) and reencrypt (key rotation).

These delete or rewrite what the store keeps of a namespace's agents, on an
operator's word or a retention policy, and each is a call into the module that
holds its logic (``retention``, ``reencrypt``), imported when first called: a
runtime that only runs agents never loads them (import time). ``Upkeep`` holds
the store, codec, telemetry and namespace, and the runtime's ``Activations``
(a purge stops a live activation here and drops the snapshot it queued). The
contracts are on the ``Runtime`` methods of the same names, which delegate here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durably.errors import AgentNotFoundError
from durably.storage._spi import StreamId

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._journal.records import RecordCodec
    from durably._telemetry import Telemetry
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

    async def purge(self, agent_id: str) -> None:
        """``Runtime.purge``."""
        stream = StreamId(self.namespace, agent_id)
        if await self.store.last_seq(stream) == 0:
            listed = [s async for s in self.store.list_streams(self.namespace, agent_id)]
            if stream not in listed:
                raise AgentNotFoundError(f"no agent {agent_id!r} in namespace {self.namespace!r}")
        await self._purge_stream(stream)

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
            purge=self._purge_stream,
        )

    async def reencrypt(self) -> list[ReencryptReport]:
        """``Runtime.reencrypt``."""
        from durably._upkeep.reencrypt import reencrypt

        return await reencrypt(self.store, self.codec, self.namespace, telemetry=self.telemetry)

    async def _purge_stream(self, stream: StreamId) -> None:
        await self.activations.evict(stream)
        from durably._upkeep.retention import purge_stream

        await purge_stream(self.store, stream)
