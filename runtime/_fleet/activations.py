"""Who runs what here: ``Activations``, the part of ``Runtime`` that owns its live agents.

An activation takes the agent's lease, restores its journal (or begins one),
journals its ``started`` or ``resumed`` record under its ``invoke_agent``
span, spawns its actor in the runtime's task group, and, once the actor
stops, gives the lease back under the agent id's lock. ``Activations`` holds
the state this needs (the live actors, the per-id locks, the lease keeper, the
journal services, the draining flag) and the callbacks on live actors (a lease
lost to another runtime, a snapshot written). ``Runtime.start``, ``resume`` and
``status`` delegate here; the fleet's scans and wake-ups and the operator's
commands are handed this object, never the ``Runtime``.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from durably import _telemetry as tm
from durably._fleet import fleet_metrics
from durably._fleet.blocked import BlockedAgents
from durably._fleet.handle import AgentHandle
from durably._fleet.single_flight import KeyedLock
from durably._fleet.timers import WakeClock
from durably._functions.actor import FunctionActor
from durably._functions.definition import FunctionAgent
from durably._journal import status_index
from durably._journal.restore import Restored, restore
from durably._journal.snapshots import SnapshotPolicy
from durably._journal.writer import AgentJournal
from durably._loop import timers
from durably._loop.actor import AgentActor
from durably._loop.limits import Admission
from durably._loop.live import LiveEvents
from durably._loop.state import NEEDS_MIGRATION, RUNNING, SLEEPING, AgentState
from durably.errors import (
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentNotFoundError,
    CodecError,
    DefinitionNotRegisteredError,
    LangGraphThreadError,
    RuntimeNotStartedError,
)
from durably.schemas._records import Kind, Record
from durably.storage._spi import StreamId

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from opentelemetry import trace

    from durably._fleet.leases import LeaseKeeper
    from durably._journal.claim import LeaseClaim
    from durably._journal.records import RecordCodec
    from durably._journal.writer import JournalServices
    from durably._loop.agent import AgentDefinition, Budget
    from durably._loop.child_calls import ChildAgents
    from durably._telemetry import Telemetry
    from durably.storage._spi import Lease, Store

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path

#: ``resume(force=True)`` waits up to this many lease ttls for the holder's lease to lapse.
_FORCE_WAIT = 1.2


class Activations:
    """The agents live in one runtime and how they come alive (see the module docstring).

    Built by ``Runtime.__aenter__`` once the store is open; ``definitions`` is the
    runtime's registry (shared, so a later ``register`` is seen here).
    """

    def __init__(
        self,
        *,
        store: Store,
        codec: RecordCodec,
        services: JournalServices,
        leases: LeaseKeeper,
        telemetry: Telemetry,
        namespace: str,
        worker_id: str,
        definitions: dict[str, AgentDefinition],
        mailbox_size: int,
        task_group: TaskGroup,
    ) -> None:
        self.store = store
        self.codec = codec
        self.services = services
        self.leases = leases
        # A lease is given back only once no snapshot write under it is in flight.
        leases.before_release = services.snapshots.release
        self.telemetry = telemetry
        self.namespace = namespace
        self.worker_id = worker_id
        self.definitions = definitions
        self.mailbox_size = mailbox_size
        self.task_group = task_group
        self.admission: Admission | None = None  # the fleet's limits, when the runtime has any
        self.events = LiveEvents()  # this process's subscribers to its agents (Runtime.stream)
        self.live: dict[str, AgentActor] = {}
        self.activating = KeyedLock()  # single-flight start/resume per agent id (single_flight.py)
        self.draining = False  # set by drain(): nothing more is resumed here
        self.open = True  # cleared when the runtime is being left: nothing more is spawned
        self.blocked = BlockedAgents()  # logged once each (blocked.py)
        self.wake = WakeClock()  # the earliest timer seen, for serve() to wake at (_fleet/timers.py)
        self.children: ChildAgents | None = None  # how actors start child agents (the runtime sets it)
        self.on_end: Callable[[AgentState], None] | None = None  # told of every activation's last state

    def stream(self, agent_id: str) -> StreamId:
        """The stream of ``agent_id`` in this runtime's namespace."""
        return StreamId(self.namespace, agent_id)

    def definition(self, name: str) -> AgentDefinition:
        """The registered definition called ``name``.

        Raises:
            DefinitionNotRegisteredError: No definition of that name is registered.
        """
        try:
            return self.definitions[name]
        except KeyError:
            raise DefinitionNotRegisteredError(f"agent definition {name!r} is not registered in this runtime") from None

    def serves(self, entry: Any) -> bool:
        """Whether this runtime has the definition of the agent whose status index entry is
        ``entry`` (an ``IndexEntry``; None or ``status_index.UNSEEN``: not known, so True).

        Checked before a lease is claimed: a worker serving other definitions
        leaves the agent alone, instead of taking its lease, restoring it and
        giving it back (a delay for the worker that can run it, and churn in
        a fleet of workers serving different definitions).
        """
        name = getattr(entry, "definition", None)
        return not name or name in self.definitions

    def require_open(self) -> None:
        """Raise ``RuntimeNotStartedError`` once the runtime is being left.

        Called between an activation's durable record and its spawn: an agent whose
        ``started`` or ``resumed`` record was appended while the runtime exited (a
        ``resume_all`` in another task) must not reach a task group that is closing
        (anyio's ``RuntimeError``); its journal is intact, and the next runtime resumes it.
        """
        if not self.open:
            raise RuntimeNotStartedError(
                "this Runtime was left while an agent was being activated; "
                "its journal is intact and the next runtime resumes it"
            )

    async def start(
        self,
        definition: AgentDefinition,
        agent_id: str,
        task: str,
        budget: Budget | None,
        wake_at: float | None = None,
    ) -> AgentHandle:
        """``Runtime.start`` once its arguments are checked: begin the agent's journal and spawn it
        (``wake_at``: it sleeps until then first, see ``durably._loop.timers``)."""
        self.definitions.setdefault(definition.name, definition)
        async with self.activating.hold(agent_id):
            return await self._start(definition, agent_id, task, budget, wake_at)

    async def status(self, agent_id: str) -> AgentState:
        """``Runtime.status``: the live actor's durable state, else the state restored from the store."""
        actor = self.live.get(agent_id)
        if actor is not None and not actor.done.is_set():
            return actor.journal.durable_state()
        return (await self.restore_journal(agent_id)).state

    async def evict(self, stream: StreamId) -> None:
        """Stop ``stream``'s live activation here, if any, and drop the snapshot it queued (a purge)."""
        actor = self.live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            actor.cancel_scope.cancel()
            await actor.done.wait()
        await self.services.snapshots.discard(stream)

    def stop_all(self) -> None:
        """Cancel every live actor (the runtime is being left: what they did is durable)."""
        for actor in list(self.live.values()):
            actor.cancel_scope.cancel()

    async def _start(
        self, definition: AgentDefinition, agent_id: str, task: str, budget: Budget | None, wake_at: float | None
    ) -> AgentHandle:
        stream = self.stream(agent_id)
        if agent_id in self.live:  # running here: its lease is the live actor's, not ours to touch
            raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {self.namespace!r}")
        try:
            claim = await self._claim(stream)
        except AgentLeasedError:
            raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {self.namespace!r}") from None
        journal = AgentJournal(self.services, stream, AgentState(), claim=claim)
        run_id = uuid.uuid4().hex
        span = self._activation_span(definition, agent_id, run_id, None)
        data = {
            "namespace": self.namespace,
            "agent_id": agent_id,
            "run_id": run_id,
            "task": task,
            "definition": {"name": definition.name, "version": definition.version, "digest": definition.digest()},
            "instructions": definition.instructions,
            "budget": (budget or definition.budget).to_wire(),
            "worker": self.worker_id,
        }
        if (reference := tm.trace_reference(span)) is not None:
            data["trace"] = reference
        try:
            claim.check()
            with tm.activated(span, end=False):
                await journal.append((Kind.STARTED, data), *([timers.timer_entry(wake_at)] if wake_at else []))
            self.require_open()
        except BaseException as exc:
            _end_failed(span, exc)
            await self.leases.release(claim)
            if isinstance(exc, AgentFencedError):
                raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {self.namespace!r}") from None
            raise
        return self._spawn(definition, journal, span)

    async def resume(
        self,
        agent_id: str,
        *,
        force: bool = False,
        seen: Any = status_index.UNSEEN,
        gather: Callable[[], Awaitable[None]] | None = None,
    ) -> AgentHandle | None:
        """``Runtime.resume``, and the resumes of scans, wake-ups and commands (``seen``: the status
        index entry a scan just listed for it, so it is not read again; ``gather``: awaited
        just before the ``resumed`` append, so a scan's resumes share its group commit).

        Single-flight: holding the agent id's lock, a second caller finds the
        first one's live actor and gets its handle instead of a second copy.
        """
        async with self.activating.hold(agent_id):
            return await self._resume_held(agent_id, force=force, seen=seen, gather=gather)

    async def _resume_held(
        self,
        agent_id: str,
        *,
        force: bool,
        seen: Any = status_index.UNSEEN,
        gather: Callable[[], Awaitable[None]] | None = None,
    ) -> AgentHandle | None:
        if (actor := self.live.get(agent_id)) is not None and not actor.done.is_set():
            return AgentHandle(actor)
        if self.draining:
            return None  # shutting down: another runtime resumes it
        if not self.serves(seen):
            self.definition(seen.definition)  # raises DefinitionNotRegisteredError, before any lease is taken
        stream = self.stream(agent_id)
        claim = await self._claim(stream, wait=self.leases.ttl * _FORCE_WAIT if force else 0.0)
        try:
            journal, restored = await self._restore(agent_id, claim)
            restored_seq = journal.state.last_seq
            await status_index.repair(self.store, stream, journal.state, seen)  # a missing or stale entry is put right
            waking = timers.due(journal.state)  # a sleeping agent whose time has come wakes here
            if journal.state.status != RUNNING and not waking:
                if journal.state.status == SLEEPING:
                    self.wake.note(journal.state.wake_at)
                if journal.state.status == NEEDS_MIGRATION:
                    self.blocked.found(agent_id, journal.state.reason)
                await self.leases.release(claim)
                return None
            self.blocked.runnable(agent_id)
            definition = self.definition(journal.state.definition["name"])
            from durably._upkeep.migrate import definition_change_entries

            changes = definition_change_entries(journal.state, definition)
            state = journal.state
            span = self._activation_span(definition, agent_id, state.run_id, state.trace)
            resumed: dict[str, Any] = {"worker": self.worker_id, "pid": os.getpid()}
            if (reference := tm.trace_reference(span)) is not None:
                resumed["trace"] = reference
            try:
                if gather is not None:
                    await gather()
                claim.check()  # the restore may have outlasted the lease
                with tm.activated(span, end=False):
                    fired = [timers.fired_entry(state)] if waking else []
                    await journal.append(*changes, *fired, (Kind.RESUMED, resumed))
                self.require_open()
            except BaseException as exc:
                _end_failed(span, exc)
                raise
        except BaseException:
            await self.leases.release(claim)
            raise
        if (meters := self.telemetry.metrics) is not None:
            meters.resumes.add(1, self.telemetry.attributes)
            self._measure_approvals(journal, restored, restored_seq + len(changes) + 1, resumed)
        return self._spawn(definition, journal, span)

    def _measure_approvals(
        self, journal: AgentJournal, restored: Restored, resumed_seq: int, resumed: dict[str, Any]
    ) -> None:
        """The approval latencies of the activation whose ``resumed`` record (``resumed``, at
        ``resumed_seq``) was just appended: from the records its restore decoded when they
        cover the window (no read), else read again in the background (a snapshot cut the
        tail short, or commands were folded in before the append)."""
        needed = max(resumed_seq - fleet_metrics.WINDOW + 1, 1)
        first = restored.recent[0].seq if restored.recent else resumed_seq
        if journal.state.last_seq != resumed_seq or first > needed:
            self.task_group.start_soon(
                fleet_metrics.observe_approvals, self.store, self.codec, self.telemetry, journal.stream, resumed_seq
            )
            return
        window = [record for record in restored.recent if record.seq >= needed]
        window.append(Record(resumed_seq, Kind.RESUMED, resumed, journal.folded_at))
        fleet_metrics.record_approvals(self.telemetry, window)

    def _activation_span(
        self, definition: AgentDefinition, agent_id: str, run_id: str, continues: dict[str, Any] | None
    ) -> trace.Span | None:
        """The ``invoke_agent`` span of an activation about to be journaled (None when nothing records)."""
        if self.telemetry.tracer is None:
            return None
        model = definition.model
        return self.telemetry.activation_span(
            definition.name, agent_id, run_id, tm.provider_of(model), getattr(model, "name", ""), continues
        )

    async def _claim(self, stream: StreamId, *, wait: float = 0.0) -> LeaseClaim:
        """Take the agent's lease in the store (from a dead holder at once), waiting up to ``wait``
        seconds for a live holder's to lapse; or raise ``AgentLeasedError`` naming who holds it."""
        claim, holder = await self.leases.claim_or_holder(stream, wait=wait)
        if claim is None:
            if holder is None:  # the refusal did not read who holds it (it lost a takeover race)
                holder = await self.leases.holder(stream)
            raise AgentLeasedError(
                stream.agent_id, holder.owner if holder else None, holder.expires_at if holder else None
            )
        return claim

    def lease_lost(self, claim: LeaseClaim, holder: Lease | None) -> None:
        """The renewal loop found ``claim``'s lease gone (``holder``: who has it now, None if
        unknown): the activation that holds that claim stops with ``AgentLeaseLostError``."""
        actor = self.live.get(claim.stream.agent_id)
        if actor is not None and claim.stream.namespace == self.namespace and actor.journal.claim is claim:
            # The renewal loop marked the claim lost already: its error says how (taken, lapsed).
            # Its handle says so: the agent runs on elsewhere, not here (see AgentHandle.wait).
            actor.error = claim.lose(holder)
            log.warning("lease of %s lost (%s); stopping the agent here", claim.stream, actor.error)
            actor.cancel_scope.cancel()

    async def restore_journal(self, agent_id: str, claim: LeaseClaim | None = None) -> AgentJournal:
        """The agent's journal restored from the store, writing under ``claim`` (None: a
        writer without a lease, whose appends the store does not fence).

        Raises:
            AgentNotFoundError: The agent has no records.
            LangGraphThreadError: The stream is a LangGraph thread.
        """
        return (await self._restore(agent_id, claim))[0]

    async def refuse_thread(self, agent_id: str) -> None:
        """Raise ``LangGraphThreadError`` when ``agent_id`` names a LangGraph thread (one
        one-record read): its frames are LangGraph's, not agent records, so no agent
        command applies. Raises ``StoreUnavailableError`` as the store does."""
        from durably._reading.threads import is_thread

        if await is_thread(self.store, self.stream(agent_id)):
            raise LangGraphThreadError(self.namespace, agent_id)

    async def _restore(self, agent_id: str, claim: LeaseClaim | None) -> tuple[AgentJournal, Restored]:
        """``restore_journal``, and what the restore read (its last records, for the measurements)."""
        stream = self.stream(agent_id)
        try:
            restored = await restore(self.store, self.codec, stream, self.telemetry)
        except CodecError:
            await self.refuse_thread(agent_id)
            raise
        if restored is None:
            raise AgentNotFoundError(f"no agent {agent_id!r} in namespace {self.namespace!r}")
        services = self.services
        from durably._upkeep.migrate import hold_for_migration

        if hold_for_migration(restored.state, self.definitions):
            # Its status (needs_migration) is not the fold of its journal: never snapshot it.
            services = replace(services, policy=SnapshotPolicy(every_records=0))
        journal = AgentJournal(
            services,
            stream,
            restored.state,
            records_since=restored.tail_records,
            bytes_since=restored.tail_raw,
            snapshot_bytes=restored.snapshot_raw,
            claim=claim,
        )
        return journal, restored

    def _spawn(self, definition: AgentDefinition, journal: AgentJournal, span: trace.Span | None = None) -> AgentHandle:
        kind = FunctionActor if isinstance(definition, FunctionAgent) else AgentActor  # a body instead of a model loop
        actor = kind(definition, journal, self.telemetry, mailbox_size=self.mailbox_size, span=span)
        actor.live = self.events
        actor.exited = anyio.Event()  # set once the lease is given back: the handle waits for it
        actor.children = self.children
        actor.admission = self.admission
        agent_id = journal.state.agent_id
        self.live[agent_id] = actor

        async def run_actor() -> None:
            try:
                with actor.cancel_scope:
                    await actor.run()
            finally:
                if self.live.get(agent_id) is actor:
                    del self.live[agent_id]  # parked or done: nothing of it stays in memory
                if actor.state.status == SLEEPING:
                    self.wake.note(actor.state.wake_at)  # serve() wakes for it, if this runtime serves
                # Exactly this activation's lease (a no-op if a newer activation claimed the
                # stream since). Under the id's lock: a resume racing this exit renews the
                # same lease in the store, which must not be released under the activation it spawned.
                if journal.claim is not None:
                    with anyio.CancelScope(shield=True):
                        async with self.activating.hold(agent_id):
                            if agent_id not in self.live:
                                await self.leases.release(journal.claim)
                actor.exited.set()
                if self.on_end is not None:
                    self.on_end(actor.state)

        self.task_group.start_soon(run_actor)
        return AgentHandle(actor)

    def snapshot_written(self, stream: StreamId, seq: int, size: int) -> None:
        actor = self.live.get(stream.agent_id)
        # Only the newest submitted snapshot's size replaces the estimate: a slow writer can
        # report an older, smaller one after a newer one was submitted, and that size would
        # make the policy snapshot again after a tail far below tail_ratio of the newest.
        if actor is not None and stream.namespace == self.namespace and seq == actor.journal.snapshot_seq:
            actor.journal.snapshot_bytes = size


def _end_failed(span: trace.Span | None, exc: BaseException) -> None:
    """End an activation span whose record could not be journaled (the agent did not run)."""
    if span is not None:
        if isinstance(exc, Exception):
            tm.record_error(span, tm.error_type(exc))
        span.end()
