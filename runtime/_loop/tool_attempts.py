"""The journal side of a tool call's attempts: intents, failures, heartbeats.

``durably._tools.attempts`` decides what an attempt is and whether another
follows; this module writes down what happened, in the agent's journal, as
``ToolCalls`` runs a call: each later attempt's ``tool_intent`` (durable before
its side effect), each failure that a retry follows (``tool_failed``, durable
before the pause), and the tool's heartbeats (``tool_heartbeat``). A run that
resumes a call whose last attempt failed (the process died during the pause)
waits out the rest of the pause and runs the next attempt: its outcome was
known, so no unknown-outcome question is asked.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from durably import _telemetry as tm
from durably._loop.state import RUNNING
from durably._tools.attempts import Heartbeats, ToolRetry, run_attempts
from durably._tools.tool import Tool, ToolContext
from durably.errors import AgentLeaseLostError, ToolTimeoutError, UnencodableValueError
from durably.schemas._records import Kind

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

    from durably._journal.writer import AgentJournal
    from durably._loop.agent import AgentDefinition
    from durably._loop.state import AgentState
    from durably._telemetry import Telemetry


class ToolCalls(Protocol):
    """What this module needs of the agent running the call (``AgentActor``)."""

    definition: AgentDefinition
    journal: AgentJournal
    telemetry: Telemetry

    @property
    def state(self) -> AgentState: ...

    @property
    def _inbox(self) -> MemoryObjectReceiveStream[Any]: ...  # the actor's mailbox: commands wait there between steps


_ONCE = ToolRetry(attempts=1)
_COMMAND_POLL_S = 0.05  # how soon a pause notices a command (a cancel) waiting in the mailbox


class CallStopped(Exception):
    """No further attempt now, and no result: the agent stopped running (cancelled
    meanwhile), or a command arrived during a pause (the step loop applies it, then
    resumes the call's pause from the journal)."""


class JournalFailed(Exception):
    """Journaling an attempt (intent, failure, heartbeat), or the lease check just
    before it runs, raised ``error``: the agent stops with it, as on any failed
    append; never the tool's error, never retried."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


async def _append(host: ToolCalls, lock: anyio.Lock | None, kind: str, data: dict[str, Any]) -> None:
    try:
        async with _holding(lock):
            await host.journal.append((kind, data))
    except UnencodableValueError:
        raise  # only heartbeat details can be unencodable: the tool's to fix, told to it
    except Exception as exc:
        raise JournalFailed(exc) from exc


async def pause(host: ToolCalls, seconds: float) -> None:
    """Sleep ``seconds``, unless a command (a cancel, a message, a decision) arrives first.

    The mailbox is drained between steps only; a pause may be long, so it ends
    the step instead of holding the command back: the failed attempt is in the
    journal already, and the loop resumes the pause from there.

    Raises:
        CallStopped: A command is waiting.
    """
    deadline = anyio.current_time() + seconds
    while (left := deadline - anyio.current_time()) > 0:
        if host._inbox.statistics().current_buffer_used:
            raise CallStopped("a command arrived during the pause")
        await anyio.sleep(min(left, _COMMAND_POLL_S))


def policy_of(host: ToolCalls, tool: Tool) -> ToolRetry:
    """The tool's ``ToolRetry``, else the definition's ``tool_retry``, else one attempt."""
    return tool.retry or host.definition.tool_retry or _ONCE


@asynccontextmanager
async def _holding(lock: anyio.Lock | None) -> AsyncIterator[None]:
    async with lock if lock is not None else nullcontext():
        yield


async def run_call(
    host: ToolCalls,
    tool: Tool,
    call: dict[str, Any],
    arguments: dict[str, Any],
    attempt: int,
    validated: dict[str, Any] | None,
    lock: anyio.Lock | None,
) -> Any:
    """Run ``call`` from attempt ``attempt`` (its intent journaled already) until an attempt
    returns or the tool's retry policy stops; ``lock`` serializes appends with calls
    running beside it (None: this call runs alone).

    Returns:
        What the successful attempt returned.

    Raises:
        CallStopped: The agent was cancelled between two attempts.
        JournalFailed: An append failed (its ``error``: fenced, lease lost, store down).
        Exception: The last attempt's error; or a store error from journaling
            (never retried).
    """
    key = call["key"]
    coordinates = {"key": key, "call_id": call["id"], "tool": tool.name}
    entry = host.state.ledger_entry(key) or {}
    current = attempt

    async def write_heartbeat(details: Any) -> None:
        await _append(host, lock, Kind.TOOL_HEARTBEAT, {**coordinates, "attempt": current, "details": details})

    heartbeats = Heartbeats(tool.heartbeat_every, write_heartbeat, entry.get("heartbeat"))

    def guard() -> None:
        try:
            host.journal.check_lease()  # a worker past its lease runs no side effect
        except AgentLeaseLostError as exc:
            raise JournalFailed(exc) from exc  # the agent stops: never recorded as the tool's error

    async def invoke(number: int) -> Any:
        nonlocal current
        current = number
        ctx = ToolContext(
            idempotency_key=key,
            agent_id=host.state.agent_id,
            call_id=call["id"],
            attempt=number,
            last_heartbeat=heartbeats.last,
            beat=heartbeats.beat,
        )
        # The model step's validation holds for the first attempt only; later ones validate again.
        return await tool.invoke(arguments, ctx, validated=validated if number == attempt else None)

    async def begin(number: int) -> None:
        await _append(host, lock, Kind.TOOL_INTENT, {**coordinates, "attempt": number})
        if host.state.status != RUNNING:
            raise CallStopped(f"agent {host.state.status} before attempt {number}")

    async def on_failure(number: int, error: BaseException, delay: float) -> None:
        if (meters := host.telemetry.metrics) is not None:
            meters.retries.add(1, {**host.telemetry.attributes, tm.RETRY_KIND: "tool"})
        failed = {
            **coordinates,
            "attempt": number,
            "error_type": type(error).__name__,
            "error": f"{type(error).__name__}: {error}",
            "timed_out": isinstance(error, ToolTimeoutError),
            "retry_in": delay,
            "retry_at": time.time() + delay,
        }
        await _append(host, lock, Kind.TOOL_FAILED, failed)
        if host.state.status != RUNNING:
            raise CallStopped(f"agent {host.state.status} after attempt {number} failed")

    return await run_attempts(
        tool.name,
        policy_of(host, tool),
        attempt,
        invoke,
        begin=begin,
        on_failure=on_failure,
        heartbeats=heartbeats,
        timeout=tool.timeout,
        heartbeat_timeout=tool.heartbeat_timeout,
        sleep=lambda seconds: pause(host, seconds),
        guard=guard,
    )


def in_backoff(entry: dict[str, Any]) -> bool:
    """True when the call's last attempt is known to have failed and a retry was due."""
    return bool(entry.get("failed") == entry["attempts"])


async def wait_out_backoff(host: ToolCalls, tool: Tool, entry: dict[str, Any]) -> bool:
    """Sleep what is left of the pause after the call's failed attempt.

    Returns:
        True if the next attempt is within the tool's retry policy (as it stands
            now); False when the policy has no attempt left (it was changed).

    Raises:
        CallStopped: A command arrived during the pause (see ``pause``).
    """
    policy = policy_of(host, tool)
    if entry["attempts"] >= policy.attempts:
        return False
    # The wall clock of another host may differ: never wait longer than the policy's longest pause.
    left = min(entry["retry_at"] - time.time(), policy.max_delay + policy.jitter)
    if left > 0:
        await pause(host, left)
    return True
