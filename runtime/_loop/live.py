"""What happens to an agent, live: the events its actor publishes to subscribers in this process.

The actor hands the events of every record it folds (``events_of``), once the
record is durable, and every piece of text its model streams (a delta) to
``LiveEvents``, which fans them out to the subscriptions of that agent. Publishing never waits: each
subscription has a bounded buffer. A delta that does not fit is dropped (it
was never journaled, so it is gone); a journaled event that does not fit marks
the subscription ``behind``, and its reader catches up from the journal, where
every journaled event is kept (``durably._reading.stream``).
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import anyio

from durably._loop.state import AgentState
from durably.schemas._records import Kind, Record

#: Records that change what an operator cares about, as the event they make (also ``watch``'s).
STATUS_EVENTS: dict[str, str] = {
    Kind.STARTED: "started",
    Kind.RESUMED: "resumed",
    Kind.APPROVAL_REQUESTED: "approval_requested",
    Kind.APPROVAL_DECIDED: "approval_decided",
    Kind.BUDGET_EXCEEDED: "suspended",
    Kind.BUDGET_EXTENDED: "budget_extended",
    Kind.FINISHED: "finished",
    Kind.FAILED: "failed",
    Kind.CANCELLED: "cancelled",
    Kind.FORKED: "forked",
    Kind.TIMER_SET: "sleeping",
    Kind.TIMER_FIRED: "timer_fired",
    Kind.CHILD_STARTED: "child_started",
    Kind.CHILD_ENDED: "child_ended",
}

DELTA = "delta"
MODEL_RESPONDED = "model_responded"
TOOL_STARTED = "tool_started"
TOOL_RESULT = "tool_result"
STATUS = "status"


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One thing that happened to an agent, as ``Runtime.stream`` yields it.

    Attributes:
        agent_id: The agent.
        kind: ``delta`` (a piece of the model's text as it streams; never
            journaled), ``model_responded`` (the whole reply, journaled),
            ``tool_started`` (a tool call's intent, journaled before it runs),
            ``tool_result`` (its outcome) or ``status`` (a status change, as
            ``StatusChange``).
        seq: The seq of the record that made a journaled event; None for a delta.
        at: Unix seconds of that record, or when the delta arrived.
        text: A delta's piece; a reply's text; a status change's reason.
        tool: ``tool_started`` / ``tool_result``: the tool's name.
        call_id: ``tool_started`` / ``tool_result``: the call's id.
        result: ``tool_result``: the result, as journaled (redacted values stay redacted).
        error: ``tool_result``: why the call failed, or None.
        calls: ``model_responded``: how many tool calls the reply asked for.
        event: ``status``: ``started``, ``resumed``, ``approval_requested``,
            ``approval_decided``, ``suspended``, ``budget_extended``,
            ``finished``, ``failed``, ``cancelled`` or ``forked``.
        status: For a journaled event, the agent's status after it ("" for a delta).
    """

    agent_id: str
    kind: str
    seq: int | None
    at: float
    text: str = ""
    tool: str = ""
    call_id: str = ""
    result: Any = None
    error: str | None = None
    calls: int = 0
    event: str = ""
    status: str = ""


def events_of(agent_id: str, record: Record, state: AgentState) -> list[AgentEvent]:
    """The events ``record`` makes, ``state`` being the agent's state right after it was folded."""
    data, seq, at, status = record.data, record.seq, record.at, state.status
    if record.kind == Kind.MODEL_RESPONDED:
        calls = len(data.get("tool_calls") or ())
        return [AgentEvent(agent_id, MODEL_RESPONDED, seq, at, text=data.get("text") or "", calls=calls, status=status)]
    if record.kind == Kind.TOOL_INTENT:
        return [AgentEvent(agent_id, TOOL_STARTED, seq, at, tool=data["tool"], call_id=data["call_id"], status=status)]
    if record.kind == Kind.TOOL_RESULT:
        result = AgentEvent(
            agent_id,
            TOOL_RESULT,
            seq,
            at,
            tool=data["tool"],
            call_id=data["call_id"],
            result=data.get("result"),
            error=data.get("error"),
            status=status,
        )
        return [result]
    event = STATUS_EVENTS.get(record.kind)
    if event is None:
        return []
    return [AgentEvent(agent_id, STATUS, seq, at, text=state.reason, event=event, status=status)]


class Subscription:
    """One subscriber's buffer of an agent's live events (see the module docstring).

    ``dropped``: deltas dropped because the buffer was full; ``behind``: a
    journaled event did not fit, so the reader must catch up from the journal.
    """

    def __init__(self, agent_id: str, buffer: int) -> None:
        self.agent_id = agent_id
        self.buffer = buffer
        self.items: deque[AgentEvent] = deque()
        self.dropped = 0
        self.behind = False
        self._deltas = 0  # deltas in ``items``
        self._wake = anyio.Event()

    def put(self, event: AgentEvent) -> None:
        """Queue ``event`` without waiting: a delta past the buffer is dropped, a
        journaled event past it marks the subscription behind."""
        if event.seq is None:
            # Once behind, deltas are dropped too: the queue stays a prefix of what happened.
            if self.behind or self._deltas >= self.buffer:
                self.dropped += 1
                return
            self._deltas += 1
        elif self.behind or len(self.items) - self._deltas >= self.buffer:
            self.behind = True  # its reader re-reads these from the journal
            self._wake.set()
            return
        self.items.append(event)
        self._wake.set()

    def take(self) -> AgentEvent | None:
        """The oldest queued event, or None."""
        if not self.items:
            return None
        event = self.items.popleft()
        if event.seq is None:
            self._deltas -= 1
        return event

    async def ready(self, timeout: float) -> None:
        """Return once something is queued (or the subscription is behind), or after ``timeout`` seconds."""
        if self.items or self.behind:
            return
        self._wake = anyio.Event()
        with anyio.move_on_after(timeout if math.isfinite(timeout) else math.inf):
            await self._wake.wait()


class LiveEvents:
    """The subscriptions of this process's agents, by agent id.

    Held weakly: a subscription its reader dropped without closing goes with it.
    """

    def __init__(self) -> None:
        self._subscriptions: dict[str, weakref.WeakSet[Subscription]] = {}

    def subscribe(self, agent_id: str, buffer: int) -> Subscription:
        """A new subscription to ``agent_id``'s events, with room for ``buffer`` deltas and ``buffer`` journaled events."""
        subscription = Subscription(agent_id, buffer)
        self._subscriptions.setdefault(agent_id, weakref.WeakSet()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop publishing to ``subscription`` (a no-op when it is not subscribed)."""
        subscriptions = self._subscriptions.get(subscription.agent_id)
        if subscriptions is not None:
            subscriptions.discard(subscription)
            if not subscriptions:
                del self._subscriptions[subscription.agent_id]

    def listened(self, agent_id: str) -> bool:
        """True when someone in this process follows ``agent_id``."""
        return bool(self._subscriptions.get(agent_id))

    def publish(self, event: AgentEvent) -> None:
        """Hand ``event`` to every subscription of its agent, never waiting."""
        for subscription in list(self._subscriptions.get(event.agent_id, ())):
            subscription.put(event)
