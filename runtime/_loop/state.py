"""An agent's state as a pure fold of its journal: ``apply(state, record)``.

The state is what a step needs and what a snapshot stores: the conversation,
the pending tool calls of the last model response, the ledger of executed calls
keyed by idempotency key, approvals, plan, artifacts, usage against budget and
the status. ``apply`` appends to the top-level lists and dicts in place (so a
step costs the same at step 10 and step 10,000) but never mutates an element
once stored: it replaces it. ``to_wire`` copies the top-level containers, so a
snapshot being encoded in another thread shares only elements that never change.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from itertools import islice
from typing import Any, Protocol, cast

from durably._tools.tool import idempotency_key
from durably.errors import InvalidArgumentError, UnfoldableRecordError
from durably.schemas._records import Kind, Record

# Statuses. Parked ones hold no memory in the runtime; terminal ones never run again.
RUNNING = "running"
WAITING_APPROVAL = "waiting_approval"
SUSPENDED = "suspended"
SLEEPING = "sleeping"  # parked on a timer until ``wake_at``: any worker resumes it then
FINISHED = "finished"
FAILED = "failed"
CANCELLED = "cancelled"
# Parked until every child agent its tool calls started has ended (no process holds it).
WAITING_CHILD = "waiting_child"
TERMINAL = frozenset({FINISHED, FAILED, CANCELLED})
# Reported, never journaled: a runnable agent the runtime will not resume because its
# registered definition changed and the definition's policy is "stop" (runtime.migrate).
NEEDS_MIGRATION = "needs_migration"


class OlderPart(Protocol):
    """The older part of a paged section of a restored state, not decoded yet
    (``durably._journal.page_reader.Older``)."""

    #: The snapshot's page references of this part, oldest first.
    refs: list[dict[str, Any]]
    #: Items in those pages.
    count: int

    def whole(self, inline: Any, patches: dict[str, dict[str, Any]]) -> Any:
        """The whole section: the pages' items, then ``inline`` (with ``patches`` over the pages'
        entries of those keys, for a ledger); raises ``CorruptRecordError``."""
        ...


#: The sections a restored state may hold undecoded, and the snapshot field naming their pages.
PAGED = {"messages": "pages", "ledger": "ledger_pages"}


class _Whole:
    """``AgentState.messages`` / ``ledger`` of a state restored with its older part undecoded:
    the first read decodes it and puts the whole section in the instance, whose attribute
    then shadows this (a non-data descriptor), so later reads cost nothing more."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, state: AgentState | None, owner: type[AgentState]) -> Any:
        if state is None:
            return self
        return state._materialise(self.name)


@dataclass
class AgentState:
    """The folded state of one agent. Plain data only, so it snapshots as CBOR.

    Attributes:
        namespace: The agent's namespace.
        agent_id: The agent's id in its namespace.
        run_id: The id of this run (a new one after a purge and restart).
        definition: The recorded definition: ``{"name", "version", "digest"}``.
        status: ``running``, ``waiting_approval``, ``suspended``, ``finished``,
            ``failed``, ``cancelled`` (``new`` before the first record).
        reason: Why the status is what it is (budget limit, failure, approval).
        task: The task the run was started with.
        messages: The working conversation, OpenAI-style dicts.
        inbox: Messages that arrived while tool calls were pending: chat APIs
            want every tool result right after its call, so they join the
            conversation once the calls resolve.
        pending_calls: The tool calls of the last model response not yet
            resolved: ``{"id", "name", "arguments", "key"}``.
        ledger: Idempotency key -> the executed call (call, tool, attempts,
            done, result).
        approvals: Approval id -> the request and its decision.
        plan: The model's latest plan, a list of step descriptions.
        artifacts: Stored artifacts: ``{"name", "digest", "size"}``.
        usage: ``{"steps", "input_tokens", "output_tokens", "cost_usd"}`` used so
            far (cost in US dollars).
        budget: ``{"steps", "tokens", "cost_usd"}`` limits, each None where
            unlimited.
        result: The run's result once ``finished`` (None before).
        last_seq: The seq of the last record folded in (0: none).
        forked_from: A fork's origin (namespace, agent_id, run_id, seq of the
            source), from its ``forked`` record; None when not a fork.
        trace: The latest activation's trace reference (trace_id, span_id), from
            its started or resumed record: the next activation's span links to
            it. None: it was not traced.
        wake_at: While ``sleeping``: when its timer fires (unix seconds); None otherwise.
        parent: A child agent's parent (``agent_id``, ``run_id``, ``key`` of the
            call that started it), from its started record; None: not a child.
        children: Idempotency key of the call -> the child agent it started:
            ``{"agent_id", "call_id", "tool", "definition", "status"}`` (status
            ``running`` until the child's end reaches this journal).
    """

    namespace: str = ""
    agent_id: str = ""
    run_id: str = ""
    definition: dict[str, Any] = field(default_factory=dict)  # name, version, digest
    status: str = "new"
    reason: str = ""  # why the status is what it is (budget limit, failure, approval)
    task: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    # Messages that arrived while tool calls were pending: chat APIs want every tool
    # result right after its call, so they join the conversation once the calls resolve.
    inbox: list[dict[str, Any]] = field(default_factory=list)
    pending_calls: list[dict[str, Any]] = field(default_factory=list)  # id, name, arguments, key
    ledger: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> call, tool, attempts, done, result
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)  # approval id -> request + decision
    plan: list[str] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # name, digest, size
    usage: dict[str, Any] = field(
        default_factory=lambda: {"steps": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    )
    budget: dict[str, Any] = field(default_factory=lambda: {"steps": None, "tokens": None, "cost_usd": None})
    result: Any = None
    last_seq: int = 0
    # A fork's origin (namespace, agent_id, run_id, seq of the source), from its "forked" record.
    forked_from: dict[str, Any] | None = None
    # The latest activation's trace reference (trace_id, span_id), from its started or
    # resumed record: the next activation's span links to it. None: it was not traced.
    trace: dict[str, str] | None = None
    # While sleeping: when its timer fires (unix seconds).
    wake_at: float | None = None
    # A child agent's parent (agent_id, run_id, key of the call that started it).
    parent: dict[str, Any] | None = None
    # Call key -> the child agent it started (agent_id, call_id, tool, definition, status).
    children: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        """The state as a plain dict for a snapshot.

        Top-level containers are copied, so a snapshot being encoded in another
        thread shares only elements that never change.

        Returns:
            One key per field; ``trace``, ``wake_at`` and ``parent`` are left out
                while None, ``children`` while empty (optional in snapshot-v5.cddl).
        """
        wire = {}
        for f in fields(self):
            value = getattr(self, f.name)
            wire[f.name] = value.copy() if isinstance(value, (list, dict)) else value
        for optional in ("trace", "wake_at", "parent", "children"):
            if wire[optional] is None or wire[optional] == {}:
                del wire[optional]
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> AgentState:
        """Rebuild a state from ``to_wire`` output.

        Args:
            wire: What ``to_wire`` returned (e.g. decoded from a snapshot).

        Returns:
            The state; unknown keys are ignored, missing ones take their default.

        Raises:
            InvalidArgumentError: ``wire`` names pages (``durably._journal.page_reader.page_in`` puts
                them inline first).
        """
        if "pages" in wire or "ledger_pages" in wire:
            # Only the snapshot's newest messages and ledger entries are inline: never a state without the rest.
            raise InvalidArgumentError("a paged snapshot's state: read its pages first")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in wire.items() if k in names})

    @classmethod
    def from_paged(cls, wire: dict[str, Any], older: Mapping[str, OlderPart]) -> AgentState:
        """Rebuild a state from a paged snapshot's ``wire`` without decoding its pages.

        Args:
            wire: The snapshot's state without ``pages`` and ``ledger_pages``: its
                ``messages`` and ``ledger`` are the newest part only.
            older: ``messages`` / ``ledger`` -> that section's older part, undecoded.

        Returns:
            The state. Reading ``messages`` or ``ledger`` decodes that section's pages
                once (``CorruptRecordError`` there for a page that does not decode); the
                fold and the accessors below use the newest part alone where it is enough.
        """
        state = cls.from_wire(wire)
        lazy = {}
        for name, part in older.items():
            lazy[name] = (part, state.__dict__.pop(name))
        state.__dict__["_older"] = lazy
        return state

    def _lazy(self, name: str) -> tuple[OlderPart, Any] | None:
        """``name``'s undecoded older part and the newest part held with it; None once whole."""
        older = self.__dict__.get("_older")
        if not older or name not in older:
            return None
        if name in self.__dict__:  # assigned anew since (a fold replaced it): the pages are no part of it
            del older[name]
            if name == "ledger":
                self.__dict__.pop("_patches", None)
            return None
        return cast(tuple[OlderPart, Any], older[name])

    def _materialise(self, name: str) -> Any:
        lazy = self._lazy(name)
        if lazy is None:
            raise AttributeError(name)
        part = lazy[0]
        patches = self.__dict__.get("_patches", {}) if name == "ledger" else {}
        whole = part.whole(lazy[1], patches)
        if name == "ledger":
            self.__dict__.pop("_patches", None)
        del self.__dict__["_older"][name]
        self.__dict__[name] = whole
        if patches and not patches.keys().isdisjoint(islice(whole, part.count)):
            return whole  # a patch changed a page's entry: the pages are stale, paged anew from now on
        # The pages' own objects, so later snapshots still name these pages while they are unchanged.
        if name == "messages":
            origin: tuple[list[Any], ...] = (whole[: part.count],)
        else:
            origin = (list(islice(whole, part.count)), list(islice(whole.values(), part.count)))
        self.__dict__.setdefault("_decoded", {})[name] = (part, origin)
        return whole

    def _from_pages(self, name: str) -> tuple[list[dict[str, Any]], Any] | None:
        """Page references and the rest of section ``name``, when the snapshot it was restored
        from names pages of it and its oldest items are still those pages' (the same objects:
        a fold never changes an item in place); None otherwise."""
        lazy = self._lazy(name)
        if lazy is not None and name == "ledger" and self.__dict__.get("_patches"):
            self._materialise(name)  # entries folded in over keys the pages may hold: resolved first
            lazy = None
        if lazy is not None:
            return list(lazy[0].refs), lazy[1].copy()
        decoded = self.__dict__.get("_decoded")
        if not decoded or name not in decoded:
            return None
        part, origin = decoded[name]
        whole = getattr(self, name)
        count = part.count
        if name == "messages":
            same = len(whole) >= count and all(map(operator.is_, whole, origin[0]))
        else:
            same = (
                len(whole) >= count
                and all(map(operator.is_, whole, origin[0]))
                and all(map(operator.is_, whole.values(), origin[1]))
            )
        if not same:
            del decoded[name]  # rewritten (a compaction, a fork): paged anew from now on
            return None
        rest = whole[count:] if name == "messages" else dict(islice(whole.items(), count, None))
        return list(part.refs), rest

    def snapshot_wire(self) -> dict[str, Any]:
        """``to_wire`` for the snapshot writer, naming the pages the state was restored from.

        Returns:
            ``to_wire``'s dict, except that a section restored from pages whose items are
                unchanged is given as those pages' references (``pages``, ``ledger_pages``)
                and the rest, so the snapshot names the same pages without decoding or
                writing them again.
        """
        if not self.__dict__.get("_older") and not self.__dict__.get("_decoded"):
            return self.to_wire()
        held = {name: paged for name in PAGED if (paged := self._from_pages(name)) is not None}
        if "ledger" in held:
            # Ledger pages may continue conversation pages (snapshot-v6.cddl, page-ref "base"): when
            # the conversation no longer names those (compacted, rewritten), the ledger is paged anew.
            named = {ref["digest"] for name in PAGED if name in held for ref in held[name][0]}
            if any(not named.issuperset(ref.get("base", ())) for ref in held["ledger"][0]):
                del held["ledger"]
                self.__dict__.get("_decoded", {}).pop("ledger", None)
        wire = {}
        for f in fields(self):
            if f.name in held:
                refs, rest = held[f.name]
                wire[f.name] = rest
                wire[PAGED[f.name]] = refs
            else:
                value = getattr(self, f.name)
                wire[f.name] = value.copy() if isinstance(value, (list, dict)) else value
        for optional in ("trace", "wake_at", "parent", "children"):
            if wire[optional] is None or wire[optional] == {}:
                del wire[optional]
        return wire

    def newest_messages(self) -> tuple[int, list[dict[str, Any]]]:
        """Where the newest messages are, without decoding pages.

        Returns:
            ``(offset, messages)``: ``messages`` is the conversation from index ``offset``
                on (the whole of it, offset 0, once decoded), the state's own list:
                appending to it appends to the conversation.
        """
        lazy = self._lazy("messages")
        if lazy is None:
            return 0, self.messages
        return lazy[0].count, cast(list[dict[str, Any]], lazy[1])

    def message_count(self) -> int:
        """The conversation's length, without decoding pages.

        Returns:
            ``len(messages)``.
        """
        offset, newest = self.newest_messages()
        return offset + len(newest)

    def messages_from(self, start: int) -> list[dict[str, Any]]:
        """The conversation's messages from one index on; decodes pages only when it is in them.

        Args:
            start: An index into ``messages``.

        Returns:
            A copy of ``messages[start:]``.
        """
        offset, newest = self.newest_messages()
        return newest[start - offset :] if start >= offset else self.messages[start:]

    def replace_messages_from(self, start: int, messages: list[dict[str, Any]]) -> None:
        """Replace the conversation from one index on; decodes pages only when it is in them.

        Args:
            start: An index into ``messages``.
            messages: What ``messages[start:]`` becomes.
        """
        offset, newest = self.newest_messages()
        if start >= offset:
            newest[start - offset :] = messages
        else:
            self.messages[start:] = messages

    def turn_start(self) -> int:
        """Where the conversation's trailing tool messages begin.

        Decodes pages only when the run of them reaches into pages.

        Returns:
            The index of the first of them; the conversation's length when it ends otherwise.
        """
        offset, newest = self.newest_messages()
        start = len(newest)
        while start > 0 and newest[start - 1]["role"] == "tool":
            start -= 1
        if start == 0 and offset:
            return self._turn_start_whole()
        return offset + start

    def _turn_start_whole(self) -> int:
        messages = self.messages
        start = len(messages)
        while start > 0 and messages[start - 1]["role"] == "tool":
            start -= 1
        return start

    def ledger_entry(self, key: str) -> dict[str, Any] | None:
        """One ledger entry, looked up in the newest entries first.

        A key not among them decodes the ledger's pages: the answer is exact, a call
        is never taken as new when it is not.

        Args:
            key: An idempotency key.

        Returns:
            ``ledger.get(key)``.
        """
        lazy = self._lazy("ledger")
        if lazy is not None and key not in self.__dict__.get("_patches", ()):
            entry = lazy[1].get(key)
            if entry is not None:
                return cast(dict[str, Any], entry)
        return self.ledger.get(key)

    def set_ledger_entry(self, key: str, entry: dict[str, Any]) -> None:
        """Set one ledger entry; without decoding pages when the key is among the newest entries.

        Args:
            key: An idempotency key.
            entry: What ``ledger[key]`` becomes.
        """
        lazy = self._lazy("ledger")
        if lazy is not None and key in lazy[1] and key not in self.__dict__.get("_patches", ()):
            lazy[1][key] = entry
        else:
            self.ledger[key] = entry

    def merge_ledger_entry(self, key: str, default: dict[str, Any], changes: dict[str, Any]) -> None:
        """``ledger[key] = {**ledger.get(key, default), **changes}`` (the fold's write), without decoding pages.

        A key not among the newest entries is written over ``default`` and its
        ``changes`` are kept, to be put over the pages' entry of that key, if any,
        once the ledger is decoded.

        Args:
            key: An idempotency key.
            default: The entry when the ledger holds none under ``key``.
            changes: The fields written over it.
        """
        lazy = self._lazy("ledger")
        if lazy is None:
            ledger = self.ledger
            ledger[key] = {**ledger.get(key, default), **changes}
            return
        inline, patches = lazy[1], self.__dict__.setdefault("_patches", {})
        if key in inline:
            inline[key] = {**inline[key], **changes}
            if key in patches:
                patches[key] = {**patches[key], **changes}
        else:
            inline[key] = {**default, **changes}
            patches[key] = dict(changes)

    def call_ids(self) -> set[str]:
        """The ids of every tool call in ``messages``.

        Kept beside the state (not a field: never snapshotted) and grown as model
        turns are folded in, so a step does not scan the whole conversation; a new
        ``messages`` list, or a fold that rewrites it in place, builds it again.

        Returns:
            The set itself: callers must not change it.
        """
        cache = self.__dict__.get("_call_ids")
        if cache is None or cache[0] is not self.messages:
            cache = (self.messages, {c.get("id") for m in self.messages for c in m.get("tool_calls") or ()})
            self.__dict__["_call_ids"] = cache
        return cast(set[str], cache[1])

    @property
    def parked(self) -> bool:
        """True while the agent waits for a human (approval, budget) or for its child agents."""
        return self.status in (WAITING_APPROVAL, SUSPENDED, WAITING_CHILD)

    def open_approvals(self) -> list[dict[str, Any]]:
        """The approval requests with no decision yet.

        Returns:
            The requests (dicts from ``approvals``) whose ``decision`` is None.
        """
        return [a for a in self.approvals.values() if a.get("decision") is None]


for _name in PAGED:
    # default_factory fields have no class attribute: the descriptor is only ever reached
    # when the instance holds no whole section, i.e. while its pages are undecoded.
    setattr(AgentState, _name, _Whole(_name))


def apply(state: AgentState, record: Record) -> AgentState:
    """Fold one record into ``state`` (in place) and return it.

    Raises ``ValueError`` when the record does not follow ``state.last_seq``
    (a gap or a replay), which would mean the journal was misread, and
    ``UnfoldableRecordError`` for a record whose data does not fit its kind.
    """
    if record.seq != state.last_seq + 1:
        raise ValueError(f"record seq {record.seq} does not follow {state.last_seq}")
    handler = _HANDLERS.get(record.kind)
    if handler is not None:
        try:
            handler(state, record.data)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise UnfoldableRecordError(
                f"{record.kind} record does not fold: {type(exc).__name__}: {exc}", seq=record.seq
            ) from exc
    state.last_seq = record.seq
    return state


def _started(s: AgentState, d: dict[str, Any]) -> None:
    s.namespace, s.agent_id, s.run_id = d["namespace"], d["agent_id"], d["run_id"]
    s.definition, s.task, s.status = d["definition"], d["task"], RUNNING
    s.budget = d["budget"]
    s.trace = d.get("trace")
    s.parent = d.get("parent")
    messages = [{"role": "system", "content": d["instructions"]}] if d.get("instructions") else []
    s.messages = messages + [{"role": "user", "content": d["task"]}]


def _message_received(s: AgentState, d: dict[str, Any]) -> None:
    message = {"role": d.get("role", "user"), "content": d["content"]}
    (s.inbox if s.pending_calls else s.newest_messages()[1]).append(message)


def _model_responded(s: AgentState, d: dict[str, Any]) -> None:
    calls = d["tool_calls"]
    s.newest_messages()[1].append({"role": "assistant", "content": d["text"], "tool_calls": calls})
    if (cache := s.__dict__.get("_call_ids")) is not None and cache[0] is s.__dict__.get("messages"):
        cache[1].update(c.get("id") for c in calls)
    s.pending_calls = [c if "key" in c else dict(c, key=_legacy_key(s, c)) for c in calls]
    usage = d["usage"]
    s.usage = {
        "steps": s.usage["steps"] + 1,
        "input_tokens": s.usage["input_tokens"] + usage["input_tokens"],
        "output_tokens": s.usage["output_tokens"] + usage["output_tokens"],
        "cost_usd": s.usage["cost_usd"] + usage["cost_usd"],
    }
    if d.get("plan") is not None:
        s.plan = d["plan"]


def _tool_intent(s: AgentState, d: dict[str, Any]) -> None:
    default = {"call_id": d["call_id"], "tool": d["tool"], "attempts": 0, "done": False}
    s.merge_ledger_entry(d["key"], default, {"attempts": d["attempt"]})


def _tool_result(s: AgentState, d: dict[str, Any]) -> None:
    key = d["key"]
    outcome = {"result": d.get("result"), "error": d.get("error"), "reconciled": d.get("reconciled", False)}
    s.merge_ledger_entry(key, {"call_id": d["call_id"], "tool": d["tool"], "attempts": 0}, {"done": True, **outcome})
    content = d["error"] if d.get("error") is not None else d.get("result")
    _place_result(s, d["call_id"], {"role": "tool", "tool_call_id": d["call_id"], "content": content})
    if (used := d.get("usage")) is not None:  # a model request journaled as a call: it counts as a step
        s.usage = {
            "steps": s.usage["steps"] + 1,
            "input_tokens": s.usage["input_tokens"] + used["input_tokens"],
            "output_tokens": s.usage["output_tokens"] + used["output_tokens"],
            "cost_usd": s.usage["cost_usd"] + used["cost_usd"],
        }
    s.pending_calls = [c for c in s.pending_calls if c["key"] != key]
    if not s.pending_calls and s.inbox:
        s.newest_messages()[1].extend(s.inbox)
        s.inbox = []


def _place_result(s: AgentState, call_id: str, message: dict[str, Any]) -> None:
    """Append a tool message so the results of one turn keep the model's call
    order, whatever order its calls (run concurrently) finished in. Only that
    turn's results follow its assistant message, so the search is short."""
    offset, messages = s.newest_messages()
    if not s.pending_calls:
        # No model turn waits for results (a function agent's journaled call): nothing to
        # order, and the run of tool messages behind it may be long.
        messages.append(message)
        return
    start = s.turn_start()  # decodes the pages when the turn's results reach back into them ...
    offset, messages = s.newest_messages()  # ... and the list is the whole conversation then
    first = start - offset
    calls = messages[first - 1].get("tool_calls") or () if first > 0 else ()
    order = {c["id"]: i for i, c in enumerate(calls)}
    mine = order.get(call_id)
    at = len(messages)
    if mine is not None:
        while at > first and order.get(messages[at - 1].get("tool_call_id"), -1) > mine:
            at -= 1
    messages.insert(at, message)


def _tool_failed(s: AgentState, d: dict[str, Any]) -> None:
    # The attempt's outcome is known (it failed): a resume waits out the pause and
    # runs the next attempt, with no unknown-outcome question.
    entry = s.ledger_entry(d["key"])
    if entry is None:
        raise KeyError(d["key"])
    s.set_ledger_entry(d["key"], {**entry, "failed": d["attempt"], "retry_at": d["retry_at"], "last_error": d["error"]})


def _tool_heartbeat(s: AgentState, d: dict[str, Any]) -> None:
    entry = s.ledger_entry(d["key"])
    if entry is None:
        raise KeyError(d["key"])
    s.set_ledger_entry(d["key"], {**entry, "heartbeat": d["details"]})


def _plan_updated(s: AgentState, d: dict[str, Any]) -> None:
    s.plan = d["plan"]


def _artifact_stored(s: AgentState, d: dict[str, Any]) -> None:
    s.artifacts.append(d)


def _approval_requested(s: AgentState, d: dict[str, Any]) -> None:
    s.approvals[d["approval_id"]] = {**d, "decision": None}
    s.status, s.reason = WAITING_APPROVAL, f"approval {d['approval_id']}: {d['reason']}"


def _approval_decided(s: AgentState, d: dict[str, Any]) -> None:
    request = s.approvals[d["approval_id"]]
    s.approvals[d["approval_id"]] = {**request, "decision": d}
    if s.status == WAITING_APPROVAL and not s.open_approvals():
        s.status, s.reason = RUNNING, ""


def _budget_exceeded(s: AgentState, d: dict[str, Any]) -> None:
    s.status, s.reason = SUSPENDED, f"budget: {d['limit']} limit {d['allowed']} reached ({d['spent']})"


def _budget_extended(s: AgentState, d: dict[str, Any]) -> None:
    s.budget = d["budget"]
    if s.status == SUSPENDED:
        s.status, s.reason = RUNNING, ""


def _legacy_key(s: AgentState, call: dict[str, Any]) -> str:
    # Records written before keys were journaled derive them from the call id.
    return idempotency_key(s.namespace, s.agent_id, s.run_id, call["id"])


def _history_compacted(s: AgentState, d: dict[str, Any]) -> None:
    if "messages" in d:
        s.messages = d["messages"]
        return
    first, count = d["first"], d["count"]
    dropped = s.messages[first : first + count]
    kept = [{"role": "user", "content": d["summary"]}] if d.get("summary") else []
    s.messages[first : first + count] = kept
    s.__dict__.pop("_call_ids", None)  # rewritten in place: the ids it held are not all there any more
    # The calls that left the conversation leave the ledger and approvals too, so
    # the state (and every snapshot) stays bounded however long the run.
    gone = {c.get("key") or _legacy_key(s, c) for m in dropped for c in m.get("tool_calls") or ()}
    gone -= {c["key"] for c in s.pending_calls}
    for key in gone:
        s.ledger.pop(key, None)
    for approval_id in [a for a, req in s.approvals.items() if req.get("key") in gone]:
        del s.approvals[approval_id]


def _finished(s: AgentState, d: dict[str, Any]) -> None:
    s.status, s.result, s.reason = FINISHED, d["result"], ""


def _failed(s: AgentState, d: dict[str, Any]) -> None:
    s.status, s.reason = FAILED, d["reason"]


def _cancelled(s: AgentState, d: dict[str, Any]) -> None:
    s.status, s.reason = CANCELLED, d.get("reason", "")


def _forked(s: AgentState, d: dict[str, Any]) -> None:
    s.forked_from = {"namespace": d["namespace"], "agent_id": d["agent_id"], "run_id": d["run_id"], "seq": d["seq"]}
    renamed = d.get("keys") or {}
    if renamed:
        # Calls the source chose but had not started at the fork run anew here, under new keys.
        s.pending_calls = [dict(c, key=renamed[c["key"]]) if c["key"] in renamed else c for c in s.pending_calls]
        # An approval the copied history holds for such a call holds for it under its new key.
        for approval_id, request in list(s.approvals.items()):
            if request.get("key") in renamed:
                s.approvals[approval_id] = {**request, "key": renamed[request["key"]]}


def _child_started(s: AgentState, d: dict[str, Any]) -> None:
    s.children[d["key"]] = {
        "agent_id": d["agent_id"],
        "call_id": d["call_id"],
        "tool": d["tool"],
        "definition": d["definition"],
        "status": RUNNING,
    }
    if s.status == RUNNING:
        s.status, s.reason = WAITING_CHILD, f"waiting for child agent {d['agent_id']}"


def _child_ended(s: AgentState, d: dict[str, Any]) -> None:
    key = d["key"]
    child = s.children[key]
    if child["status"] != RUNNING:
        return  # its end is in already (writers refuse a second one: commands.rebase); never twice in the conversation
    s.children[key] = {**child, "status": d["status"]}
    _tool_result(s, d)
    if s.status == WAITING_CHILD and not any(c["status"] == RUNNING for c in s.children.values()):
        s.status, s.reason = RUNNING, ""


def _resumed(s: AgentState, d: dict[str, Any]) -> None:
    s.trace = d.get("trace")


def _retried(s: AgentState, d: dict[str, Any]) -> None:
    if s.status == FAILED:
        s.status, s.reason = RUNNING, ""


def _model_failed(s: AgentState, d: dict[str, Any]) -> None:
    # A refused reply the provider billed counts as spent (not as a step: it decided nothing).
    usage = d.get("usage")
    if usage is not None:
        s.usage = {
            **s.usage,
            "input_tokens": s.usage["input_tokens"] + usage["input_tokens"],
            "output_tokens": s.usage["output_tokens"] + usage["output_tokens"],
            "cost_usd": s.usage["cost_usd"] + usage["cost_usd"],
        }


def _timer_set(s: AgentState, d: dict[str, Any]) -> None:
    try:
        at = float(d["wake_at"])
    except OverflowError:  # an int too large for a float: a time that never comes
        at = math.inf
    s.wake_at = max(at, s.wake_at or 0.0)  # two timers of one turn: the later one
    s.status, s.reason = SLEEPING, f"sleeping until {utc_iso(s.wake_at)}"


def _timer_fired(s: AgentState, d: dict[str, Any]) -> None:
    if s.status == SLEEPING:
        s.status, s.reason = RUNNING, ""
    s.wake_at = None


def utc_iso(at: float) -> str:
    """``at`` (unix seconds) as an ISO 8601 UTC time to the second, e.g. ``2026-01-02T03:04:05Z``.

    Never raises: a time no ``datetime`` can show (a record written before wake times were
    bounded, or by another writer) is given as ``unix <at>``, so its journal stays readable.
    """
    try:
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"unix {at!r}"


def _definition_changed(s: AgentState, d: dict[str, Any]) -> None:
    s.definition = d["definition"]
    s.__dict__.pop("_call_ids", None)
    names = {f.name for f in fields(s)}
    for name, value in d.get("state", {}).items():
        if name in names:  # the writer checked the names; a reader never grows new attributes
            setattr(s, name, value)


_HANDLERS: dict[str, Callable[[AgentState, dict[str, Any]], None]] = {
    Kind.STARTED: _started,
    Kind.RESUMED: _resumed,
    Kind.MESSAGE_RECEIVED: _message_received,
    Kind.MODEL_RESPONDED: _model_responded,
    Kind.TOOL_INTENT: _tool_intent,
    Kind.TOOL_RESULT: _tool_result,
    Kind.PLAN_UPDATED: _plan_updated,
    Kind.ARTIFACT_STORED: _artifact_stored,
    Kind.APPROVAL_REQUESTED: _approval_requested,
    Kind.APPROVAL_DECIDED: _approval_decided,
    Kind.BUDGET_EXCEEDED: _budget_exceeded,
    Kind.BUDGET_EXTENDED: _budget_extended,
    Kind.HISTORY_COMPACTED: _history_compacted,
    Kind.FINISHED: _finished,
    Kind.FAILED: _failed,
    Kind.CANCELLED: _cancelled,
    Kind.DEFINITION_CHANGED: _definition_changed,
    Kind.FORKED: _forked,
    Kind.RETRIED: _retried,
    Kind.TOOL_FAILED: _tool_failed,
    Kind.TOOL_HEARTBEAT: _tool_heartbeat,
    # model_failed is audit only (the step it belongs to either answers or fails),
    # but for the usage a billed, refused reply spent.
    Kind.MODEL_FAILED: _model_failed,
    Kind.TIMER_SET: _timer_set,
    Kind.TIMER_FIRED: _timer_fired,
    Kind.CHILD_STARTED: _child_started,
    Kind.CHILD_ENDED: _child_ended,
}
