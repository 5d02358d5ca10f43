"""The Runtime: owns a store, runs agent actors, routes commands, resumes parked agents.

    async with Runtime("sqlite:///agents.db", agents=[my_agent]) as rt:
        state = await rt.run("my_agent", "ticket-42", "Summarise the open tickets")

Everything an agent does is in its journal, so the runtime itself holds only
live actors. Stop the process at any point and a new runtime on the same store
resumes every agent where its journal ends.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import uuid
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import replace
from functools import partial
from typing import Any

import anyio
from opentelemetry import trace

from durably.schemas.records import Kind
from durably.storage.codec import FrameCipher
from durably.storage.errors import CodecError
from durably.storage.group_commit import GroupCommitter
from durably.runtime.record_codec import RecordCodec
from durably.storage.registry import open_store
from durably.storage.spi import Lease, Store, StreamId

from . import commands as cmd
from . import dispatch, serving, status_index
from .actor import AgentActor
from .agent import AgentDefinition, Budget
from .figures import check_figure
from .errors import (
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentLeaseLostError,
    AgentNotFoundError,
    DefinitionNotRegisteredError,
    InvalidCommandError,
)
from .agent_journal import AgentJournal, JournalServices
from .inspection import Inspection
from .leases import LeaseKeeper
from .owner import LeaseHolder
from .placement import CommandResult
from .migrate import definition_change_entries, hold_for_migration
from .redaction import RedactionPolicy
from .retry import RETRY_APPEND_ATTEMPTS, retry_entries
from .reencrypt import ReencryptReport
from .reencrypt import reencrypt as reencrypt_namespace
from .restore import restore
from .retention import RetentionPolicy, SweepItem, purge_stream
from .retention import sweep as sweep_namespace
from .scan import scan as scan_namespace
from .single_flight import KeyedLock
from .snapshots import SnapshotPolicy, SnapshotWriter
from .state import RUNNING, AgentState
from .telemetry import tracer as make_tracer

log = logging.getLogger("durably.runtime")


class AgentHandle:
    """A live agent activation. ``await handle.wait()`` returns its state when it
    stops or parks; raises ``AgentFencedError`` / ``StoreUnavailableError`` if
    that is what stopped it, and ``AgentLeaseLostError`` when another runtime
    took the agent's lease (this one paused past its TTL, or lost the store for
    that long): the agent runs there now, so a "running" state from here would
    be a lie. A state with status ``running`` means this runtime stopped the
    activation itself (``drain``, leaving ``async with``)."""

    def __init__(self, actor: AgentActor) -> None:
        self._actor = actor

    @property
    def agent_id(self) -> str:
        return self._actor.state.agent_id

    async def wait(self) -> AgentState:
        """The agent's state once this activation ends and has given its lease back."""
        await self._actor.done.wait()
        await self._actor.exited.wait()
        if self._actor.error is not None:
            raise self._actor.error
        return self._actor.state


class Runtime(Inspection):
    """Runs durable agents on one store.

    In: ``store`` (a URL for ``open_store``, or a ``Store`` you opened; a URL's
    store is opened and closed by the runtime), ``agents`` (definitions to
    register), ``namespace`` (a tenant: the runtime sees only its streams),
    ``snapshot_policy``, ``worker_id`` (recorded on resume; host:pid by default),
    ``tracer_provider`` (default: the global OpenTelemetry one), ``mailbox_size``,
    ``redaction`` (a ``RedactionPolicy``: what never reaches the store; None: the
    default policy, secret names and token patterns; ``RedactionPolicy.disabled()``
    stores everything), ``encryption`` (a ``FrameCipher`` such as
    ``durably.storage.crypto.AESGCMCipher``: records and snapshots encrypted at
    rest; None: plaintext), ``lease_ttl`` (seconds: on a store with leases, an
    agent runs only in the runtime holding its lease, renewed every third of
    this; a crashed runtime's agents can be resumed elsewhere after it).
    Use as ``async with``; leaving it cancels live actors (their journals are
    already durable) and flushes pending snapshots. ``start`` launches an agent
    without waiting for it; ``wait`` / ``watch`` follow it later, from any
    process. Reading and branching journals (``history``, ``state_at``,
    ``fork``, ``describe``) come from ``Inspection``.
    """

    def __init__(self, store: str | Store, *, agents: Iterable[AgentDefinition] = (), namespace: str = "default",
                 snapshot_policy: SnapshotPolicy | None = None, worker_id: str | None = None,
                 tracer_provider: trace.TracerProvider | None = None, mailbox_size: int = 64,
                 redaction: RedactionPolicy | None = None, encryption: FrameCipher | None = None,
                 lease_ttl: float = 30.0) -> None:
        self._store_arg = store
        check_figure("Runtime", "lease_ttl", lease_ttl, optional=False)
        self.lease_ttl = lease_ttl
        self.namespace = namespace
        self.redaction = redaction if redaction is not None else RedactionPolicy()
        self.encryption = encryption
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.policy = snapshot_policy or SnapshotPolicy()
        self.tracer = make_tracer(tracer_provider)
        self._mailbox_size = mailbox_size
        self._definitions: dict[str, AgentDefinition] = {}
        for definition in agents:
            self.register(definition)
        self._live: dict[str, AgentActor] = {}
        self._activating = KeyedLock()  # single-flight start/resume per agent id (single_flight.py)
        self.draining = False  # set by drain(): nothing more is resumed here
        self._exit: AsyncExitStack | None = None

    # lifecycle --------------------------------------------------------------

    async def __aenter__(self) -> "Runtime":
        async with AsyncExitStack() as stack:
            if isinstance(self._store_arg, str):
                self.store = await stack.enter_async_context(open_store(self._store_arg))
            else:
                self.store = self._store_arg
            self.codec = RecordCodec(cipher=self.encryption)
            committer = GroupCommitter(self.store, tracer=self.tracer)
            snapshots = SnapshotWriter(self.store, policy=self.policy, tracer=self.tracer,
                                       codec_factory=partial(RecordCodec, cipher=self.encryption))
            self._services = JournalServices(self.store, self.codec, committer, snapshots, self.policy, self.tracer,
                                             redaction=self.redaction, indexed=status_index.indexed(self.store))
            self._leases = LeaseKeeper(self.store, self.worker_id, self.lease_ttl)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg.start_soon(snapshots.run, self._snapshot_written)
            self._tg.start_soon(self._leases.renew_forever, self._lease_lost)
            stack.push_async_callback(self._shutdown)
            self._exit = stack.pop_all()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        exit_stack, self._exit = self._exit, None
        if exit_stack is None:
            return False
        try:
            await exit_stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The task group wraps the body's own exception; hand it back unwrapped.
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                return False
            raise
        return False

    async def _shutdown(self) -> None:
        # Actors first (what they did is durable), then the snapshots they queued,
        # bounded in time since a snapshot is an optimisation, then the writer.
        for actor in list(self._live.values()):
            actor.cancel_scope.cancel()
        with anyio.move_on_after(10, shield=True):
            await self._services.snapshots.flush()
        self._tg.cancel_scope.cancel()

    # definitions ------------------------------------------------------------

    def register(self, definition: AgentDefinition) -> None:
        """Make ``definition`` available to start and resume agents by its name."""
        self._definitions[definition.name] = definition

    def _definition(self, name: str) -> AgentDefinition:
        try:
            return self._definitions[name]
        except KeyError:
            raise DefinitionNotRegisteredError(f"agent definition {name!r} is not registered in this runtime") from None

    def stream(self, agent_id: str) -> StreamId:
        """The stream of ``agent_id`` in this runtime's namespace."""
        return StreamId(self.namespace, agent_id)

    # starting and resuming --------------------------------------------------

    async def start(self, agent: str | AgentDefinition, agent_id: str, task: str, *, budget: Budget | None = None) -> AgentHandle:
        """Start a new agent run on ``task`` (str) and return its handle.

        Raises ``AgentExistsError`` when ``agent_id`` already has a journal,
        ``DefinitionNotRegisteredError`` for an unknown definition name.
        """
        definition = agent if isinstance(agent, AgentDefinition) else self._definition(agent)
        self._definitions.setdefault(definition.name, definition)
        async with self._activating.hold(agent_id):
            return await self._start(definition, agent_id, task, budget)

    async def _start(self, definition: AgentDefinition, agent_id: str, task: str, budget: Budget | None) -> AgentHandle:
        stream = self.stream(agent_id)
        if agent_id in self._live:  # running here: its lease is the live actor's, not ours to touch
            raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {self.namespace!r}")
        try:
            await self._claim(stream)
        except AgentLeasedError:
            raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {self.namespace!r}") from None
        journal = AgentJournal(self._services, stream, AgentState())
        data = {
            "namespace": self.namespace, "agent_id": agent_id, "run_id": uuid.uuid4().hex, "task": task,
            "definition": {"name": definition.name, "version": definition.version, "digest": definition.digest()},
            "instructions": definition.instructions, "budget": (budget or definition.budget).to_wire(),
            "worker": self.worker_id,
        }
        try:
            await journal.append((Kind.STARTED, data))
        except BaseException as exc:
            await self._leases.release(stream)
            if isinstance(exc, AgentFencedError):
                raise AgentExistsError(f"agent {agent_id!r} already exists in namespace {self.namespace!r}") from None
            raise
        return self._spawn(definition, journal)

    async def resume(self, agent_id: str, *, force: bool = False) -> AgentHandle | None:
        """Resume ``agent_id`` from its journal if it can run; None if it is parked or done.

        Appends a ``resumed`` record first: that moves the stream's seq, so a
        stale process still running this agent is fenced off at its next append.
        When the registered definition's version or digest differs from the
        recorded one, its ``on_definition_change`` policy applies: ``continue``
        and ``migrate`` journal a ``definition_changed`` record in the same batch
        (with the state fields the migrate hook rewrote); ``stop`` returns None,
        appends nothing, and ``status`` reports ``needs_migration``.
        On a store with leases the agent's lease is taken first: ``AgentLeasedError``
        when another runtime holds it (it runs the agent). ``force=True`` takes
        the agent over anyway, for an operator who knows that runtime is dead
        (it is fenced by the expected seq, and this run holds no lease).
        Raises ``AgentNotFoundError``, ``DefinitionNotRegisteredError``,
        ``DefinitionMigrationError`` (the migrate hook failed, nothing appended),
        ``CorruptRecordError`` / ``UnknownSchemaVersionError`` (journal unreadable:
        not resumed, bytes untouched).
        """
        return await self._resume(agent_id, force=force)

    async def _resume(self, agent_id: str, *, force: bool = False, seen: Any = status_index.UNSEEN) -> AgentHandle | None:
        """``resume``, and the resumes of ``resume_all`` and commands (``seen``: the status
        index entry a scan just listed for it, so it is not read again).

        Single-flight: holding the agent id's lock, a second caller finds the
        first one's live actor and gets its handle instead of a second copy.
        """
        async with self._activating.hold(agent_id):
            return await self._resume_held(agent_id, force=force, seen=seen)

    async def _resume_held(self, agent_id: str, *, force: bool, seen: Any = status_index.UNSEEN) -> AgentHandle | None:
        if (actor := self._live.get(agent_id)) is not None and not actor.done.is_set():
            return AgentHandle(actor)
        if self.draining:
            return None  # shutting down: another runtime resumes it
        stream = self.stream(agent_id)
        await self._claim(stream, force=force)
        try:
            journal = await self._restore_journal(agent_id)
            await status_index.repair(self.store, stream, journal.state, seen)  # a missing or stale entry is put right
            if journal.state.status != RUNNING:
                await self._leases.release(stream)
                return None
            definition = self._definition(journal.state.definition["name"])
            changes = definition_change_entries(journal.state, definition)
            await journal.append(*changes, (Kind.RESUMED, {"worker": self.worker_id, "pid": os.getpid()}))
        except BaseException:
            await self._leases.release(stream)
            raise
        return self._spawn(definition, journal)

    async def _claim(self, stream: StreamId, *, force: bool = False) -> None:
        """Take the agent's lease (from a dead holder at once) or raise ``AgentLeasedError`` naming who holds it."""
        lease, holder = await self._leases.claim_or_holder(stream, force=force)
        if lease is None:
            if holder is None:  # the refusal did not read who holds it (it lost a takeover race)
                holder = await self._leases.holder(stream)
            raise AgentLeasedError(stream.agent_id, holder.owner if holder else None,
                                   holder.expires_at if holder else None)

    async def lease_holder(self, agent_id: str) -> LeaseHolder | None:
        """Who holds ``agent_id``'s lease now: owner, worker id, host and pid, expiry
        (unix seconds) and liveness (``alive``, ``dead``: taken at once by the next
        resume here or in ``serve``; ``remote``: only the expiry tells); None when
        nobody does or the store has no leases. Raises ``StoreUnavailableError``."""
        return await self._leases.holder_info(self.stream(agent_id))

    def _lease_lost(self, stream: StreamId, holder: Lease | None) -> None:
        actor = self._live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            log.warning("lease of %s lost to another runtime; stopping the agent here", stream)
            # Its handle says so: the agent runs on elsewhere, not here (see AgentHandle.wait).
            actor.error = AgentLeaseLostError(stream.agent_id, holder.owner if holder else None,
                                              holder.expires_at if holder else None)
            actor.cancel_scope.cancel()

    async def resume_all(self) -> list[AgentHandle]:
        """Resume every runnable agent of the namespace whose definition is registered.

        An agent whose journal cannot be read (corrupt, foreign bytes, written by
        a newer durably, or any other error restoring it) is logged and skipped,
        never resumed: one bad stream must not stop every other agent of the
        namespace. ``StoreUnavailableError`` (an outage) is raised. See ``durably.runtime.scan``.
        """
        return (await scan_namespace(self)).handles

    async def run(self, agent: str | AgentDefinition, agent_id: str, task: str, *, budget: Budget | None = None) -> AgentState:
        """Start ``agent_id`` (or resume it if its journal exists) and wait until it stops or parks.

        Raises ``AgentExistsError`` when ``agent_id`` exists under another
        definition name or with another task (saying which differs): an id
        reused by mistake must not hand back another agent's result. A resumed
        run with the same definition and task is silent.
        """
        try:
            handle = await self.start(agent, agent_id, task, budget=budget)
        except AgentExistsError:
            name = agent.name if isinstance(agent, AgentDefinition) else agent
            existing = await self.status(agent_id)
            if (recorded := existing.definition.get("name")) != name:
                raise AgentExistsError(f"agent {agent_id!r} exists in namespace {self.namespace!r} under definition "
                                       f"{recorded!r}, not {name!r}") from None
            if existing.task != task:
                raise AgentExistsError(f"agent {agent_id!r} exists in namespace {self.namespace!r} with another task "
                                       f"({existing.task[:60]!r}, not {task[:60]!r})") from None
            handle = await self.resume(agent_id)
            if handle is None:
                return await self.status(agent_id)
        return await handle.wait()

    async def serve(self, poll_interval: float = 1.0, *, drain_signals: Iterable[int] = (signal.SIGTERM,),
                    drain_timeout: float = 30.0, max_agents: int | None = None) -> None:
        """Resume runnable agents forever, polling the store every ``poll_interval`` seconds.

        This is how an agent parked in one process runs on after another process
        approved it or extended its budget, and how a dead worker's agents are
        taken over (at once when it was a process of this host). A store outage
        (``StoreUnavailableError``) does not end it: scans back off up to 30 s,
        are logged, traced (``durably.serve.outage``) and counted, and serving
        carries on when the store is back. On one of ``drain_signals`` (main
        thread only; ``()`` for none) it drains (``drain(drain_timeout)``) and
        returns: a deploy's SIGTERM lets the steps in flight finish and hands the
        agents to the other workers at once. ``max_agents``: most live agents in
        this worker (None: no cap); scans also take no more than an even split of
        what they saw among the workers. Cancel the calling scope to stop
        without draining. See ``durably.runtime.serving``. Raises ``ValueError``
        for ``max_agents`` < 1.
        """
        await serving.serve(self, poll_interval, drain_signals=drain_signals, drain_timeout=drain_timeout,
                            max_agents=max_agents)

    async def drain(self, timeout: float = 30.0) -> None:
        """Stop every live agent here after its current step, release its lease, resume nothing more.

        ``timeout``: seconds to wait for the steps in flight before cancelling
        them (their intents then follow the tools' unknown-outcome policies where
        they resume). Handles of drained activations return their state, whose
        status is still ``running``: the agent goes on wherever it is resumed.
        """
        await serving.drain(self, timeout)

    async def status(self, agent_id: str) -> AgentState:
        """The agent's current state. Raises ``AgentNotFoundError``.

        An agent live in this runtime answers from its actor's state (a copy:
        everything in it is durable, nothing is replayed); any other is
        restored from the store (its latest snapshot and the records after it).
        A command another process appended to a live agent shows once that
        agent folds it in, at its next append.
        """
        actor = self._live.get(agent_id)
        if actor is not None and not actor.done.is_set():
            return AgentState.from_wire(actor.state.to_wire())
        return (await self._restore_journal(agent_id)).state

    async def agents(self, *, statuses: Iterable[str] | None = None) -> list[AgentState]:
        """The states of the namespace's agents (``statuses``: only those with one of these statuses).

        An agent whose journal cannot be read is listed with status
        ``unreadable`` and the error as reason. With ``statuses`` on a store with
        a status index only the agents it names (and those it has no entry for)
        are restored, so the call costs what it returns, not the namespace.
        """
        wanted = None if statuses is None else frozenset(statuses)
        streams = status_index.listing(self.store, self.namespace, wanted) or self.store.list_streams(self.namespace)
        states = []
        async for stream in streams:
            try:
                state = await self.status(stream.agent_id)
            except AgentNotFoundError:
                continue  # purged between the listing and the read
            except CodecError as exc:
                state = AgentState(namespace=self.namespace, agent_id=stream.agent_id, status="unreadable",
                                   reason=f"{type(exc).__name__}: {exc}")
            if wanted is None or state.status in wanted:
                states.append(state)
        return sorted(states, key=lambda state: state.agent_id)

    # commands ---------------------------------------------------------------

    async def approve(self, agent_id: str, approval_id: str, *, approved: bool = True, by: str = "", note: str = "",
                      result: Any = cmd.NO_RESULT) -> CommandResult:
        """Decide an open approval; a parked agent then resumes here if its definition is registered.

        For a call whose outcome is unknown (policy ``ask``) the three answers
        are: ``approved=True`` runs it again, ``approved=False`` skips it (the
        model is told it did not happen), and ``result=...`` (JSON-like data, or
        any value the journal stores exactly) says it happened: that value is
        journaled as the call's result and the call never runs again.
        Returns the state after the decision as a ``CommandResult`` whose
        ``placement`` says truthfully whether and where the agent runs now (here,
        in another live runtime, after a remote holder's lease lapses, or not
        yet: see ``durably.runtime.placement``); every command returns one.
        Raises ``ApprovalAlreadyDecidedError`` (decided already, perhaps a moment
        ago by another process), ``InvalidCommandError`` (unknown approval,
        finished agent, a result with ``approved=False``), ``UnencodableValueError``
        (a result that cannot be stored, with its field path) and ``AgentNotFoundError``.
        """
        return await self._command(agent_id, cmd.Decide(approval_id=approval_id, approved=approved, by=by, note=note,
                                                        result=result))

    async def extend_budget(self, agent_id: str, *, steps: int = 0, tokens: int = 0, cost_usd: float = 0.0) -> CommandResult:
        """Raise a suspended (or running) agent's limits; a suspended one resumes.

        Raises ``InvalidCommandError`` for a figure that is not finite and >= 0
        (a NaN limit would never bite) and when the agent has no such limit."""
        for name, value, integer in (("steps", steps, True), ("tokens", tokens, True), ("cost_usd", cost_usd, False)):
            try:
                check_figure("budget extension", name, value, integer=integer, optional=False)
            except ValueError as exc:
                raise InvalidCommandError(str(exc)) from None
        return await self._command(agent_id, cmd.ExtendBudget(steps=steps, tokens=tokens, cost_usd=cost_usd))

    async def retry(self, agent_id: str) -> AgentHandle | None:
        """Resume a ``failed`` agent from its journal, once its cause is fixed.

        Appends a ``retried`` record (the status is running again) and resumes
        the agent here: a model error is retried from the step that failed; a
        call whose outcome is unknown under the ``fail`` policy becomes an
        approval request (re-run, skip, or "it happened" with a result), and
        then None is returned since the agent waits for it. A call whose result
        could not be stored is never run again: the model is told so. Without
        its definition registered here (``durably retry``), the agent is made
        runnable for a worker that has it (``serve``), None is returned, and
        every call whose outcome is unknown becomes a question. Raises
        ``InvalidCommandError`` (the agent is not failed),
        ``AgentNotFoundError`` and what ``resume`` raises.
        """
        for _ in range(RETRY_APPEND_ATTEMPTS):
            journal = await self._restore_journal(agent_id)
            definition = self._definitions.get(journal.state.definition.get("name", ""))
            try:
                await journal.append(*retry_entries(journal.state, definition, self.worker_id))
            except AgentFencedError:
                continue  # another writer got there first: decide again from what it wrote
            # Without its definition here (the command line), a serving worker runs it.
            return await self._resume(agent_id) if definition is not None else None
        raise AgentFencedError(self.stream(agent_id), journal.state.last_seq, None)

    async def send(self, agent_id: str, content: str, *, role: str = "user") -> CommandResult:
        """Add a message to the agent's conversation (seen by its next model call)."""
        return await self._command(agent_id, cmd.SendMessage(content=content, role=role))

    async def cancel(self, agent_id: str, reason: str = "") -> CommandResult:
        """Stop the agent for good (after its current step)."""
        return await self._command(agent_id, cmd.Cancel(reason=reason))

    async def _command(self, agent_id: str, command: cmd.Command) -> CommandResult:
        """Apply ``command``; the state after it and where the agent runs now (see ``dispatch``)."""
        return await dispatch.submit(self, agent_id, command)

    # retention, purge, keys -------------------------------------------------

    async def purge(self, agent_id: str) -> None:
        """Delete everything stored of ``agent_id`` in this namespace: records,
        snapshots, blobs, its seq. The id may then be started anew, as a new run
        (fresh run id, so fresh idempotency keys): nothing of the old one is seen.

        A live activation in this runtime is stopped first and its queued
        snapshot dropped. Another process still running the agent is fenced at
        its next append (the stream it expects is gone). Raises
        ``AgentNotFoundError`` when nothing of the agent is stored,
        ``PurgeIncompleteError`` and ``StoreUnavailableError``.
        """
        stream = self.stream(agent_id)
        if await self.store.last_seq(stream) == 0:
            listed = [s async for s in self.store.list_streams(self.namespace, agent_id)]
            if stream not in listed:
                raise AgentNotFoundError(f"no agent {agent_id!r} in namespace {self.namespace!r}")
        await self._purge_stream(stream)

    async def sweep(self, retention: RetentionPolicy, *, now: float | None = None, dry_run: bool = False) -> list[SweepItem]:
        """Purge this namespace's agents whose time-to-live (by status, from their
        last record) has passed; see ``durably.runtime.retention.sweep``. ``now``:
        unix seconds (default the clock); ``dry_run``: report without deleting."""
        return await sweep_namespace(self.store, self.codec, self.namespace, retention, tracer=self.tracer,
                                     now=now, dry_run=dry_run, purge=self._purge_stream)

    async def reencrypt(self) -> list[ReencryptReport]:
        """Rewrite this namespace's streams so every frame uses the current key
        (see ``durably.runtime.reencrypt``: the history before the rewrite is
        compacted into a snapshot). Raises ``ValueError`` without ``encryption``."""
        return await reencrypt_namespace(self.store, self.codec, self.namespace, tracer=self.tracer)

    async def _purge_stream(self, stream: StreamId) -> None:
        actor = self._live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            actor.cancel_scope.cancel()
            await actor.done.wait()
        await self._services.snapshots.discard(stream)
        await purge_stream(self.store, stream)

    # internals --------------------------------------------------------------

    async def _restore_journal(self, agent_id: str) -> AgentJournal:
        stream = self.stream(agent_id)
        restored = await restore(self.store, self.codec, stream, self.tracer)
        if restored is None:
            raise AgentNotFoundError(f"no agent {agent_id!r} in namespace {self.namespace!r}")
        services = self._services
        if hold_for_migration(restored.state, self._definitions):
            # Its status (needs_migration) is not the fold of its journal: never snapshot it.
            services = replace(services, policy=SnapshotPolicy(every_records=0))
        return AgentJournal(services, stream, restored.state, records_since=restored.tail_records,
                            bytes_since=restored.tail_bytes, snapshot_bytes=restored.snapshot_bytes)

    def _spawn(self, definition: AgentDefinition, journal: AgentJournal) -> AgentHandle:
        actor = AgentActor(definition, journal, self.tracer, mailbox_size=self._mailbox_size)
        actor.exited = anyio.Event()  # set once the lease is given back: the handle waits for it
        agent_id = journal.state.agent_id
        self._live[agent_id] = actor

        async def run_actor() -> None:
            try:
                with actor.cancel_scope:
                    await actor.run()
            finally:
                if self._live.get(agent_id) is actor:
                    del self._live[agent_id]  # parked or done: nothing of it stays in memory
                # Under the id's lock: a resume racing this exit renews the same lease,
                # which must not be released under the activation it spawned.
                with anyio.CancelScope(shield=True):
                    async with self._activating.hold(agent_id):
                        if agent_id not in self._live:
                            await self._leases.release(journal.stream)
                actor.exited.set()

        self._tg.start_soon(run_actor)
        return AgentHandle(actor)

    def _snapshot_written(self, stream: StreamId, seq: int, size: int) -> None:
        actor = self._live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            actor.journal.snapshot_bytes = size
