"""What an operator asks about one agent: ``describe`` (as ``temporal workflow describe``, ``dbos workflow get``).

An ``AgentDescription`` gathers, from the journal and the store's lease API
only (no running agent needed, any process may ask): the status and why, the
definition and its digest, seq and steps, usage and cost against the budget,
the open approvals with the call each would run, the pending tool calls, the
lease holder and its expiry (and whether that holder is a process of this
host that is gone), when the agent was created and last active, and the agent
it was forked from. ``to_json`` is the stable shape of ``durably show --json``.
A LangGraph thread in the namespace is described from its own frames
(``describe_thread``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from durably._fleet.limiter import waiting_for
from durably._fleet.owner import Liveness, holder_liveness
from durably._journal import status_index
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import CANCELLED, FINISHED, NEEDS_MIGRATION, RUNNING, TERMINAL, AgentState
from durably._reading import threads
from durably.errors import AgentNotFoundError
from durably.schemas._records import Kind, Record
from durably.storage._errors import CodecError
from durably.storage._spi import Store, StreamId, supports_leases

if TYPE_CHECKING:
    from durably._telemetry import Telemetry


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Who runs the agent now (``AgentDescription.lease``).

    Attributes:
        owner: The runtime's lease owner name, ``worker_id/nonce@host:pid:start:boot:pidns``
            (``Runtime.lease_holder`` reads it as a ``durably.LeaseHolder``).
        expires_at: When the lease expires, in unix seconds.
        token: The lease's fencing token.
        dead: True when the owner is a process of this host that no longer exists, or an
            earlier incarnation of a reused pid: the next resume or ``serve`` takes its agents at once.
    """

    owner: str
    expires_at: float
    token: int
    dead: bool


@dataclass(frozen=True, slots=True)
class AgentDescription:
    """Everything ``describe`` reports about one agent (see the module docstring).

    Attributes:
        namespace: The agent's namespace.
        agent_id: The agent's id.
        status: Its status (``unreadable`` when its journal cannot be read).
        reason: Why the status is what it is (for ``unreadable``, the error).
        definition: The recorded definition: ``{"name", "version", "digest"}``.
        run_id: The id of the current run.
        task: The task the run was started with.
        seq: The seq of the last record folded in.
        steps: Model responses so far.
        usage: ``{"steps", "input_tokens", "output_tokens", "cost_usd"}`` used.
        budget: ``{"steps", "tokens", "cost_usd"}`` limits (None: unlimited).
        budget_left: Each limit mapped to what remains (None: unlimited).
        open_approvals: The approvals with no decision yet, each with the call
            it would run (``approval_id``, ``tool``, ``arguments``, ``call_id``,
            ``key``, ``reason``); none once the agent is finished, failed or
            cancelled (nothing can be decided then).
        pending_calls: The unresolved tool calls (``id``, ``tool``,
            ``arguments``, ``key``, ``started``, ``attempts``; with
            ``retry_at`` and ``last_error`` while its last attempt failed and a
            retry is due, and ``heartbeat``, its newest heartbeat details, once
            it beat); none once the
            agent is finished or cancelled (they will never run). A failed
            agent keeps them: ``retry`` takes them up again.
        result: The run's result once ``finished`` (None before and otherwise).
        created_at: Unix seconds of the first record (None when the first
            records were compacted away).
        last_activity_at: Unix seconds of the last record.
        forked_from: A fork's origin (namespace, agent_id, run_id, seq), or None.
        leases_supported: Whether the store has leases.
        lease: The live lease (``LeaseInfo``); None when no live lease is held or
            the store has no leases (``leases_supported`` says which).
        state: The full folded state (not in ``to_json``: it holds content).
        waiting_for: The fleet ``Limit`` a model call of the agent waits for now, as
            its worker said in the store: ``{"limit", "kind" ("rate" or
            "concurrency"), "until" (unix seconds it expects room, or None), "since"
            (unix seconds the wait began), "worker"}``;
            None when it waits for none.
    """

    namespace: str
    agent_id: str
    status: str
    reason: str
    definition: dict[str, Any]
    run_id: str
    task: str
    seq: int
    steps: int
    usage: dict[str, Any]
    budget: dict[str, Any]
    budget_left: dict[str, Any]
    open_approvals: list[dict[str, Any]]
    pending_calls: list[dict[str, Any]]
    result: Any
    created_at: float | None
    last_activity_at: float | None
    forked_from: dict[str, Any] | None
    leases_supported: bool
    lease: LeaseInfo | None
    state: AgentState = field(repr=False, compare=False)
    waiting_for: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The description as ``durably show --json`` prints it (a stable shape).

        Returns:
            A plain, JSON-ready dict of every field but ``state``; ``lease`` as a
                dict or None.
        """
        out = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "state"}
        out["lease"] = asdict(self.lease) if self.lease is not None else None
        return out


async def describe(store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry) -> AgentDescription:
    """Describe the agent of ``stream`` as it is now.

    Raises ``AgentNotFoundError`` (no records), ``CorruptRecordError`` /
    ``UnknownSchemaVersionError`` (its journal cannot be read) and
    ``StoreUnavailableError``.
    """
    if await threads.is_thread(store, stream):  # a LangGraph thread: not agent records
        return await describe_thread(store, codec, stream)
    restored = await restore(store, codec, stream, telemetry)
    if restored is None:
        raise AgentNotFoundError(f"no agent {stream.agent_id!r} in namespace {stream.namespace!r}")
    return await describe_state(store, codec, stream, restored.state)


async def describe_thread(store: Store, codec: RecordCodec, stream: StreamId) -> AgentDescription:
    """``describe`` for a LangGraph thread (``threads``): its status and reason, seq,
    the newest root checkpoint's step and run id, and its times; no usage, budget,
    approvals or calls (LangGraph keeps those in its channels). Raises ``CodecError``
    subclasses for a frame that does not read, and ``StoreUnavailableError``."""
    summary = await threads.read_summary(store, codec.codec, stream)
    supported = supports_leases(store)
    state = threads.thread_agent_state(summary)
    return AgentDescription(
        namespace=stream.namespace,
        agent_id=stream.agent_id,
        status=summary.status,
        reason=summary.reason,
        definition=dict(state.definition),
        run_id=state.run_id,
        task="",
        seq=summary.seq,
        steps=summary.step + 1 if summary.step is not None and summary.step >= 0 else 0,
        usage=dict(state.usage),
        budget=dict(state.budget),
        budget_left=budget_left(state),
        open_approvals=[],
        pending_calls=[],
        result=None,
        created_at=summary.created_at,
        last_activity_at=summary.last_activity_at,
        forked_from=None,
        leases_supported=supported,
        lease=None,
        state=state,
    )


async def describe_state(store: Store, codec: RecordCodec, stream: StreamId, state: AgentState) -> AgentDescription:
    """``describe`` for a state already restored (the lease and times are read here)."""
    first = await _record_at(store, codec, stream, 0)
    last_seq = state.last_seq or await store.last_seq(stream)  # an unreadable agent has no folded seq
    last = await _record_at(store, codec, stream, max(last_seq - 1, 0))
    supported = supports_leases(store)
    lease = None
    if supports_leases(store) and (held := await store.get_lease(stream)) is not None:
        lease = LeaseInfo(held.owner, held.expires_at, held.token, holder_liveness(held.owner) is Liveness.DEAD)
    status, reason = await _held(store, stream, state)
    return AgentDescription(
        namespace=stream.namespace,
        agent_id=stream.agent_id,
        status=status,
        reason=reason,
        definition=dict(state.definition),
        run_id=state.run_id,
        task=state.task,
        seq=state.last_seq,
        steps=state.usage["steps"],
        usage=dict(state.usage),
        budget=dict(state.budget),
        budget_left=budget_left(state),
        open_approvals=[] if state.status in TERMINAL else [_approval(a) for a in state.open_approvals()],
        pending_calls=[]
        if state.status in (FINISHED, CANCELLED)
        else await _pending_calls(store, codec, stream, state),
        result=state.result if state.status == FINISHED else None,
        created_at=first.at if first is not None and first.seq == 1 else None,
        last_activity_at=last.at if last is not None else None,
        forked_from=state.forked_from,
        leases_supported=supported,
        lease=lease,
        state=state,
        waiting_for=await waiting_for(store, stream) if state.status == RUNNING else None,
    )


async def _held(store: Store, stream: StreamId, state: AgentState) -> tuple[str, str]:
    """The status and reason to show: the journal's, unless it says ``running`` and a worker
    marked the agent ``needs_migration`` in the status index (its definition may not run it)."""
    found = status_index.index_store(store)
    if state.status != RUNNING or found is None:
        return state.status, state.reason
    entry = await found.get_index(stream)
    if entry is None or entry.status != NEEDS_MIGRATION:
        return state.status, state.reason
    recorded = state.definition
    return NEEDS_MIGRATION, (
        f"a worker found definition {recorded.get('name')!r} changed since version {recorded.get('version')!r} "
        f"was recorded, with policy stop: no worker runs it until a definition that accepts it is deployed "
        f"(the recorded one, or on_definition_change='continue' or 'migrate')"
    )


async def describe_namespace(
    store: Store, codec: RecordCodec, namespace: str, telemetry: Telemetry, *, statuses: Iterable[str] | None = None
) -> AsyncIterator[AgentDescription]:
    """``describe`` every agent of ``namespace`` (``statuses``: only those with one of these), in the store's listing order.

    An agent whose journal cannot be read is described with status
    ``unreadable`` and the error as its reason, never stopping the listing.
    With ``statuses`` on a store with a status index only the streams the
    index names (and those it has no entry for) are read.
    """
    wanted = None if statuses is None else frozenset(statuses)
    streams = status_index.listing(store, namespace, wanted) or store.list_streams(namespace)
    async for stream in streams:
        try:
            found = await describe(store, codec, stream, telemetry)
        except AgentNotFoundError:
            continue  # purged between the listing and the read
        except CodecError as exc:
            state = AgentState(
                namespace=namespace,
                agent_id=stream.agent_id,
                status="unreadable",
                reason=f"{type(exc).__name__}: {exc}",
            )
            found = await describe_state(store, codec, stream, state)
        if wanted is None or found.status in wanted:
            yield found


def budget_left(state: AgentState) -> dict[str, Any]:
    """Each budget limit minus what is spent (None: that limit is unlimited)."""
    usage = state.usage
    spent = {
        "steps": usage["steps"],
        "tokens": usage["input_tokens"] + usage["output_tokens"],
        "cost_usd": usage["cost_usd"],
    }
    return {name: (None if allowed is None else allowed - spent.get(name, 0)) for name, allowed in state.budget.items()}


def _approval(request: dict[str, Any]) -> dict[str, Any]:
    return {k: request.get(k) for k in ("approval_id", "tool", "arguments", "call_id", "key", "reason")}


#: How many of the newest records ``describe`` reads to find an in-flight call's arguments.
_INTENT_LOOKBACK = 64


async def _pending_calls(store: Store, codec: RecordCodec, stream: StreamId, state: AgentState) -> list[dict[str, Any]]:
    """The model's unresolved tool calls, then every other call started and not done: a
    function agent's call in flight, whose arguments only its intent record holds (looked
    for among the newest records; an older or unreadable one leaves them empty)."""
    listed = [_pending(state, c) for c in state.pending_calls]
    keys = {c["key"] for c in listed}
    in_flight = {key: entry for key, entry in state.ledger.items() if not entry.get("done") and key not in keys}
    if not in_flight:
        return listed
    arguments = await _intent_arguments(store, codec, stream, state.last_seq, set(in_flight))
    for key, entry in in_flight.items():
        call = {"id": entry["call_id"], "name": entry["tool"], "arguments": arguments.get(key, {}), "key": key}
        listed.append(_pending(state, call))
    return listed


async def _intent_arguments(
    store: Store, codec: RecordCodec, stream: StreamId, last_seq: int, wanted: set[str]
) -> dict[str, dict[str, Any]]:
    """The ``arguments`` of the newest intents of ``wanted`` keys among the last records."""
    found: dict[str, dict[str, Any]] = {}
    reader = JournalReader(store, codec, stream)
    async with aclosing(store.read(stream, max(last_seq - _INTENT_LOOKBACK, 0))) as records:
        async for stored in records:
            try:
                record = await reader.decode(stored)
            except CodecError:
                continue
            if record.kind == Kind.TOOL_INTENT and record.data.get("key") in wanted and "arguments" in record.data:
                found[record.data["key"]] = record.data["arguments"]
    return found


def _pending(state: AgentState, call: dict[str, Any]) -> dict[str, Any]:
    entry = state.ledger.get(call["key"])
    waiting = entry is not None and entry.get("failed") == entry["attempts"]  # a failed attempt, its retry due
    return {
        "id": call["id"],
        "tool": call["name"],
        "arguments": call["arguments"],
        "key": call["key"],
        "started": entry is not None,
        "attempts": entry["attempts"] if entry else 0,
        **({"retry_at": entry["retry_at"], "last_error": entry["last_error"]} if entry and waiting else {}),
        **({"heartbeat": entry["heartbeat"]} if entry and "heartbeat" in entry else {}),
    }


async def _record_at(store: Store, codec: RecordCodec, stream: StreamId, after: int) -> Record | None:
    """The first record after seq ``after`` that is still stored, decoded (None: none);
    an unreadable one counts as none (the caller reports times only)."""
    try:
        return await JournalReader(store, codec, stream).first_after(after)
    except CodecError:
        return None
