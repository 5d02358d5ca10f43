"""The Runtime: owns a store, runs agent actors, routes commands, resumes parked agents.

    async with Runtime("sqlite:///agents.db", agents=[my_agent]) as rt:
        state = await rt.run("my_agent", "ticket-42", "Summarise the open tickets")

Everything an agent does is in its journal, so the runtime itself holds only
live actors. Stop the process at any point and a new runtime on the same store
resumes every agent where its journal ends.

``Runtime`` is the public face; its methods delegate to parts that each own
their state, built when the runtime is entered: ``Activations`` (who runs what
here: live actors, leases, start and resume; ``durably._fleet.activations``),
``Operator`` (commands from outside; ``durably._operate.operator``), ``Reader``
(history, time travel, describe, watch; ``durably._reading.reader``) and
``Upkeep`` (purge, sweep, reencrypt; ``durably._upkeep.upkeep``). The fleet's
scans and serving (``durably._fleet.scan``, ``serving``) are handed the
``Activations``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Iterable
from contextlib import AsyncExitStack
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio

from durably._figures import check_bool, check_figure
from durably._fleet.activations import Activations
from durably._fleet.attach import OnRunning
from durably._fleet.leases import LeaseKeeper
from durably._fleet.limiter import Limiter
from durably._fleet.owner import hostname
from durably._fleet.run_to_stop import RunToStop
from durably._fleet.workers import DEFAULT_TIMEOUT as DEFAULT_HEARTBEAT_TIMEOUT
from durably._fleet.workers import Heartbeats, check_timeout
from durably._journal import status_index
from durably._journal.records import RecordCodec
from durably._journal.redaction_policy import RedactionPolicy
from durably._journal.snapshots import SnapshotPolicy, SnapshotWriter
from durably._journal.write_formats import write_formats, write_formats_from_env
from durably._journal.writer import JournalServices
from durably._loop import commands as cmd
from durably._loop.agent import AgentDefinition, Budget
from durably._loop.limits import Limit, check_limits
from durably._loop.state import SLEEPING, AgentState
from durably._loop.timers import wake_time
from durably._operate.operator import Operator
from durably._reading.reader import Reader
from durably._telemetry import Telemetry, worker_attributes
from durably._upkeep.upkeep import Upkeep
from durably.errors import (
    AgentNotFoundError,
    ArgumentTypeError,
    InvalidStoreError,
    RuntimeNotStartedError,
)
from durably.storage._codec import FrameCipher
from durably.storage._errors import CodecError
from durably.storage._group_commit import GroupCommitter
from durably.storage._registry import open_store
from durably.storage._spi import Store, StreamId
from durably.storage._url_redaction import redact_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from datetime import datetime

    from opentelemetry import metrics, trace

    from durably._fleet.handle import AgentHandle
    from durably._fleet.owner import LeaseHolder
    from durably._operate.placement import CommandResult
    from durably._reading.describe import AgentDescription
    from durably._reading.events import AgentEvents
    from durably._reading.history import HistoryEntry
    from durably._reading.watch import StatusChange
    from durably._upkeep.reencrypt import ReencryptReport
    from durably._upkeep.retention import RetentionPolicy, SweepItem

# Commands, retries, serving, scans, definition changes, retention and key rotation
# import their modules when first called: a runtime that only runs agents never loads them (import time).

#: What ``__aenter__`` sets up; a method reaching one of them before that is told to enter the runtime.
_STARTED_ATTRIBUTES = frozenset({"store", "codec", "_activations", "_operator", "_reader", "_upkeep", "_runs", "_tg"})


class Runtime:
    """Runs durable agents on one store.

    Use as ``async with``; leaving it cancels live actors (their journals are
    already durable) and flushes pending snapshots. ``start`` launches an agent
    without waiting for it; ``wait`` / ``watch`` follow it later, from any
    process. Reading and branching journals (``history``, ``state_at``,
    ``fork``, ``describe``) needs no live agent: any process on the store may
    do it. The design is the actor
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
        heartbeat_timeout: Seconds. A serving runtime heartbeats in the store
            (every third of this, at most each second); a lease holder whose
            heartbeat is older than this is dead, and its agents are taken at
            once on any host (``durably._fleet.workers``).
        limits: ``Limit``s on model calls, shared with every worker of the
            store; each covers the calls its key names (``"model:gpt-4o"``,
            ``"agent:support"``). A call waits before each attempt until every
            limit covering it has room (docs: Limits).
        write_compat: The oldest durably release still running on this store
            (``"0.1"``) while a fleet is upgraded: records and snapshots are
            written in the formats it reads (one frame per record, unpaged
            snapshots); reading is unchanged. None: ``$DURABLY_WRITE_COMPAT``,
            and unset or empty, this release's formats (docs: Upgrading a fleet).

    Raises:
        InvalidArgumentError: A ``ValueError``: ``lease_ttl`` is not a finite number
            of at least 0, ``mailbox_size`` not an int of at least 0, or
            ``heartbeat_timeout`` not a finite number > 0, two ``limits`` with one key,
            a limit key not starting with ``model:`` or ``agent:``, a ``write_compat``
            (or ``$DURABLY_WRITE_COMPAT``) naming no known release; at ``async with``,
            a concurrency limit on a store without leases that processes share.
        ArgumentTypeError: A ``TypeError``: ``namespace`` or ``worker_id`` is not a
            ``str`` (nor ``write_compat``), ``snapshot_policy``, ``redaction`` or ``encryption`` not of its
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
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
        limits: Iterable[Limit] = (),
        write_compat: str | None = None,
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
        self.write_formats = (
            write_formats_from_env()
            if write_compat is None
            else write_formats(write_compat, source="Runtime: write_compat")
        )
        self.limits = check_limits("Runtime", limits, runtime_wide=True)
        self.heartbeat_timeout = check_timeout("Runtime", heartbeat_timeout)
        self.namespace = namespace
        self.redaction = redaction if redaction is not None else RedactionPolicy()
        self.encryption = encryption
        self.worker_id = worker_id or f"{hostname()}:{os.getpid()}"
        self.policy = snapshot_policy or SnapshotPolicy()
        self.telemetry = Telemetry(
            namespace,
            tracer_provider,
            meter_provider,
            worker=worker_attributes(self.worker_id, hostname(), os.getpid()),
        )
        self._mailbox_size = mailbox_size
        self._definitions: dict[str, AgentDefinition] = {}  # shared with the activations: a later register is seen
        for definition in agents:
            self.register(definition)
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

    def _describe_store(self) -> str:
        store = self.__dict__.get("_store_arg")
        if isinstance(store, str):
            return repr(redact_url(store))  # a repr or an error message never shows the URL's password
        return repr(store) if store is not None else "its store"

    @property
    def draining(self) -> bool:
        """Whether ``drain()`` ran: nothing more is resumed here (False before the runtime is entered)."""
        activations = self.__dict__.get("_activations")
        return activations is not None and activations.draining

    def __repr__(self) -> str:
        state = "started" if self.__dict__.get("_exit") is not None else "not started"
        return f"Runtime({self._describe_store()}, namespace={self.namespace!r}, {state})"

    async def __aenter__(self) -> Runtime:
        async with AsyncExitStack() as stack:
            if isinstance(self._store_arg, str):
                self.store = await stack.enter_async_context(open_store(self._store_arg))
            else:
                self.store = self._store_arg
            self.codec = RecordCodec(cipher=self.encryption, formats=self.write_formats)
            committer = GroupCommitter(self.store, tracer=self.telemetry.tracer, attributes=self.telemetry.attributes)
            snapshots = SnapshotWriter(
                self.store,
                policy=self.policy,
                telemetry=self.telemetry,
                codec_factory=partial(RecordCodec, cipher=self.encryption, formats=self.write_formats),
            )
            services = JournalServices(
                self.store,
                self.codec,
                committer,
                snapshots,
                self.policy,
                self.telemetry,
                redaction=self.redaction,
                indexed=status_index.indexed(self.store),
            )
            leases = LeaseKeeper(self.store, self.worker_id, self.lease_ttl)
            leases.heartbeats = Heartbeats(
                self.store, leases.identity, self.heartbeat_timeout, writes=self.write_formats
            )
            leases.on_takeover = lambda stream, holder: self.telemetry.count("takeovers")
            leases.on_lost = lambda stream: self.telemetry.count("lost_leases")
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._activations = Activations(
                store=self.store,
                codec=self.codec,
                services=services,
                leases=leases,
                telemetry=self.telemetry,
                namespace=self.namespace,
                worker_id=self.worker_id,
                definitions=self._definitions,
                mailbox_size=self._mailbox_size,
                task_group=self._tg,
            )
            from durably._children import delivery as child_delivery
            from durably._children.runs import ChildRuns

            self._activations.children = ChildRuns(self._activations)
            self._activations.on_end = partial(child_delivery.on_end, self._activations)
            # Always there: a definition registered later may bring limits of its own.
            self._activations.admission = Limiter(
                self.store, self.worker_id, self.limits, slot_ttl=self.lease_ttl
            ).admission
            self._operator = Operator(self._activations)
            self._runs = RunToStop(self, self._activations)
            self._reader = Reader(self.store, self.codec, self.telemetry, self.namespace)
            self._upkeep = Upkeep(self.store, self.codec, self.telemetry, self.namespace, self._activations)
            self._tg.start_soon(snapshots.run, self._activations.snapshot_written)
            self._tg.start_soon(leases.renew_forever, self._activations.lease_lost)
            stack.push_async_callback(self._shutdown)
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:  # never swallows the body's exception
        exit_stack, self._exit = self._exit, None
        if exit_stack is None:
            return False
        self._activations.open = False
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
        self._activations.stop_all()
        with anyio.move_on_after(10, shield=True):
            await self._activations.services.snapshots.flush()
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
        self,
        agent: str | AgentDefinition,
        agent_id: str,
        task: str,
        *,
        budget: Budget | None = None,
        not_before: datetime | None = None,
    ) -> AgentHandle:
        """Start a new agent run and return its handle, without waiting for it.

        A definition passed as an object is registered if its name is not yet.

        Args:
            agent: The definition, or the name of a registered one.
            agent_id: The new agent's id in this runtime's namespace.
            task: The task, the conversation's first user message.
            budget: Limits for this run (None: the definition's ``budget``).
            not_before: An aware datetime: the agent sleeps until then (a
                durable timer journaled with its ``started`` record; a serving
                worker runs it once it is due). None: it runs now.

        Returns:
            The handle of the live activation (``await handle.wait()``).

        Raises:
            AgentExistsError: ``agent_id`` already has a journal (or is live here,
                or another runtime holds its lease).
            DefinitionNotRegisteredError: ``agent`` names no registered definition.
            ArgumentTypeError: ``task`` is not a ``str``, ``budget`` not a ``Budget``
                or ``not_before`` not a ``datetime`` (before anything is journaled).
            InvalidArgumentError: ``not_before`` is a naive datetime.
        """
        if not isinstance(task, str):
            raise ArgumentTypeError(f"start: task must be a str, got {type(task).__name__}")
        if budget is not None and not isinstance(budget, Budget):
            raise ArgumentTypeError(f"start: budget must be a Budget, got {type(budget).__name__}")
        wake_at = None if not_before is None else wake_time("start: not_before", until=not_before)
        definition = agent if isinstance(agent, AgentDefinition) else self._activations.definition(agent)
        return await self._activations.start(definition, agent_id, task, budget, wake_at)

    async def submit(
        self,
        agent: str | AgentDefinition,
        agent_id: str,
        task: str,
        *,
        budget: Budget | None = None,
        not_before: datetime | None = None,
    ) -> CommandResult:
        """Create an agent for the workers to run, without running it here (an enqueue).

        Journals the new run's ``started`` record (and its status index entry)
        as ``start`` does, takes no lease and spawns nothing: a worker serving
        this namespace with the definition registered (``serve()``, ``durably
        worker``) resumes it, at once on a store with change notifications, else
        at its next scan. A definition passed as an object is registered if its
        name is not yet.

        Args:
            agent: The definition, or the name of a registered one.
            agent_id: The new agent's id in this runtime's namespace.
            task: The task, the conversation's first user message.
            budget: Limits for this run (None: the definition's ``budget``).
            not_before: An aware datetime: the agent sleeps until then (a
                durable timer journaled with its ``started`` record), and a
                worker runs it once it is due. None: as soon as a worker can.

        Returns:
            A ``CommandResult``: the agent's state (``running``, or ``sleeping`` with ``not_before``) and its
                placement: ``queued`` naming the live workers that serve its
                definition, or ``unassigned`` when none does now.

        Raises:
            AgentExistsError: ``agent_id`` already has a journal or is live here (nothing written).
            DefinitionNotRegisteredError: ``agent`` names no registered definition.
            ArgumentTypeError: ``task`` is not a ``str``, ``budget`` not a ``Budget``
                or ``not_before`` not a ``datetime`` (before anything is journaled).
            InvalidArgumentError: ``not_before`` is a naive datetime.
            StoreUnavailableError: The store cannot be reached.
        """
        if not isinstance(task, str):
            raise ArgumentTypeError(f"submit: task must be a str, got {type(task).__name__}")
        if budget is not None and not isinstance(budget, Budget):
            raise ArgumentTypeError(f"submit: budget must be a Budget, got {type(budget).__name__}")
        wake_at = None if not_before is None else wake_time("submit: not_before", until=not_before)
        definition = agent if isinstance(agent, AgentDefinition) else self._activations.definition(agent)
        self._definitions.setdefault(definition.name, definition)
        from durably._fleet.submit import submit

        return await submit(self._activations, definition, agent_id, task, budget, wake_at)

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
            force: Wait for the lease when another runtime holds it (up to
                about one ``lease_ttl``), for an operator who believes that runtime
                is dead: its lease lapses, is taken here in the store, and anything
                the old holder still appends is refused by the store's fencing.
                A live holder keeps renewing its lease: then ``AgentLeasedError``.

        Returns:
            The live activation's handle; None when the agent is parked or done,
                when the ``stop`` policy holds it, or while this runtime drains.

        Raises:
            ArgumentTypeError: ``force`` is not a bool (a ``TypeError``).
            AgentLeasedError: Another runtime holds the agent's lease (it runs
                the agent; with ``force``, it still held it after the wait).
            AgentNotFoundError: The agent has no records.
            DefinitionNotRegisteredError: Its recorded definition name is not
                registered here.
            DefinitionMigrationError: The migrate hook failed; nothing appended.
            CorruptRecordError: The journal is unreadable (also
                ``UnknownSchemaVersionError``): not resumed, bytes untouched.
        """
        check_bool("Runtime.resume", "force", force)
        return await self._activations.resume(agent_id, force=force)

    async def run(
        self,
        agent: str | AgentDefinition,
        agent_id: str,
        task: str,
        *,
        budget: Budget | None = None,
        on_running: OnRunning = "wait",
    ) -> AgentState:
        """Start an agent (or resume it if its journal exists) and wait until it stops or parks.

        A resumed run with the same definition and task is silent: calling
        ``run`` again after a crash picks the agent up where its journal ends.
        An agent running in another runtime now (it holds the lease) is
        attached to: ``run`` follows its journal until it stops or parks there
        and returns that state, and takes it over if that runtime dies first
        (``durably._fleet.attach``). One running in this runtime is waited for too.
        An agent waiting for its child agents (``agent_tool``) is not stopped:
        ``run`` waits for it, runs it here once its children woke it (unless
        another runtime took it first, which it then follows), and returns when
        it stops or parks otherwise; the children must run somewhere (their
        definition registered here, or served by a worker). A child sleeping
        on a timer whose definition is registered here is woken here once due
        (lease-guarded, as ``serve()`` wakes it), so one process needs no ``serve()``.

        Args:
            agent: The definition, or the name of a registered one.
            agent_id: The agent's id in this runtime's namespace.
            task: The task, the conversation's first user message.
            budget: Limits for a new run (None: the definition's ``budget``);
                ignored when the agent is resumed.
            on_running: ``"wait"`` (the default): attach to an agent another
                runtime runs now; ``"raise"``: raise ``AgentLeasedError`` instead.

        Returns:
            The ``AgentState`` it stopped or parked with (``sleeping`` on a timer too).

        Raises:
            AgentExistsError: ``agent_id`` exists under another definition name
                or with another task (the message says which differs): an id
                reused by mistake must not hand back another agent's result.
            AgentLeasedError: With ``on_running="raise"``: another runtime holds
                the agent's lease (it runs the agent now: ``owner`` and
                ``expires_at`` say who and until when).
            AgentLeaseLostError: Another runtime took the lease while it ran here.
            InvalidArgumentError: ``on_running`` is neither ``"wait"`` nor ``"raise"``.
            DefinitionNotRegisteredError: ``agent`` names no registered definition.
            ArgumentTypeError: ``task`` is not a ``str`` or ``budget`` not a ``Budget``.
            DurablyError: What ``resume`` and ``AgentHandle.wait`` raise.
        """
        return await self._runs.run(agent, agent_id, task, budget, on_running)

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
        return await self._activations.status(agent_id)

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

    # commands from outside: the operator part -------------------------------

    async def approve(
        self,
        agent_id: str,
        approval_id: str,
        *,
        approved: bool = True,
        by: str = "",
        note: str = "",
        result: Any = cmd.NO_RESULT,
    ) -> CommandResult:
        """Decide an open approval; a parked agent then resumes here if its definition is registered.

        For a call whose outcome is unknown (policy ``ask``) the three answers
        are: ``approved=True`` runs it again, ``approved=False`` skips it (the
        model is told it did not happen), and ``result=...`` says it happened:
        that value is journaled as the call's result and the call never runs
        again.

        Args:
            agent_id: The agent in this runtime's namespace.
            approval_id: The open approval to decide.
            approved: Run the call (True) or skip it (False).
            by: Who decided, recorded with the decision.
            note: Why, recorded with the decision.
            result: The call's result, for a call that happened (JSON-like data,
                or any value the journal stores exactly); the default means none.

        Returns:
            The state after the decision as a ``CommandResult`` whose
                ``placement`` says truthfully whether and where the agent runs now
                (here, in another live runtime, after a remote holder's lease lapses,
                or not yet: a ``durably.Placement`` whose ``where`` is a
                ``durably.Where``); every command returns one.

        Raises:
            ArgumentTypeError: ``approved`` is not a bool (a ``TypeError``: ``"no"``
                would be truthy); nothing is journaled.
            ApprovalAlreadyDecidedError: The approval was decided already,
                perhaps a moment ago by another process.
            InvalidCommandError: An unknown approval, a finished agent, or a
                result with ``approved=False``.
            UnencodableValueError: A result that cannot be stored (the message
                gives its field path).
            AgentNotFoundError: The agent has no records.
        """
        return await self._operator.approve(agent_id, approval_id, approved=approved, by=by, note=note, result=result)

    async def extend_budget(
        self, agent_id: str, *, steps: int = 0, tokens: int = 0, cost_usd: float = 0.0
    ) -> CommandResult:
        """Raise a suspended (or running) agent's limits; a suspended one resumes.

        Each figure is added to the limit of that name; a limit that is None
        (unlimited) stays so.

        Args:
            agent_id: The agent in this runtime's namespace.
            steps: Model responses to add to the ``steps`` limit.
            tokens: Tokens to add to the ``tokens`` limit.
            cost_usd: US dollars to add to the ``cost_usd`` limit.

        Returns:
            A ``CommandResult`` (as ``approve``).

        Raises:
            InvalidCommandError: A figure that is not finite and >= 0 (a NaN
                limit would never bite), nothing to extend (the agent has no
                limit on the figures given), or the agent is finished, failed or
                cancelled.
            AgentNotFoundError: The agent has no records.
        """
        return await self._operator.extend_budget(agent_id, steps=steps, tokens=tokens, cost_usd=cost_usd)

    async def retry(self, agent_id: str) -> AgentHandle | None:
        """Resume a ``failed`` agent from its journal, once its cause is fixed.

        Appends a ``retried`` record (the status is running again) and resumes
        the agent here: a model error is retried from the step that failed; a
        call whose outcome is unknown under the ``fail`` policy becomes an
        approval request (re-run, skip, or "it happened" with a result). A call
        whose result could not be stored is never run again: the model is told
        so. Without its definition registered here (``durably retry``), the
        agent is made runnable for a worker that has it (``serve``), and every
        call whose outcome is unknown becomes a question.

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            The live activation's handle; None when the agent now waits for an
                approval, or when its definition is not registered here.

        Raises:
            InvalidCommandError: The agent is not failed.
            AgentNotFoundError: The agent has no records.
            AgentFencedError: Other writers appended first on every one of a
                few attempts.
            DurablyError: What ``resume`` raises.
        """
        return await self._operator.retry(agent_id)

    async def send(self, agent_id: str, content: str, *, role: str = "user") -> CommandResult:
        """Add a message to the agent's conversation (seen by its next model call).

        Args:
            agent_id: The agent in this runtime's namespace.
            content: The message's text.
            role: The message's role in the conversation: ``user`` or
                ``system`` (an instruction).

        Returns:
            A ``CommandResult`` (as ``approve``).

        Raises:
            ArgumentTypeError: ``content`` is not a str (a ``TypeError``);
                nothing is journaled.
            InvalidArgumentError: ``role`` is not ``user`` or ``system`` (a
                ``ValueError``); nothing is journaled.
            InvalidCommandError: The agent is finished, failed or cancelled.
            AgentNotFoundError: The agent has no records.
        """
        return await self._operator.send(agent_id, content, role=role)

    async def cancel(self, agent_id: str, reason: str | None = "") -> CommandResult:
        """Stop the agent for good (after its current step), and its child agents with it.

        Args:
            agent_id: The agent in this runtime's namespace.
            reason: Why, recorded with the ``cancelled`` record (None: no reason, as ``""``).

        Returns:
            A ``CommandResult`` (as ``approve``).

        Raises:
            ArgumentTypeError: ``reason`` is neither a str nor None (a
                ``TypeError``); nothing is journaled.
            InvalidCommandError: The agent is already finished, failed or
                cancelled.
            AgentNotFoundError: The agent has no records.
        """
        result = await self._operator.cancel(agent_id, reason)
        from durably._children.family import cancel_children

        await cancel_children(self._activations, self._operator, agent_id)
        return result

    # reading and branching journals: the reader part ---------------------------

    def history(
        self, agent_id: str, *, after_seq: int = 0, kinds: Iterable[str] | None = None, payload: bool = False
    ) -> AsyncIterator[HistoryEntry]:
        """The agent's journal records, decoded, in seq order; bounded memory on any length.

        The idea is the event store's "read stream forward" (EventStoreDB) and
        LangGraph's ``get_state_history``.

        Args:
            agent_id: The agent in this runtime's namespace.
            after_seq: Only records with a seq above this (an int >= 0).
            kinds: Only records of these kinds (None: all).
            payload: Include each record's data.

        Returns:
            An async iterator of ``HistoryEntry``.

        Raises:
            ArgumentTypeError: ``kinds`` is a bare ``str`` (it would be read as its
                letters) or not iterable.
            AgentNotFoundError: When iterated: the agent has no records.
            InvalidCommandError: When iterated: a negative ``after_seq`` or an
                unknown kind.
            CorruptRecordError: When iterated, at the first record that cannot be
                read (the entries before it were yielded).
        """
        return self._reader.history(agent_id, after_seq=after_seq, kinds=kinds, payload=payload)

    async def state_at(self, agent_id: str, seq: int) -> AgentState:
        """The agent's folded state right after record ``seq``.

        It is built by the restore path: the nearest snapshot at or before
        ``seq``, then replay.

        Args:
            agent_id: The agent in this runtime's namespace.
            seq: The record to stop after (an int >= 1).

        Returns:
            The state as it was right after record ``seq``.

        Raises:
            AgentNotFoundError: The agent has no records.
            SeqOutOfRangeError: ``seq`` is below 1, past the last record, or
                before the oldest snapshot of a journal whose start was
                compacted away.
        """
        return await self._reader.state_at(agent_id, seq)

    async def fork(self, agent_id: str, at_seq: int, new_agent_id: str) -> AgentState:
        """Fork an agent: a new one whose journal is the source's up to ``at_seq``.

        The new journal is a copy of ``agent_id``'s records 1..``at_seq`` plus a
        ``forked`` record; the source is never changed. What follows runs anew,
        with new idempotency keys, once a runtime resumes it (``resume``,
        ``serve``).

        Args:
            agent_id: The source agent.
            at_seq: The last source record the fork copies.
            new_agent_id: The fork's agent id, in the same namespace.

        Returns:
            The fork's state (status as the source's at ``at_seq``).

        Raises:
            AgentNotFoundError: The source has no records.
            AgentExistsError: ``new_agent_id`` already has records.
            SeqOutOfRangeError: ``at_seq`` is outside the source's journal, or
                inside its compacted part (a fork copies the records).
        """
        return await self._reader.fork(agent_id, at_seq, new_agent_id)

    async def describe(self, agent_id: str) -> AgentDescription:
        """Describe one agent as it is now (as ``temporal workflow describe``, ``dbos workflow get``).

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            Its ``AgentDescription``: status and why, definition, seq, usage and
                budget left, open approvals, pending calls, lease holder and expiry,
                times, fork origin.

        Raises:
            AgentNotFoundError: The agent has no records.
            CorruptRecordError: Its journal cannot be read (also
                ``UnknownSchemaVersionError``).
        """
        return await self._reader.describe(agent_id)

    async def describe_all(self, *, statuses: Iterable[str] | None = None) -> list[AgentDescription]:
        """``describe`` every agent of the namespace, in the store's listing order.

        An agent whose journal cannot be read is described with status
        ``unreadable`` and the error as its reason.

        Args:
            statuses: Only agents with one of these statuses (read from the
                status index where the store has one); None: all.

        Returns:
            One ``AgentDescription`` per agent.

        Raises:
            ArgumentTypeError: ``statuses`` is a bare ``str`` or not iterable.
            InvalidArgumentError: ``statuses`` names a status no agent can have.
        """
        return await self._reader.describe_all(statuses=statuses)

    def watch(self, agent_id: str, *, poll_interval: float = 0.2) -> AsyncIterator[StatusChange]:
        """Follow the agent's status changes from now on, wherever it runs.

        Args:
            agent_id: The agent in this runtime's namespace.
            poll_interval: Seconds between reads of its journal's tail (> 0).

        Returns:
            An endless async iterator of ``StatusChange`` (break out, or cancel,
                to stop).

        Raises:
            AgentNotFoundError: When iterated: the agent has no records yet.
            InvalidCommandError: When iterated: ``poll_interval`` is not a
                positive number.
        """
        return self._reader.watch(agent_id, poll_interval=poll_interval)

    def events(
        self, agent_id: str, *, after_seq: int | None = None, buffer: int = 256, poll_interval: float = 0.2
    ) -> AgentEvents:
        """Follow the agent event by event from now on: streamed text, tool starts and results, status changes.

        Journaled events (``model_responded``, ``tool_started``, ``tool_result``,
        ``status``) are never lost and come wherever the agent runs: live from
        this process's actor, or read from the journal every ``poll_interval``
        seconds when another worker runs it. Deltas (pieces of the model's text
        as a streaming model sends them) exist only in the process that runs
        the agent and are never journaled: a reader elsewhere sees none, and a
        reader more than ``buffer`` deltas behind loses the newest ones
        (``AgentEvents.dropped``); the agent never waits for a reader. Only the
        whole reply is journaled, so a crash mid-stream asks the model again on
        resume; a failed streamed attempt's deltas are followed by the retry's.

        Args:
            agent_id: The agent in this runtime's namespace.
            after_seq: Also yield the journaled events of the records after
                this seq that are already written (0: from the agent's first
                record, e.g. for an agent started after this call); None: from
                now on only.
            buffer: Deltas (and, separately, journaled events) a slow reader may
                have queued before deltas are dropped and journaled events re-read
                from the journal (>= 1).
            poll_interval: Seconds between reads of the journal's tail (> 0).

        Returns:
            ``AgentEvents``: use it as ``async with rt.events(agent_id) as events:
                async for event in events: ...``; it subscribes at once, so
                nothing after this call is missed, and is endless until closed.

        Raises:
            InvalidCommandError: ``after_seq``, ``buffer`` or ``poll_interval`` is out of range.
            AgentNotFoundError: When iterated: the agent has no records yet.
        """
        from durably._reading.events import AgentEvents

        actor = self._activations.live.get(agent_id)  # not entered: RuntimeNotStartedError
        return AgentEvents(
            self._activations.events,
            self.store,
            self.codec,
            self.stream(agent_id),
            self.telemetry,
            from_seq=None if actor is None else actor.journal.state.last_seq,
            after_seq=after_seq,
            buffer=buffer,
            poll_interval=poll_interval,
        )

    def watch_namespace(self, *, poll_interval: float = 0.5) -> AsyncIterator[StatusChange]:
        """Follow the status changes of every agent of the namespace from now on, new agents included.

        An agent whose journal cannot be read is skipped (its neighbours are not).

        Args:
            poll_interval: Seconds between scans of the namespace (> 0).

        Returns:
            An endless async iterator of ``StatusChange``.

        Raises:
            InvalidCommandError: When iterated: ``poll_interval`` is not a
                positive number.
        """
        return self._reader.watch_namespace(poll_interval=poll_interval)

    async def wait(
        self,
        agent_id: str,
        until: Iterable[str] | str | None = None,
        *,
        timeout: float | None = None,
        poll_interval: float = 0.2,
    ) -> AgentState:
        """Wait until the agent's status is one of ``until``, following it across activations and processes.

        ``start()`` launches an agent without waiting; this is how an embedding
        service waits later. Returns at once when the status already is one of
        them. It waits through timers: while it waits, the agent (and, while it
        waits for child agents, each child) sleeping on a ``durably.Sleep``
        whose definition is registered in this runtime is resumed here once
        due, as ``serve()`` would (lease-guarded: it wakes once, wherever a
        worker races it). A sleeper whose definition is not registered here
        wakes only where a runtime serving it runs (``serve()`` or ``durably worker``).

        Args:
            agent_id: The agent in this runtime's namespace.
            until: A status or statuses (None: stopped or parked: finished,
                failed, cancelled, waiting_approval, suspended).
            timeout: Seconds to wait at most (None: no limit).
            poll_interval: Seconds between reads of the journal's tail (> 0).

        Returns:
            The agent's state once its status is one of ``until``.

        Raises:
            WaitTimeoutError: ``timeout`` passed first; it carries the last state
                seen.
            AgentNotFoundError: The agent has no records.
            InvalidCommandError: An unknown status, a bad ``timeout`` or
                ``poll_interval``.
        """
        from durably._fleet import wake_here
        from durably._reading.watch import check_until

        def waiting() -> Awaitable[AgentState]:
            return self._reader.wait(agent_id, until, timeout=timeout, poll_interval=poll_interval)

        # When a sleeping agent ends the wait, it is not woken (its children are).
        itself = SLEEPING not in check_until(until)
        return await wake_here.waking(self._activations, agent_id, waiting, itself=itself)

    # stored data: the upkeep part ---------------------------------------------

    async def purge(self, agent_id: str, *, force: bool = False) -> None:
        """Delete everything stored of an agent in this namespace: records, snapshots, blobs, its seq.

        Its child agents (``agent_tool``) are purged first, the same way.

        The id may then be started anew, as a new run (fresh run id, so fresh
        idempotency keys): nothing of the old one is seen. A live activation in
        this runtime is stopped first and its queued snapshot dropped. While
        another live worker holds the agent's lease (it runs the agent now,
        perhaps inside a tool call) the purge is refused, unless ``force``;
        otherwise it is made under the agent's lease, so no worker resumes the
        agent meanwhile.

        Args:
            agent_id: The agent in this runtime's namespace.
            force: Purge even while another worker runs the agent: that worker
                is fenced at its next append and what its step in flight did
                is not journaled.

        Raises:
            AgentNotFoundError: Nothing of the agent is stored.
            AgentLeasedError: Another live worker holds the agent (without
                ``force``); its ``owner`` names it. Nothing is deleted.
            PurgeIncompleteError: Something of the stream is left after the delete.
            StoreUnavailableError: The store cannot be reached.
        """
        check_bool("purge", "force", force)
        from durably._children.family import purge_children

        await purge_children(self._activations, self._upkeep, agent_id, force=force)
        return await self._upkeep.purge(agent_id, force=force)

    async def sweep(
        self, retention: RetentionPolicy, *, now: float | None = None, dry_run: bool = False
    ) -> list[SweepItem]:
        """Purge this namespace's agents whose time-to-live (by status, from their last record) has passed.

        A stream that cannot be read or dated is kept (and reported so), and so
        is one a live worker holds (reported ``held``): each purge is made
        under the agent's lease.

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
        return await self._upkeep.sweep(retention, now=now, dry_run=dry_run)

    async def reencrypt(self, *, wait: float = 10.0) -> list[ReencryptReport]:
        """Rewrite this namespace's streams so every frame uses the current key.

        The history before the rewrite is compacted into a snapshot (see
        ``durably reencrypt``). Each stream is rewritten under its lease: a
        stream a live worker holds (this runtime included) is never rewritten
        under it, so the work that worker holds is kept; it is tried again
        until ``wait`` seconds have passed and then reported ``held``.

        Args:
            wait: Seconds to keep trying the streams live workers hold (finite, >= 0).

        Returns:
            One ``durably.ReencryptReport`` per stream, in the store's listing
                order.

        Raises:
            InvalidArgumentError: The runtime has no ``encryption`` (a
                ``ValueError``; raised at the first stream, so an empty
                namespace returns ``[]``), or ``wait`` is not a finite number >= 0
                (before anything is read).
            DecryptionError: A frame does not decrypt (also ``UnknownKeyError``);
                that stream is not changed.
            ConflictError: A writer without a lease (a command) kept appending to a stream.
        """
        check_figure("reencrypt", "wait", wait, optional=False)
        return await self._upkeep.reencrypt(wait=wait)

    # a worker among others: the fleet -----------------------------------------

    async def lease_holder(self, agent_id: str) -> LeaseHolder | None:
        """Who holds an agent's lease now.

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            A ``LeaseHolder``: owner, worker id, host and pid, expiry (unix
                seconds) and liveness (``alive``; ``dead``: taken at once by the next
                resume here or in ``serve``, also when its heartbeat stopped on any
                host; ``remote``: another host whose heartbeat is fresh or absent,
                only the expiry tells). None
                when nobody holds it or the store has no leases.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """
        return await self._activations.leases.holder_info(self.stream(agent_id))

    async def resume_all(self) -> list[AgentHandle]:
        """Resume every runnable agent of the namespace whose definition is registered.

        An agent whose journal cannot be read (corrupt, foreign bytes, written by
        a newer durably, or any other error restoring it) is logged and skipped,
        never resumed: one bad stream must not stop every other agent of the
        namespace. On a store with a status index only the agents it lists as
        runnable are read.

        Returns:
            The handles of the agents resumed here.

        Raises:
            StoreUnavailableError: The store is out (an outage is not skipped).
            RuntimeNotStartedError: The runtime was left while the scan ran (from another
                task); the agents not yet resumed stay as their journals say.
        """
        from durably._fleet.scan import scan

        return (await scan(self._activations)).handles

    async def serve(
        self,
        poll_interval: float = 1.0,
        *,
        drain_signals: Iterable[int] = (signal.SIGTERM,),
        drain_timeout: float = 30.0,
        max_agents: int | None = None,
    ) -> None:
        """Resume runnable agents forever, polling the store every ``poll_interval`` seconds.

        This is how an agent parked in one process runs on after another process
        approved it or extended its budget, and how a dead worker's agents are
        taken over (at once when it was a process of this host, and on any host
        once its heartbeat is older than ``heartbeat_timeout``). While it serves,
        and until the runtime is left, this runtime heartbeats in the store
        (``durably workers`` lists it; see ``durably._fleet.workers``). A store outage
        (``StoreUnavailableError``, or any other ``StoreError`` but
        ``StoreClosedError``) does not end it: scans back off up to 30 s,
        are logged, traced (``durably.serve.outage``) and counted, and serving
        carries on when the store is back. On a drain signal it drains and
        returns: a deploy's SIGTERM lets the steps in flight finish and hands the
        agents to the other workers at once. Cancel the calling scope to stop
        without draining.

        Args:
            poll_interval: Seconds between scans of the store.
            drain_signals: Signal numbers that make it drain and return (handled
                in the main thread only; ``()`` for none).
            drain_timeout: Seconds ``drain`` waits for the steps in flight.
            max_agents: Most live agents in this worker (None: no cap); scans
                also take no more than an even split of what they saw among the
                workers.

        Raises:
            InvalidArgumentError: ``max_agents`` is not an int of at least 1, or
                ``poll_interval`` or ``drain_timeout`` not a finite number of
                seconds > 0 (a ``ValueError``), before anything is resumed.
            RuntimeNotStartedError: The runtime was not entered.
            WorkerExistsError: The store has no leases (``file://``) and another
                live worker serves this namespace (its heartbeat still beats),
                before anything is resumed.
        """
        from durably._fleet import serving

        await serving.serve(
            self._activations,
            poll_interval,
            drain_signals=drain_signals,
            drain_timeout=drain_timeout,
            max_agents=max_agents,
        )

    async def drain(self, timeout: float = 30.0) -> None:
        """Stop every live agent here after its current step, release its lease, resume nothing more.

        Handles of drained activations return their state, whose status is
        still ``running``: the agent goes on wherever it is resumed.

        Args:
            timeout: Seconds to wait for the steps in flight before cancelling
                them (their intents then follow the tools' unknown-outcome
                policies where they resume).

        Raises:
            RuntimeNotStartedError: The runtime was not entered.
        """
        from durably._fleet import serving

        await serving.drain(self._activations, timeout)
