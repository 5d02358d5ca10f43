"""The Runtime: owns a store, runs agent actors, routes commands, resumes parked agents.

    async with Runtime("sqlite:///agents.db", agents=[my_agent]) as rt:
        state = await rt.run("my_agent", "ticket-42", "Summarise the open tickets")

Everything an agent does is in its journal, so the runtime itself holds only
live actors. Stop the process at any point and a new runtime on the same store
resumes every agent where its journal ends.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import AsyncExitStack
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio

from durably._figures import check_bool, check_figure
from durably._fleet.activation import Activation
from durably._fleet.handle import AgentHandle as AgentHandle  # re-exported: importable from here as before the move
from durably._fleet.leases import LeaseKeeper
from durably._fleet.owner import hostname
from durably._fleet.runtime_methods import Fleet
from durably._fleet.single_flight import KeyedLock
from durably._journal import status_index
from durably._journal.records import RecordCodec
from durably._journal.redaction_policy import RedactionPolicy
from durably._journal.snapshots import SnapshotPolicy, SnapshotWriter
from durably._journal.writer import JournalServices
from durably._loop.actor import AgentActor
from durably._loop.agent import AgentDefinition, Budget
from durably._loop.state import AgentState
from durably._operate.runtime_methods import OperatorCommands
from durably._reading.runtime_methods import Inspection
from durably._telemetry import Telemetry
from durably._upkeep.runtime_methods import Housekeeping
from durably.errors import (
    AgentExistsError,
    AgentNotFoundError,
    ArgumentTypeError,
    DefinitionNotRegisteredError,
    InvalidStoreError,
    RuntimeNotStartedError,
)
from durably.storage._codec import FrameCipher
from durably.storage._errors import CodecError
from durably.storage._group_commit import GroupCommitter
from durably.storage._registry import open_store
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from opentelemetry import metrics, trace

# Commands, retries, serving, scans, definition changes, retention and key rotation
# import their modules when first called: a runtime that only runs agents never loads them (import time).

#: What ``__aenter__`` sets up; a method reaching one of them before that is told to enter the runtime.
_STARTED_ATTRIBUTES = frozenset({"store", "codec", "_services", "_leases", "_tg"})


# Runtime's methods by idea, one module each: this one (construction, lifecycle, definitions, start, resume,
# run, status, agents), activation (what start and resume do underneath), operator_commands (approve, extend_budget,
# retry, send, cancel), housekeeping (purge, sweep, reencrypt), fleet (resume_all, serve, drain, lease_holder)
# and inspection (history, state_at, fork, describe, wait, watch).
class Runtime(Activation, OperatorCommands, Housekeeping, Fleet, Inspection):
    """Runs durable agents on one store.

    Use as ``async with``; leaving it cancels live actors (their journals are
    already durable) and flushes pending snapshots. ``start`` launches an agent
    without waiting for it; ``wait`` / ``watch`` follow it later, from any
    process. Reading and branching journals (``history``, ``state_at``,
    ``fork``, ``describe``) come from ``Inspection``. The design is the actor
    model over an event-sourced journal (see the Concepts page of the docs).

    Args:
        store: A URL for ``open_store`` (``sqlite:///agents.db``, ``s3://...``),
            opened and closed by the runtime, or a ``Store`` you opened.
        agents: Definitions to register (more with ``register``).
        namespace: The tenant: the runtime sees only its streams; every span
            and measurement carries it as ``durably.namespace``.
        snapshot_policy: When snapshots are written (default ``SnapshotPolicy()``).
        worker_id: Recorded on resume and in leases; ``host:pid`` by default.
        tracer_provider: OpenTelemetry tracer provider (default: the global one,
            read here). Spans follow the GenAI semantic conventions; with no SDK
            installed nothing is recorded and the step loop does no span work.
        mailbox_size: Commands queued per live agent before senders wait.
        redaction: A ``RedactionPolicy``, what never reaches the store; None:
            the default policy (secret names and token patterns);
            ``RedactionPolicy.disabled()`` stores everything.
        encryption: A ``FrameCipher`` such as ``AESGCMCipher``: records and
            snapshots encrypted at rest; None: plaintext.
        lease_ttl: Seconds. On a store with leases an agent runs only in the
            runtime holding its lease, renewed every third of this; a crashed
            runtime's agents are resumed elsewhere after it.
        meter_provider: OpenTelemetry meter provider (default: the global one,
            read here) for the metrics listed on the Telemetry page of the docs.

    Raises:
        InvalidArgumentError: A ``ValueError``: ``lease_ttl`` is not a finite number
            of at least 0, or ``mailbox_size`` not an int of at least 0.
        ArgumentTypeError: A ``TypeError``: ``namespace`` or ``worker_id`` is not a
            ``str``, ``snapshot_policy``, ``redaction`` or ``encryption`` not of its
            type, ``agents`` not a collection of ``AgentDefinition``.
        InvalidStoreError: ``store`` is neither a URL nor a ``Store`` (also a ``TypeError``).
        RuntimeNotStartedError: from every method but ``register`` and ``stream``,
            called before the runtime is entered.
    """

    def __init__(
        self,
        store: str | Store,
        *,
        agents: Iterable[AgentDefinition] = (),
        namespace: str = "default",
        snapshot_policy: SnapshotPolicy | None = None,
        worker_id: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        mailbox_size: int = 64,
        redaction: RedactionPolicy | None = None,
        encryption: FrameCipher | None = None,
        lease_ttl: float = 30.0,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        if not isinstance(store, (str, Store)):
            raise InvalidStoreError(
                f"Runtime needs a store URL (a str such as 'sqlite:///agents.db') or a Store, "
                f"got {type(store).__name__}"
            )
        self._store_arg = store
        check_figure("Runtime", "lease_ttl", lease_ttl, optional=False)
        check_figure("Runtime", "mailbox_size", mailbox_size, integer=True, optional=False)
        for name, value, kind in (
            ("namespace", namespace, str),
            ("worker_id", worker_id, str),
            ("snapshot_policy", snapshot_policy, SnapshotPolicy),
            ("redaction", redaction, RedactionPolicy),
        ):
            if value is not None and not isinstance(value, kind):
                raise ArgumentTypeError(f"Runtime: {name} must be a {kind.__name__}, got {type(value).__name__}")
        if encryption is not None and not all(
            callable(getattr(encryption, m, None)) for m in ("seal", "open", "current_key_id")
        ):
            raise ArgumentTypeError(
                f"Runtime: encryption must be a FrameCipher (such as AESGCMCipher), got {type(encryption).__name__}"
            )
        if isinstance(agents, (str, bytes)) or not isinstance(agents, Iterable):
            raise ArgumentTypeError(f"Runtime: agents must be a list of AgentDefinition, got {type(agents).__name__}")
        self.lease_ttl = lease_ttl
        self.namespace = namespace
        self.redaction = redaction if redaction is not None else RedactionPolicy()
        self.encryption = encryption
        self.worker_id = worker_id or f"{hostname()}:{os.getpid()}"
        self.policy = snapshot_policy or SnapshotPolicy()
        self.telemetry = Telemetry(namespace, tracer_provider, meter_provider)
        self._mailbox_size = mailbox_size
        self._definitions: dict[str, AgentDefinition] = {}
        for definition in agents:
            self.register(definition)
        self._live: dict[str, AgentActor] = {}
        self._activating = KeyedLock()  # single-flight start/resume per agent id (single_flight.py)
        self.draining = False  # set by drain(): nothing more is resumed here
        self._exit: AsyncExitStack | None = None

    # lifecycle --------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes never set: the store and what __aenter__ builds on it.
        if name in _STARTED_ATTRIBUTES:
            self._require_started()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _require_started(self) -> None:
        """Raise ``RuntimeNotStartedError`` unless ``__aenter__`` opened the store (for methods that
        would otherwise first fail inside a task group)."""
        if "store" not in self.__dict__:
            raise RuntimeNotStartedError(
                f"this Runtime is not started: use it as `async with Runtime(...) as rt:` "
                f"(on {self._describe_store()}) before calling its methods"
            )

    def _require_open(self) -> None:
        """Raise ``RuntimeNotStartedError`` once the runtime is being left (``__aexit__`` began).

        Called between an activation's durable record and its spawn: an agent whose
        ``started`` or ``resumed`` record was appended while the runtime exited (a
        ``resume_all`` in another task) must not reach a task group that is closing
        (anyio's ``RuntimeError``); its journal is intact, and the next runtime resumes it.
        """
        if self._exit is None:
            raise RuntimeNotStartedError(
                "this Runtime was left while an agent was being activated; "
                "its journal is intact and the next runtime resumes it"
            )

    def _describe_store(self) -> str:
        store = self.__dict__.get("_store_arg")
        return repr(store) if store is not None else "its store"

    def __repr__(self) -> str:
        state = "started" if self.__dict__.get("_exit") is not None else "not started"
        return f"Runtime({self._describe_store()}, namespace={self.namespace!r}, {state})"

    async def __aenter__(self) -> Runtime:
        async with AsyncExitStack() as stack:
            if isinstance(self._store_arg, str):
                self.store = await stack.enter_async_context(open_store(self._store_arg))
            else:
                self.store = self._store_arg
            self.codec = RecordCodec(cipher=self.encryption)
            committer = GroupCommitter(self.store, tracer=self.telemetry.tracer, attributes=self.telemetry.attributes)
            snapshots = SnapshotWriter(
                self.store,
                policy=self.policy,
                telemetry=self.telemetry,
                codec_factory=partial(RecordCodec, cipher=self.encryption),
            )
            self._services = JournalServices(
                self.store,
                self.codec,
                committer,
                snapshots,
                self.policy,
                self.telemetry,
                redaction=self.redaction,
                indexed=status_index.indexed(self.store),
            )
            self._leases = LeaseKeeper(self.store, self.worker_id, self.lease_ttl)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg.start_soon(snapshots.run, self._snapshot_written)
            self._tg.start_soon(self._leases.renew_forever, self._lease_lost)
            stack.push_async_callback(self._shutdown)
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:  # never swallows the body's exception
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
        """Make a definition available to start and resume agents by its name.

        A definition registered under a name already taken replaces it.

        Args:
            definition: The agent definition; its ``name`` is the key.

        Raises:
            ArgumentTypeError: ``definition`` is not an ``AgentDefinition``.
        """
        if not isinstance(definition, AgentDefinition):
            raise ArgumentTypeError(f"register takes an AgentDefinition, got {type(definition).__name__}")
        self._definitions[definition.name] = definition

    def _definition(self, name: str) -> AgentDefinition:
        try:
            return self._definitions[name]
        except KeyError:
            raise DefinitionNotRegisteredError(f"agent definition {name!r} is not registered in this runtime") from None

    def stream(self, agent_id: str) -> StreamId:
        """The stream of an agent in this runtime's namespace.

        Args:
            agent_id: The agent's id.

        Returns:
            ``StreamId(namespace, agent_id)``.
        """
        return StreamId(self.namespace, agent_id)

    # starting and resuming --------------------------------------------------

    async def start(
        self, agent: str | AgentDefinition, agent_id: str, task: str, *, budget: Budget | None = None
    ) -> AgentHandle:
        """Start a new agent run and return its handle, without waiting for it.

        A definition passed as an object is registered if its name is not yet.

        Args:
            agent: The definition, or the name of a registered one.
            agent_id: The new agent's id in this runtime's namespace.
            task: The task, the conversation's first user message.
            budget: Limits for this run (None: the definition's ``budget``).

        Returns:
            The handle of the live activation (``await handle.wait()``).

        Raises:
            AgentExistsError: ``agent_id`` already has a journal (or is live here,
                or another runtime holds its lease).
            DefinitionNotRegisteredError: ``agent`` names no registered definition.
            ArgumentTypeError: ``task`` is not a ``str`` or ``budget`` not a ``Budget``
                (before anything is journaled).
        """
        if not isinstance(task, str):
            raise ArgumentTypeError(f"start: task must be a str, got {type(task).__name__}")
        if budget is not None and not isinstance(budget, Budget):
            raise ArgumentTypeError(f"start: budget must be a Budget, got {type(budget).__name__}")
        definition = agent if isinstance(agent, AgentDefinition) else self._definition(agent)
        self._definitions.setdefault(definition.name, definition)
        async with self._activating.hold(agent_id):
            return await self._start(definition, agent_id, task, budget)

    async def resume(self, agent_id: str, *, force: bool = False) -> AgentHandle | None:
        """Resume an agent from its journal if it can run.

        Appends a ``resumed`` record first: that moves the stream's seq, so a
        stale process still running this agent is fenced off at its next append
        (fencing by expected seq, as in Kleppmann's lease pattern). When the
        registered definition's version or digest differs from the recorded one,
        its ``on_definition_change`` policy applies: ``continue`` and ``migrate``
        journal a ``definition_changed`` record in the same batch (with the state
        fields the migrate hook rewrote); ``stop`` returns None, appends nothing,
        and ``status`` reports ``needs_migration``. On a store with leases the
        agent's lease is taken first. An agent already live here returns its
        handle (single-flight).

        Args:
            agent_id: The agent in this runtime's namespace.
            force: Take the agent over even when another runtime holds its lease,
                for an operator who knows that runtime is dead (it is fenced by
                the expected seq, and this run holds no lease).

        Returns:
            The live activation's handle; None when the agent is parked or done,
                when the ``stop`` policy holds it, or while this runtime drains.

        Raises:
            ArgumentTypeError: ``force`` is not a bool (a ``TypeError``).
            AgentLeasedError: Another runtime holds the agent's lease (it runs
                the agent).
            AgentNotFoundError: The agent has no records.
            DefinitionNotRegisteredError: Its recorded definition name is not
                registered here.
            DefinitionMigrationError: The migrate hook failed; nothing appended.
            CorruptRecordError: The journal is unreadable (also
                ``UnknownSchemaVersionError``): not resumed, bytes untouched.
        """
        check_bool("Runtime.resume", "force", force)
        return await self._resume(agent_id, force=force)

    async def run(
        self, agent: str | AgentDefinition, agent_id: str, task: str, *, budget: Budget | None = None
    ) -> AgentState:
        """Start an agent (or resume it if its journal exists) and wait until it stops or parks.

        A resumed run with the same definition and task is silent: calling
        ``run`` again after a crash picks the agent up where its journal ends.

        Args:
            agent: The definition, or the name of a registered one.
            agent_id: The agent's id in this runtime's namespace.
            task: The task, the conversation's first user message.
            budget: Limits for a new run (None: the definition's ``budget``);
                ignored when the agent is resumed.

        Returns:
            The ``AgentState`` it stopped or parked with.

        Raises:
            AgentExistsError: ``agent_id`` exists under another definition name
                or with another task (the message says which differs): an id
                reused by mistake must not hand back another agent's result.
            AgentLeasedError: Another runtime holds the agent's lease (it runs
                the agent now: ``owner`` and ``expires_at`` say who and until
                when).
            AgentLeaseLostError: Another runtime took the lease while it ran here.
            DefinitionNotRegisteredError: ``agent`` names no registered definition.
            ArgumentTypeError: ``task`` is not a ``str`` or ``budget`` not a ``Budget``.
            DurablyError: What ``resume`` and ``AgentHandle.wait`` raise.
        """
        handle: AgentHandle | None
        try:
            handle = await self.start(agent, agent_id, task, budget=budget)
        except AgentExistsError:
            name = agent.name if isinstance(agent, AgentDefinition) else agent
            existing = await self.status(agent_id)
            if (recorded := existing.definition.get("name")) != name:
                raise AgentExistsError(
                    f"agent {agent_id!r} exists in namespace {self.namespace!r} under definition "
                    f"{recorded!r}, not {name!r}"
                ) from None
            if existing.task != task:
                raise AgentExistsError(
                    f"agent {agent_id!r} exists in namespace {self.namespace!r} with another task "
                    f"({existing.task[:60]!r}, not {task[:60]!r})"
                ) from None
            handle = await self.resume(agent_id)
            if handle is None:
                return await self.status(agent_id)
        return await handle.wait()

    async def status(self, agent_id: str) -> AgentState:
        """The agent's current state.

        An agent live in this runtime answers from its actor's state, without
        reading the store (a copy of what is durable: a tool result still being
        committed is not in it, as a restore after a crash would not find it);
        any other is restored from the store (its latest snapshot and the
        records after it).
        A command another process appended to a live agent shows once that
        agent folds it in, at its next append.

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            Its ``AgentState``.

        Raises:
            AgentNotFoundError: The agent has no records.
        """
        actor = self._live.get(agent_id)
        if actor is not None and not actor.done.is_set():
            return actor.journal.durable_state()
        return (await self._restore_journal(agent_id)).state

    async def agents(self, *, statuses: Iterable[str] | None = None) -> list[AgentState]:
        """The states of the namespace's agents.

        An agent whose journal cannot be read is listed with status
        ``unreadable`` and the error as reason.

        Args:
            statuses: Only agents with one of these statuses (None: all). On a
                store with a status index only the agents it names (and those it
                has no entry for) are restored, so the call costs what it
                returns, not the namespace.

        Returns:
            The ``AgentState`` of each agent, sorted by agent id.

        Raises:
            ArgumentTypeError: ``statuses`` is a bare ``str`` or not iterable.
            InvalidArgumentError: ``statuses`` names a status no agent can have.
        """
        from durably._reading.watch import check_statuses

        wanted = check_statuses("agents", statuses)
        streams = status_index.listing(self.store, self.namespace, wanted) or self.store.list_streams(self.namespace)
        states = []
        async for stream in streams:
            try:
                state = await self.status(stream.agent_id)
            except AgentNotFoundError:
                continue  # purged between the listing and the read
            except CodecError as exc:
                state = AgentState(
                    namespace=self.namespace,
                    agent_id=stream.agent_id,
                    status="unreadable",
                    reason=f"{type(exc).__name__}: {exc}",
                )
            if wanted is None or state.status in wanted:
                states.append(state)
        return sorted(states, key=lambda state: state.agent_id)
