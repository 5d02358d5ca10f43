"""Tool calls of the step loop: run them (concurrently), resolve unknown outcomes, journal results.

``ToolCalls`` is the half of ``AgentActor`` that acts on the calls of a model
turn. The calls that may start together (no approval needed, not
``sequential``, not started yet) run in one anyio task group after their
intents are journaled in one append; each result is appended as it
completes, through the runtime's group commit, and the fold puts it in the
model's call order. The result of a call that ran alone is staged instead
(``AgentJournal.stage``): committed during the next model call, or with its
answer. A call found started without a result (the process died
while it ran) follows its tool's ``on_unknown_outcome`` policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from durably import _telemetry as tm
from durably._loop.child_calls import ChildCalls
from durably._loop.state import RUNNING, AgentState
from durably._loop.timers import Sleep, timer_entry
from durably._loop.tool_attempts import CallStopped, JournalFailed, in_backoff, run_call, wait_out_backoff
from durably._tools.agent_tool import AgentTool
from durably._tools.tool import OnUnknownOutcome, Reconciled, Reconciler, Tool, ToolContext
from durably.errors import AgentFencedError, AgentLeaseLostError, RedactedArgumentError, ToolArgumentsError
from durably.schemas._records import Kind
from durably.storage._errors import StoreUnavailableError, UnencodableValueError

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

    from durably._journal.writer import AgentJournal
    from durably._loop.agent import AgentDefinition
    from durably._loop.commands import Command
    from durably._telemetry import Telemetry


class ToolCalls(ChildCalls):
    """Mixin of ``AgentActor``: needs ``definition``, ``journal``, ``state``,
    ``telemetry``, ``failure``, ``_append_lock`` (an ``anyio.Lock``), ``_validated`` (call
    key -> arguments the model step validated) and ``_inbox`` (the mailbox, which a
    retry's pause watches)."""

    if TYPE_CHECKING:  # the host's (AgentActor), declared for the type checker
        definition: AgentDefinition
        journal: AgentJournal
        telemetry: Telemetry
        failure: str | None
        _append_lock: anyio.Lock
        _validated: dict[str, dict[str, Any]]
        _inbox: MemoryObjectReceiveStream[Command]

        @property
        def state(self) -> AgentState: ...

    def _ready(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The calls that may start now, together: not started, no approval needed,
        not ``sequential`` (those run one at a time, through ``_resolve``)."""
        ready = []
        for call in calls:
            tool = self.definition.tool(call["name"])
            if (
                tool is None
                or tool.requires_approval
                or tool.sequential
                or self.state.ledger_entry(call["key"]) is not None
            ):
                continue
            ready.append(call)
        return ready

    async def _resolve_pending(self) -> None:
        if ready := self._ready(self.state.pending_calls):
            await self._execute([(call, 1) for call in ready])
        else:
            await self._resolve(self.state.pending_calls[0])

    def _approval_id(self, call: dict[str, Any], suffix: str = "") -> str:
        """The call id (what an operator sees), made unique among this agent's approvals."""
        approval_id = call["id"] + suffix
        taken = self.state.approvals.get(approval_id)
        return approval_id if taken is None or taken.get("key") == call["key"] else f"{approval_id}@{call['key'][:8]}"

    async def _resolve(self, call: dict[str, Any]) -> None:
        tool = self.definition.tool(call["name"])
        if tool is None:
            await self._result(call, error=f"unknown tool {call['name']!r}")
            return
        if isinstance(tool, AgentTool):
            await self._child_call(call)  # a child agent, not a function: see child_calls
            return
        entry = self.state.ledger_entry(call["key"])
        if entry is None:
            if tool.requires_approval:
                decision = await self._decision(call, self._approval_id(call), "tool requires approval")
                if decision is None:
                    return
                if not decision["approved"]:
                    await self._result(call, error=f"denied by {decision.get('by') or 'approver'}{_note(decision)}")
                    return
                if "result" in decision:  # an operator did it by hand and reported the result
                    await self._result(call, result=decision["result"])
                    return
            await self._execute([(call, 1)])
            return
        if in_backoff(entry):  # the process died (or the step ended) while waiting to retry a failed attempt
            try:
                again = await wait_out_backoff(self, tool, entry)
            except CallStopped:
                return  # a command came first: the loop applies it, then comes back here
            if again:
                await self._execute([(call, entry["attempts"] + 1)])
            else:
                await self._result(call, error=entry["last_error"])
            return
        # An intent without a result: the process died while the tool ran.
        retry = tool.retry or self.definition.tool_retry
        limit = None if retry is None else retry.attempts
        attempt = await self._unknown_outcome(call, tool.on_unknown_outcome, tool.reconcile, tool.to_journal, limit)
        if attempt is not None:
            await self._execute([(call, attempt)])

    async def _unknown_outcome(
        self,
        call: dict[str, Any],
        policy: OnUnknownOutcome,
        reconcile: Reconciler | None,
        to_journal: Callable[[Any], Any],
        limit: int | None = None,
    ) -> int | None:
        """Apply ``policy`` to ``call``, found with an intent and no result (the
        process died while it ran). Shared by model-driven tool calls and the
        journaled calls of a function agent's run.

        ``limit`` is the most attempts the call may make (its ``ToolRetry``'s
        ``attempts``; None: no limit). An attempt cut short by a crash counts, so
        once the journaled attempts reach it, ``retry`` and ``reconcile`` (when the
        hook finds nothing) run the call no more: its result is an error the model
        reads. An operator's decision (``ask``) is not limited.

        Returns:
            The attempt to run the call as now (its intent is not appended yet),
                or None when nothing is to run in this activation: a result was
                journaled (reconciled, reported by an operator, or skipped), an
                approval was requested (the agent parks), or the agent failed
                (policy ``fail``).
        """
        started = self.state.ledger_entry(call["key"])
        if started is None:  # only a call whose intent is in the ledger has an unknown outcome
            raise KeyError(call["key"])
        attempt: int = started["attempts"] + 1
        approval_id = self._approval_id(call, f"#attempt{attempt}")
        if policy is OnUnknownOutcome.ASK or approval_id in self.state.approvals:
            # (a "fail" call becomes a question once an operator retried the agent)
            return await self._ask_outcome(call, approval_id, attempt)
        if policy is OnUnknownOutcome.RETRY:
            if limit is not None and attempt > limit:
                await self._spent(call, limit)
                return None
            if (meters := self.telemetry.metrics) is not None:
                meters.retries.add(1, {**self.telemetry.attributes, tm.RETRY_KIND: "tool"})
            return attempt
        if policy is OnUnknownOutcome.RECONCILE:
            assert reconcile is not None  # Tool and Run.call refuse the policy without a hook
            again = await self._reconcile(reconcile, to_journal, call, attempt)
            if again is not None and limit is not None and again > limit:
                await self._spent(call, limit)
                return None
            return again
        reason = f"tool {call['name']} call {call['id']}: outcome unknown after a crash (policy fail)"
        self.failure = "durably.outcome_unknown"
        await self.journal.append((Kind.FAILED, {"reason": reason}))
        return None

    async def _spent(self, call: dict[str, Any], limit: int) -> None:
        """Journal the error result of a call whose last allowed attempt a crash cut short."""
        await self._result(call, error=f"attempt {limit} of {limit} was cut short by a crash; not run again")

    async def _ask_outcome(self, call: dict[str, Any], approval_id: str, attempt: int) -> int | None:
        """A human decides what became of a call whose outcome is unknown: run it
        again (approve: the attempt to run is returned), skip it (deny: the model is
        told it did not happen), or report that it happened with its result
        (approve with ``result``). None: nothing to run now."""
        reason = (
            f"outcome of attempt {attempt - 1} unknown after a crash; approve to run it again, "
            "deny to skip it, or report that it happened with its result"
        )
        decision = await self._decision(call, approval_id, reason)
        if decision is None:
            return None
        if not decision["approved"]:
            who = decision.get("by") or "an operator"
            await self._result(
                call, error=f"not run: {who} chose to skip this call, so it did not happen{_note(decision)}"
            )
            return None
        if "result" in decision:
            await self._result(call, result=decision["result"])
            return None
        return attempt

    async def _decision(self, call: dict[str, Any], approval_id: str, reason: str) -> dict[str, Any] | None:
        """The decision on ``approval_id``; None while there is none (this step
        requested it, which parks the agent, or it is still open)."""
        request = self.state.approvals.get(approval_id)
        if request is None:
            data = {
                "approval_id": approval_id,
                "call_id": call["id"],
                "tool": call["name"],
                "arguments": call["arguments"],
                "key": call["key"],
                "reason": reason,
            }
            await self.journal.append((Kind.APPROVAL_REQUESTED, data))
            return None
        decision: dict[str, Any] | None = request["decision"]
        return decision

    def _context(self, call: dict[str, Any], attempt: int) -> ToolContext:
        return ToolContext(
            idempotency_key=call["key"], agent_id=self.state.agent_id, call_id=call["id"], attempt=attempt
        )

    async def _execute(
        self, calls: list[tuple[dict[str, Any], int]], preceding: Sequence[tuple[str, dict[str, Any]]] = ()
    ) -> None:
        """Run ``(call, attempt)`` pairs concurrently, after one append holding
        ``preceding`` entries and every call's intent (durable before any side
        effect). Each result is appended as it completes; the conversation keeps
        the model's call order (the fold places results by call)."""
        entries = list(preceding)
        runs: list[tuple[Tool, dict[str, Any], dict[str, Any], int]] = []
        for call, attempt in calls:
            tool = self.definition.tool(call["name"])
            assert tool is not None  # callers pass calls of known tools only (_ready, _resolve)
            try:
                # Redacted arguments come back from this activation's memory, or not at all.
                arguments = self.journal.redactor.arguments_for(call)
            except RedactedArgumentError as exc:
                entries.append(self._result_entry(call, error=str(exc)))
                continue
            entries.append(
                (Kind.TOOL_INTENT, {"key": call["key"], "call_id": call["id"], "tool": tool.name, "attempt": attempt})
            )
            runs.append((tool, call, arguments, attempt))
        await self.journal.append(*entries)
        if self.state.status != RUNNING or not runs:
            return  # e.g. a cancel from another process was folded in while appending: do not act
        if len(runs) == 1:
            await self._run(*runs[0])
            return
        limiter = anyio.CapacityLimiter(self.definition.max_parallel_tools)

        async def run_one(tool: Tool, call: dict[str, Any], arguments: dict[str, Any], attempt: int) -> None:
            async with limiter:
                await self._run(tool, call, arguments, attempt, lock=self._append_lock)

        try:
            async with anyio.create_task_group() as tg:
                for run in runs:
                    tg.start_soon(run_one, *run)
        except BaseExceptionGroup as group:
            # One call's store error (fenced, outage) stops the agent as it would alone.
            raise _first(group) from None

    async def _run(
        self, tool: Tool, call: dict[str, Any], arguments: dict[str, Any], attempt: int, lock: anyio.Lock | None = None
    ) -> None:
        with self.telemetry.tool_span(
            tool.name, call["id"], attempt, self.state.agent_id, self.definition.name
        ) as span:
            self.journal.check_lease()  # a worker past its lease runs no side effect
            timer: float | None = None
            try:
                validated = self._validated.pop(call["key"], None)
                result = await run_call(self, tool, call, arguments, attempt, validated, lock)
                if isinstance(result, Sleep):  # the result, and a timer parking the agent (timers.py)
                    timer, result = result.wake_at, result.result
                outcome = {"result": tool.to_journal(result)}
            except CallStopped:
                return
            except JournalFailed as failed:
                raise failed.error from None  # the agent stops, as on any failed append
            except Exception as exc:
                tm.record_exception(span, exc)
                outcome = {"error": str(exc) if isinstance(exc, ToolArgumentsError) else f"{type(exc).__name__}: {exc}"}
        if lock is None:
            # A lone call's result is staged: committed while the model reads it, or
            # with the model's answer (one commit per step); never acted on before.
            # A timer parks the agent now: the result is appended with it.
            await self._result(call, staged=timer is None, timer=timer, **outcome)
        else:
            async with lock:
                await self._result(call, timer=timer, **outcome)

    async def _reconcile(
        self, reconcile: Reconciler, to_journal: Callable[[Any], Any], call: dict[str, Any], attempt: int
    ) -> int | None:
        """Ask ``reconcile`` whether the call happened: journal its result if so
        (None returned), else return the attempt to run it as."""
        self.journal.check_lease()  # only the lease holder may decide an unknown outcome
        found = await reconcile(self._context(call, attempt))
        if isinstance(found, Reconciled):
            await self._result(call, result=to_journal(found.result), reconciled=True)
            return None
        return attempt

    @staticmethod
    def _result_entry(
        call: dict[str, Any],
        *,
        result: Any = None,
        error: str | None = None,
        reconciled: bool = False,
        usage: dict[str, Any] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        data = {"key": call["key"], "call_id": call["id"], "tool": call["name"], "result": result, "error": error}
        if reconciled:
            data["reconciled"] = True
        if usage is not None:  # a model request's cost (a function agent's journaled model call)
            data["usage"] = usage
        return Kind.TOOL_RESULT, data

    async def _result(
        self,
        call: dict[str, Any],
        *,
        result: Any = None,
        error: str | None = None,
        reconciled: bool = False,
        staged: bool = False,
        usage: dict[str, Any] | None = None,
        timer: float | None = None,
    ) -> None:
        entry = self._result_entry(call, result=result, error=error, reconciled=reconciled, usage=usage)
        try:
            if staged:
                self.journal.stage(entry)
            elif timer is not None and error is None:
                await self.journal.append(entry, timer_entry(timer, call["id"]))
            else:
                await self.journal.append(entry)
        except UnencodableValueError as exc:
            # The side effect happened but its result cannot be stored exactly. Never a
            # silent substitute: the agent fails naming the tool, the call and the field,
            # and the ledger marks the call done, so a retry after the fix never repeats it
            # (the model is then told the result was lost).
            lost = f"the call ran, but its result could not be stored ({exc.path}: {exc.reason}); it will not run again"
            reason = f"tool {call['name']} call {call['id']}: result cannot be stored: {exc.path}: {exc.reason}"
            kind, data = entry
            self.failure = tm.error_type(exc)
            await self.journal.append(
                (kind, {**data, "result": None, "error": lost}), (Kind.FAILED, {"reason": reason})
            )


def _note(decision: dict[str, Any]) -> str:
    return f": {decision['note']}" if decision.get("note") else ""


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to stop on from a task group's: a store error first, else the first one."""
    flat: list[BaseException] = []
    stack = [group]
    while stack:
        for exc in stack.pop().exceptions:
            if isinstance(exc, BaseExceptionGroup):
                stack.append(exc)
            else:
                flat.append(exc)
    for exc in flat:
        if isinstance(exc, (AgentFencedError, AgentLeaseLostError, StoreUnavailableError)):
            return exc
    return flat[0]
