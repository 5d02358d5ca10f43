"""The Runtime: owns a store, runs agent actors, routes commands, resumes parked agents.

    async with Runtime("sqlite:///agents.db", agents=[my_agent]) as rt:
        state = await rt.run("my_agent", "ticket-42", "Summarise the open tickets")

Everything an agent does is in its journal, so the runtime itself holds only
live actors. Stop the process at any point and a new runtime on the same store
resumes every agent where its journal ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import replace
from functools import partial

import anyio
from opentelemetry import trace

from durably.schemas.records import Kind
from durably.storage.codec import FrameCipher
from durably.storage.errors import CodecError
from durably.storage.journal import GroupCommitter
from durably.storage.records import RecordCodec
from durably.storage.registry import open_store
from durably.storage.spi import Store, StreamId

from . import commands as cmd
from .actor import AgentActor, _Requeue
from .agent import AgentDefinition, Budget
from .errors import (
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentNotFoundError,
    DefinitionNotRegisteredError,
)
from .journal import AgentJournal, JournalServices
from .inspection import Inspection
from .leases import LeaseKeeper
from .migrate import definition_change_entries, hold_for_migration
from .redaction import RedactionPolicy
from .reencrypt import ReencryptReport
from .reencrypt import reencrypt as reencrypt_namespace
from .restore import restore
from .retention import RetentionPolicy, SweepItem, purge_stream
from .retention import sweep as sweep_namespace
from .snapshots import SnapshotPolicy, SnapshotWriter
from .state import RUNNING, AgentState
from .telemetry import tracer as make_tracer

log = logging.getLogger("durably.runtime")

_COMMAND_RETRIES = 8  # expected-seq retries for a command racing another writer


class AgentHandle:
    """A live agent activation. ``await handle.wait()`` returns its state when it
    stops or parks; raises ``AgentFencedError`` / ``StoreUnavailableError`` if
    that is what stopped it."""

    def __init__(self, actor: AgentActor) -> None:
        self._actor = actor

    @property
    def agent_id(self) -> str:
        return self._actor.state.agent_id

    async def wait(self) -> AgentState:
        """The agent's state once this activation ends."""
        await self._actor.done.wait()
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
                                             redaction=self.redaction)
            self._leases = LeaseKeeper(self.store, f"{self.worker_id}/{uuid.uuid4().hex[:8]}", self.lease_ttl)
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
        Raises ``AgentNotFoundError``, ``DefinitionNotRegisteredError`` (and its
        ``DefinitionMigrationError``: the migrate hook failed, nothing appended),
        ``CorruptRecordError`` / ``UnknownSchemaVersionError`` (journal unreadable:
        not resumed, bytes untouched).
        """
        if (actor := self._live.get(agent_id)) is not None and not actor.done.is_set():
            return AgentHandle(actor)
        return await self._resume(agent_id, force=force, take_dead=True)

    async def _resume(self, agent_id: str, *, force: bool = False, take_dead: bool = False) -> AgentHandle | None:
        """``resume``; ``take_dead`` only for an explicit one (see ``LeaseKeeper.claim``)."""
        if (actor := self._live.get(agent_id)) is not None and not actor.done.is_set():
            return AgentHandle(actor)
        stream = self.stream(agent_id)
        await self._claim(stream, force=force, take_dead=take_dead)
        try:
            journal = await self._restore_journal(agent_id)
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

    async def _claim(self, stream: StreamId, *, force: bool = False, take_dead: bool = True) -> None:
        """Take the agent's lease or raise ``AgentLeasedError`` naming who holds it."""
        if await self._leases.claim(stream, force=force, take_dead=take_dead) is None:
            holder = await self._leases.holder(stream)
            raise AgentLeasedError(stream.agent_id, holder.owner if holder else None,
                                   holder.expires_at if holder else None)

    def _lease_lost(self, stream: StreamId) -> None:
        actor = self._live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            log.warning("lease of %s lost to another runtime; stopping the agent here", stream)
            actor.cancel_scope.cancel()

    async def resume_all(self) -> list[AgentHandle]:
        """Resume every runnable agent of the namespace whose definition is registered.

        An agent whose journal cannot be read (corrupt, or written by a newer
        durably) is logged and skipped, never resumed: one bad stream must not
        stop every other agent of the namespace.
        """
        handles = []
        async for stream in self.store.list_streams(self.namespace):
            if stream.agent_id in self._live:
                continue
            try:
                handle = await self._resume(stream.agent_id)
            except (DefinitionNotRegisteredError, AgentLeasedError, AgentFencedError):
                continue  # not ours to run, another runtime runs it, or won the race to
            except CodecError as exc:
                log.error("agent %s not resumed, its journal is unreadable: %s", stream, exc)
                continue
            if handle is not None:
                handles.append(handle)
        return handles

    async def run(self, agent: str | AgentDefinition, agent_id: str, task: str, *, budget: Budget | None = None) -> AgentState:
        """Start ``agent_id`` (or resume it if its journal exists) and wait until it stops or parks."""
        try:
            handle = await self.start(agent, agent_id, task, budget=budget)
        except AgentExistsError:
            handle = await self.resume(agent_id)
            if handle is None:
                return await self.status(agent_id)
        return await handle.wait()

    async def serve(self, poll_interval: float = 1.0) -> None:
        """Resume runnable agents forever, polling the store every ``poll_interval`` seconds.

        This is how an agent parked in one process runs on after another process
        approved it or extended its budget. Cancel the calling scope to stop.
        """
        while True:
            await self.resume_all()
            await anyio.sleep(poll_interval)

    async def status(self, agent_id: str) -> AgentState:
        """The agent's current state, read from the store. Raises ``AgentNotFoundError``."""
        return (await self._restore_journal(agent_id)).state

    async def agents(self) -> list[AgentState]:
        """The states of every agent in the namespace. An agent whose journal
        cannot be read is listed with status ``unreadable`` and the error as reason."""
        states = []
        async for stream in self.store.list_streams(self.namespace):
            try:
                states.append(await self.status(stream.agent_id))
            except CodecError as exc:
                states.append(AgentState(namespace=self.namespace, agent_id=stream.agent_id, status="unreadable",
                                         reason=f"{type(exc).__name__}: {exc}"))
        return states

    # commands ---------------------------------------------------------------

    async def approve(self, agent_id: str, approval_id: str, *, approved: bool = True, by: str = "", note: str = "") -> AgentState:
        """Decide an open approval; a parked agent then resumes here if its definition is registered.

        Returns the state after the decision. Raises ``InvalidCommandError``
        (unknown or already decided approval) and ``AgentNotFoundError``.
        """
        return await self._command(agent_id, cmd.Decide(approval_id=approval_id, approved=approved, by=by, note=note))

    async def extend_budget(self, agent_id: str, *, steps: int = 0, tokens: int = 0, cost_usd: float = 0.0) -> AgentState:
        """Raise a suspended (or running) agent's limits; a suspended one resumes."""
        return await self._command(agent_id, cmd.ExtendBudget(steps=steps, tokens=tokens, cost_usd=cost_usd))

    async def send(self, agent_id: str, content: str, *, role: str = "user") -> AgentState:
        """Add a message to the agent's conversation (seen by its next model call)."""
        return await self._command(agent_id, cmd.SendMessage(content=content, role=role))

    async def cancel(self, agent_id: str, reason: str = "") -> AgentState:
        """Stop the agent for good (after its current step)."""
        return await self._command(agent_id, cmd.Cancel(reason=reason))

    async def _command(self, agent_id: str, command: cmd.Command) -> AgentState:
        actor = self._live.get(agent_id)
        if actor is not None and not actor.done.is_set():
            try:
                await actor.mailbox.send(command)
                await command.done.wait()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                command.finish(_Requeue())
            if not isinstance(command.error, _Requeue):
                if command.error is not None:
                    raise command.error
                return actor.state
        # No live actor here: the journal is the agent. Append with the expected seq;
        # if another writer got there first, re-read and decide again.
        for _ in range(_COMMAND_RETRIES):
            journal = await self._restore_journal(agent_id)
            was_parked = journal.state.parked
            entry = cmd.to_record(journal.state, command)
            try:
                await journal.append(entry)
            except AgentFencedError:
                continue
            # Resume here only an agent this command un-parked: one that was running
            # may be running elsewhere (a store without leases cannot tell), and
            # that worker folds the command in.
            if was_parked and journal.state.status == RUNNING and journal.state.definition.get("name") in self._definitions:
                with contextlib.suppress(AgentLeasedError, AgentFencedError):
                    await self._resume(agent_id)
            return journal.state
        raise AgentFencedError(self.stream(agent_id), journal.state.last_seq, None)

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
        agent_id = journal.state.agent_id
        self._live[agent_id] = actor

        async def run_actor() -> None:
            try:
                with actor.cancel_scope:
                    await actor.run()
            finally:
                if self._live.get(agent_id) is actor:
                    del self._live[agent_id]  # parked or done: nothing of it stays in memory
                await self._leases.release(journal.stream)

        self._tg.start_soon(run_actor)
        return AgentHandle(actor)

    def _snapshot_written(self, stream: StreamId, seq: int, size: int) -> None:
        actor = self._live.get(stream.agent_id)
        if actor is not None and stream.namespace == self.namespace:
            actor.journal.snapshot_bytes = size
