"""The agent actor: a mailbox and the step loop of DESIGN.md.

One actor per live agent, the only writer of its stream in this process.
Between steps it drains its mailbox (messages, decisions, budget, cancel);
then it either resolves the next pending tool call or asks the model for the
next response. It returns when the agent finishes, fails, is cancelled or
parks (waits for a human): a parked agent holds no memory in the runtime.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from opentelemetry.trace import Status, StatusCode

from durably.schemas.records import Kind
from durably.storage.errors import StoreUnavailableError, UnencodableValueError

from . import telemetry as tm
from .agent import AgentDefinition
from .commands import Command, to_record
from .errors import AgentFencedError, InvalidCommandError
from .journal import AgentJournal
from .model import ModelResponse, check_reply
from .model_retry import is_transient
from .redaction import RedactedArgumentError
from .state import RUNNING, AgentState
from .tools import OnUnknownOutcome, Reconciled, Tool, ToolArgumentsError, ToolContext, idempotency_key

log = logging.getLogger("durably.actor")


class AgentActor:
    """Runs one agent until it stops or parks.

    In: ``definition``, ``journal`` (holding the restored state), ``tracer``,
    ``mailbox_size`` (bounded: senders wait when it is full). After ``run``:
    ``state`` is final for this activation, ``error`` holds what stopped it
    abnormally (``AgentFencedError``, ``StoreUnavailableError``) or None.
    """

    def __init__(self, definition: AgentDefinition, journal: AgentJournal, tracer, *, mailbox_size: int = 64) -> None:
        self.definition = definition
        self.journal = journal
        self.tracer = tracer
        self.mailbox: MemoryObjectSendStream[Command]
        self._inbox: MemoryObjectReceiveStream[Command]
        self.mailbox, self._inbox = anyio.create_memory_object_stream[Command](mailbox_size)
        self.done = anyio.Event()
        self.cancel_scope = anyio.CancelScope()  # the runtime cancels it on shutdown
        self.error: BaseException | None = None
        self.stopping = False  # drain: leave the loop after the step in flight
        self._tool_specs = [t.spec() for t in definition.tools]
        # Held by each call of a concurrent group while it appends its result: one
        # stream, one writer, so appends of one agent never race each other's seq.
        self._append_lock = anyio.Lock()

    @property
    def state(self) -> AgentState:
        return self.journal.state

    async def run(self) -> None:
        """The step loop. Never raises for agent-level failures: they are journaled."""
        span_name = f"invoke_agent {self.definition.name}"
        try:
            with self.tracer.start_as_current_span(span_name) as span:
                span.set_attribute(tm.AGENT_ID, self.state.agent_id)
                span.set_attribute(tm.AGENT_NAME, self.definition.name)
                await self._loop()
                span.set_attribute(tm.STATUS, self.state.status)
        except (AgentFencedError, StoreUnavailableError) as exc:
            # Nothing more can be written safely; the journal holds the truth.
            log.warning("agent %s stopped: %s", self.state.agent_id, exc)
            self.error = exc
        except Exception as exc:
            # A bug (ours or a hook's) must stop this agent only, never the runtime and
            # its other agents; say why in the journal if the journal still takes it.
            log.exception("agent %s stopped by an unexpected error", self.state.agent_id)
            self.error = exc
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.journal.append((Kind.FAILED, {"reason": f"internal error: {type(exc).__name__}"}))
        finally:
            self._close_mailbox()
            self.done.set()

    def stop_after_step(self) -> None:
        """Leave the step loop once the step in flight is journaled (a drain); the agent stays runnable."""
        self.stopping = True

    async def _loop(self) -> None:
        while self.state.status == RUNNING and not self.stopping:
            # A step whose model, tools and store never block must still let the
            # runtime's other actors and the snapshot writer run.
            await anyio.lowlevel.checkpoint()
            await self._drain_mailbox()
            if self.state.status != RUNNING or self.stopping:
                break
            if self.state.pending_calls:
                await self._resolve_pending()
            elif (limit := self._budget_limit()) is not None:
                await self.journal.append((Kind.BUDGET_EXCEEDED, limit))
            elif not await self._compact_history():
                await self._model_step()

    async def _compact_history(self) -> bool:
        """Shorten the conversation if the ``HistoryPolicy`` says so; True if it did.

        A summariser that fails (a provider outage) skips compaction for this
        step: the conversation runs long for a while rather than the agent dying.
        """
        policy = self.definition.history
        cut = policy.cut(self.state.messages) if policy is not None else None
        if cut is None:
            return False
        first, count = cut
        data: dict[str, Any] = {"first": first, "count": count}
        if policy.summarize is not None:
            try:
                data["summary"] = await policy.summarize(self.state.messages[first:first + count])
            except Exception as exc:
                log.warning("agent %s: summariser failed (%s), history kept for now", self.state.agent_id,
                            type(exc).__name__)
                return False
        await self.journal.append((Kind.HISTORY_COMPACTED, data))
        return True

    async def _drain_mailbox(self) -> None:
        while True:
            try:
                command = self._inbox.receive_nowait()
            except anyio.WouldBlock:
                return
            try:
                entry = to_record(self.state, command)
            except InvalidCommandError as exc:
                command.finish(exc)
                continue
            try:
                await self.journal.append(entry)
            except InvalidCommandError as exc:  # lost a race to another process's command
                command.finish(exc)
                continue
            except BaseException as exc:
                command.finish(exc)
                raise
            command.finish()

    def _close_mailbox(self) -> None:
        # Commands still queued go back to the runtime, which applies them directly.
        self.mailbox.close()
        while True:
            try:
                self._inbox.receive_nowait().finish(_Requeue())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        self._inbox.close()

    def _budget_limit(self) -> dict[str, Any] | None:
        budget, usage = self.state.budget, self.state.usage
        spent = {
            "steps": usage["steps"],
            "tokens": usage["input_tokens"] + usage["output_tokens"],
            "cost_usd": usage["cost_usd"],
        }
        for name, allowed in budget.items():
            if allowed is not None and spent[name] >= allowed:
                return {"limit": name, "allowed": allowed, "spent": spent[name]}
        return None

    async def _model_step(self) -> None:
        response = await self._ask_model()
        if response is None:
            return  # failed for good: journaled
        calls = self._journal_calls(response.tool_calls)
        usage = response.usage
        data = {
            "text": response.text,
            "tool_calls": calls,
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd},
            "plan": response.plan,
            "model": response.model or self.definition.model.name,
        }
        if response.stop_reason:
            data["stop_reason"] = response.stop_reason
        entries = [(Kind.MODEL_RESPONDED, data)]
        valid = []
        for call in calls:
            # Checked before anything is journaled: an invalid call runs nothing, and
            # the model reads what was wrong in the call's result, as the next step.
            problem = self._call_problem(call)
            if problem is None:
                valid.append(call)
            else:
                entries.append(self._result_entry(call, error=problem))
        if not calls:
            entries.append((Kind.FINISHED, {"result": response.text}))
        try:
            if ready := self._ready(valid):
                # The response and the intents of the calls it starts in one atomic append:
                # one commit less per step, and a crash leaves all or nothing.
                await self._execute([(call, 1) for call in ready], preceding=entries)
            else:
                await self.journal.append(*entries)
        except UnencodableValueError as exc:
            await self.journal.append((Kind.FAILED, {"reason": f"model response cannot be stored: {exc}"}))

    async def _ask_model(self) -> ModelResponse | None:
        """The model's next reply, validated, after the definition's retries; None
        when the agent failed instead (each failed attempt and the failure journaled)."""
        model = self.definition.model
        # The live model sees what redaction kept out of the journal; the state does not.
        view = self.journal.redactor.model_view(self.state.messages)

        async def attempt() -> ModelResponse:
            # The span records the error's type only (its message may quote content).
            with self.tracer.start_as_current_span(f"chat {model.name}", record_exception=False,
                                                   set_status_on_exception=False) as span:
                span.set_attribute(tm.OPERATION, "chat")
                span.set_attribute(tm.MODEL, model.name)
                span.set_attribute(tm.AGENT_ID, self.state.agent_id)
                try:
                    response = await model.respond(view, self._tool_specs)
                    check_reply(response)  # a reply that does not fold never reaches the journal
                except Exception as exc:
                    _record_error(span, exc)
                    raise
                span.set_attribute(tm.INPUT_TOKENS, response.usage.input_tokens)
                span.set_attribute(tm.OUTPUT_TOKENS, response.usage.output_tokens)
                return response

        async def failed(number: int, exc: BaseException, wait_s: float | None) -> None:
            # What failed and when, never what was said: no content in this record.
            await self.journal.append((Kind.MODEL_FAILED, {"attempt": number, "error": _type_name(exc),
                                                           "transient": is_transient(exc), "retry_in": wait_s}))

        try:
            return await self.definition.retry.call(attempt, failed)
        except (AgentFencedError, StoreUnavailableError):
            raise
        except Exception as exc:
            await self.journal.append((Kind.FAILED, {"reason": f"model error: {_type_name(exc)}: {exc}"}))
            return None

    def _call_problem(self, call: dict[str, Any]) -> str | None:
        """Why ``call`` cannot run (unknown tool, invalid arguments), or None."""
        tool = self.definition.tool(call["name"])
        if tool is None:
            known = ", ".join(t.name for t in self.definition.tools) or "none"
            return f"unknown tool {call['name']!r} (the tools are: {known})"
        try:
            tool.validate(call["arguments"])
        except ToolArgumentsError as exc:
            return str(exc)
        return None

    def _ready(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The calls that may start now, together: not started, no approval needed,
        not ``sequential`` (those run one at a time, through ``_resolve``)."""
        ready = []
        for call in calls:
            tool = self.definition.tool(call["name"])
            if tool is None or tool.requires_approval or tool.sequential or call["key"] in self.state.ledger:
                continue
            ready.append(call)
        return ready

    async def _resolve_pending(self) -> None:
        if ready := self._ready(self.state.pending_calls):
            await self._execute([(call, 1) for call in ready])
        else:
            await self._resolve(self.state.pending_calls[0])

    def _journal_calls(self, tool_calls) -> list[dict[str, Any]]:
        """The calls as journaled: ids unique in the response, keys unique in the run.

        A provider may reuse a call id across turns (or within one answer); the
        key must not follow it, or a key-deduplicating API would drop a new
        call as a repeat. So the key is derived from the model turn and the
        call's position, and journaled, never derived again on read.
        """
        state, turn = self.state, self.state.usage["steps"] + 1
        calls, seen = [], set()
        for i, c in enumerate(tool_calls):
            call_id = c.id if c.id and c.id not in seen else f"call-{turn}-{i}"
            seen.add(call_id)
            key = idempotency_key(state.namespace, state.agent_id, state.run_id, f"{turn}:{i}:{call_id}")
            calls.append({"id": call_id, "name": c.name, "arguments": c.arguments, "key": key})
        return calls

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
        entry = self.state.ledger.get(call["key"])
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
        # An intent without a result: the process died while the tool ran.
        attempt = entry["attempts"] + 1
        policy = tool.on_unknown_outcome
        approval_id = self._approval_id(call, f"#attempt{attempt}")
        if policy is OnUnknownOutcome.ASK or approval_id in self.state.approvals:
            # (a "fail" call becomes a question once an operator retried the agent)
            await self._ask_outcome(call, approval_id, attempt)
        elif policy is OnUnknownOutcome.RETRY:
            await self._execute([(call, attempt)])
        elif policy is OnUnknownOutcome.RECONCILE:
            await self._reconcile(tool, call, attempt)
        else:
            reason = f"tool {tool.name} call {call['id']}: outcome unknown after a crash (policy fail)"
            await self.journal.append((Kind.FAILED, {"reason": reason}))

    async def _ask_outcome(self, call: dict[str, Any], approval_id: str, attempt: int) -> None:
        """A human decides what became of a call whose outcome is unknown: run it
        again (approve), skip it (deny: the model is told it did not happen), or
        report that it happened with its result (approve with ``result``)."""
        reason = (f"outcome of attempt {attempt - 1} unknown after a crash; approve to run it again, "
                  "deny to skip it, or report that it happened with its result")
        decision = await self._decision(call, approval_id, reason)
        if decision is None:
            return
        if not decision["approved"]:
            who = decision.get("by") or "an operator"
            await self._result(call, error=f"not run: {who} chose to skip this call, so it did not happen{_note(decision)}")
        elif "result" in decision:
            await self._result(call, result=decision["result"])
        else:
            await self._execute([(call, attempt)])

    async def _decision(self, call: dict[str, Any], approval_id: str, reason: str) -> dict[str, Any] | None:
        """The decision on ``approval_id``; None while there is none (this step
        requested it, which parks the agent, or it is still open)."""
        request = self.state.approvals.get(approval_id)
        if request is None:
            data = {"approval_id": approval_id, "call_id": call["id"], "tool": call["name"],
                    "arguments": call["arguments"], "key": call["key"], "reason": reason}
            await self.journal.append((Kind.APPROVAL_REQUESTED, data))
            return None
        return request["decision"]

    def _context(self, call: dict[str, Any], attempt: int) -> ToolContext:
        return ToolContext(idempotency_key=call["key"], agent_id=self.state.agent_id, call_id=call["id"], attempt=attempt)

    async def _execute(self, calls: list[tuple[dict[str, Any], int]], preceding=()) -> None:
        """Run ``(call, attempt)`` pairs concurrently, after one append holding
        ``preceding`` entries and every call's intent (durable before any side
        effect). Each result is appended as it completes; the conversation keeps
        the model's call order (the fold places results by call)."""
        entries, runs = list(preceding), []
        for call, attempt in calls:
            tool = self.definition.tool(call["name"])
            try:
                # Redacted arguments come back from this activation's memory, or not at all.
                arguments = self.journal.redactor.arguments_for(call)
            except RedactedArgumentError as exc:
                entries.append(self._result_entry(call, error=str(exc)))
                continue
            entries.append((Kind.TOOL_INTENT, {"key": call["key"], "call_id": call["id"], "tool": tool.name,
                                               "attempt": attempt}))
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

    async def _run(self, tool: Tool, call: dict[str, Any], arguments: dict[str, Any], attempt: int,
                   lock: anyio.Lock | None = None) -> None:
        with self.tracer.start_as_current_span(f"execute_tool {tool.name}") as span:
            span.set_attribute(tm.OPERATION, "execute_tool")
            span.set_attribute(tm.TOOL_NAME, tool.name)
            span.set_attribute(tm.TOOL_CALL_ID, call["id"])
            span.set_attribute(tm.TOOL_ATTEMPT, attempt)
            span.set_attribute(tm.AGENT_ID, self.state.agent_id)
            try:
                outcome = {"result": tool.to_journal(await tool.invoke(arguments, self._context(call, attempt)))}
            except Exception as exc:
                _record_error(span, exc)
                outcome = {"error": str(exc) if isinstance(exc, ToolArgumentsError) else f"{type(exc).__name__}: {exc}"}
        if lock is None:
            await self._result(call, **outcome)
        else:
            async with lock:
                await self._result(call, **outcome)

    async def _reconcile(self, tool: Tool, call: dict[str, Any], attempt: int) -> None:
        assert tool.reconcile is not None  # Tool.__post_init__ guarantees it
        found = await tool.reconcile(self._context(call, attempt))
        if isinstance(found, Reconciled):
            await self._result(call, result=tool.to_journal(found.result), reconciled=True)
        else:
            await self._execute([(call, attempt)])

    @staticmethod
    def _result_entry(call: dict[str, Any], *, result: Any = None, error: str | None = None,
                      reconciled: bool = False) -> tuple[str, dict[str, Any]]:
        data = {"key": call["key"], "call_id": call["id"], "tool": call["name"], "result": result, "error": error}
        if reconciled:
            data["reconciled"] = True
        return Kind.TOOL_RESULT, data

    async def _result(self, call: dict[str, Any], *, result: Any = None, error: str | None = None,
                      reconciled: bool = False) -> None:
        entry = self._result_entry(call, result=result, error=error, reconciled=reconciled)
        try:
            await self.journal.append(entry)
        except UnencodableValueError as exc:
            # The side effect happened but its result cannot be stored exactly. Never a
            # silent substitute: the agent fails naming the tool, the call and the field,
            # and the ledger marks the call done, so a retry after the fix never repeats it
            # (the model is then told the result was lost).
            lost = (f"the call ran, but its result could not be stored ({exc.path}: {exc.reason}); "
                    "it will not run again")
            reason = f"tool {call['name']} call {call['id']}: result cannot be stored: {exc.path}: {exc.reason}"
            kind, data = entry
            await self.journal.append((kind, {**data, "result": None, "error": lost}), (Kind.FAILED, {"reason": reason}))


def _note(decision: dict[str, Any]) -> str:
    return f": {decision['note']}" if decision.get("note") else ""


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{kind.__qualname__}"


def _first(group: BaseExceptionGroup) -> BaseException:
    """The error to stop on from a task group's: a store error first, else the first one."""
    flat: list[BaseException] = []
    stack = [group]
    while stack:
        for exc in stack.pop().exceptions:
            (stack.append if isinstance(exc, BaseExceptionGroup) else flat.append)(exc)
    for exc in flat:
        if isinstance(exc, (AgentFencedError, StoreUnavailableError)):
            return exc
    return flat[0]


def _record_error(span, exc: BaseException) -> None:
    """Mark ``span`` failed with the exception's type only: its message may quote
    arguments or results (personal data, secrets), which spans never carry."""
    span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
    span.add_event("exception", {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}"})


class _Requeue(Exception):
    """Internal: the actor stopped before handling a command; apply it directly."""
