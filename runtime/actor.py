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
from .redaction import RedactedArgumentError
from .state import RUNNING, AgentState
from .tools import OnUnknownOutcome, Reconciled, Tool, ToolContext, idempotency_key

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
                await self._resolve(self.state.pending_calls[0])
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
        model = self.definition.model
        with self.tracer.start_as_current_span(f"chat {model.name}") as span:
            span.set_attribute(tm.OPERATION, "chat")
            span.set_attribute(tm.MODEL, model.name)
            span.set_attribute(tm.AGENT_ID, self.state.agent_id)
            try:
                # The live model sees what redaction kept out of the journal; the state does not.
                response = await model.respond(self.journal.redactor.model_view(self.state.messages), self._tool_specs)
            except Exception as exc:
                _record_error(span, exc)
                await self.journal.append((Kind.FAILED, {"reason": f"model error: {type(exc).__name__}: {exc}"}))
                return
            span.set_attribute(tm.INPUT_TOKENS, response.usage.input_tokens)
            span.set_attribute(tm.OUTPUT_TOKENS, response.usage.output_tokens)
        calls = self._journal_calls(response.tool_calls)
        usage = response.usage
        data = {
            "text": response.text,
            "tool_calls": calls,
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd},
            "plan": response.plan,
            "model": response.model or model.name,
        }
        entries = [(Kind.MODEL_RESPONDED, data)]
        if not calls:
            entries.append((Kind.FINISHED, {"result": response.text}))
        first = self.definition.tool(calls[0]["name"]) if calls else None
        try:
            if first is not None and not first.requires_approval:
                # The response and the first call's intent in one atomic append: one
                # commit less per step, and a crash leaves both or neither.
                await self._execute(first, calls[0], attempt=1, with_response=entries[0])
            else:
                await self.journal.append(*entries)
        except UnencodableValueError as exc:
            await self.journal.append((Kind.FAILED, {"reason": f"model response cannot be stored: {exc}"}))

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
            if tool.requires_approval and not await self._approved(call, self._approval_id(call), "tool requires approval"):
                return
            await self._execute(tool, call, attempt=1)
            return
        # An intent without a result: the process died while the tool ran.
        attempt = entry["attempts"] + 1
        policy = tool.on_unknown_outcome
        if policy is OnUnknownOutcome.RETRY:
            await self._execute(tool, call, attempt)
        elif policy is OnUnknownOutcome.RECONCILE:
            await self._reconcile(tool, call, attempt)
        elif policy is OnUnknownOutcome.ASK:
            approval_id = self._approval_id(call, f"#attempt{attempt}")
            reason = f"outcome of attempt {attempt - 1} unknown after a crash; approve to run it again"
            if await self._approved(call, approval_id, reason):
                await self._execute(tool, call, attempt)
        else:
            reason = f"tool {tool.name} call {call['id']}: outcome unknown after a crash (policy fail)"
            await self.journal.append((Kind.FAILED, {"reason": reason}))

    async def _approved(self, call: dict[str, Any], approval_id: str, reason: str) -> bool:
        """True when approved; otherwise parks (request) or records the denial."""
        request = self.state.approvals.get(approval_id)
        if request is None:
            data = {"approval_id": approval_id, "call_id": call["id"], "tool": call["name"],
                    "arguments": call["arguments"], "key": call["key"], "reason": reason}
            await self.journal.append((Kind.APPROVAL_REQUESTED, data))
            return False
        decision = request["decision"]
        if decision is None:
            return False  # still waiting; the status already says so
        if not decision["approved"]:
            note = f": {decision['note']}" if decision.get("note") else ""
            await self._result(call, error=f"denied by {decision.get('by') or 'approver'}{note}")
            return False
        return True

    def _context(self, call: dict[str, Any], attempt: int) -> ToolContext:
        return ToolContext(idempotency_key=call["key"], agent_id=self.state.agent_id, call_id=call["id"], attempt=attempt)

    async def _execute(self, tool: Tool, call: dict[str, Any], attempt: int,
                       with_response: tuple[str, dict[str, Any]] | None = None) -> None:
        try:
            # Redacted arguments come back from this activation's memory, or not at all.
            arguments = self.journal.redactor.arguments_for(call)
        except RedactedArgumentError as exc:
            if with_response is not None:
                await self.journal.append(with_response)
            await self._result(call, error=str(exc))
            return
        intent = {"key": call["key"], "call_id": call["id"], "tool": tool.name, "attempt": attempt}
        preceding = (with_response,) if with_response is not None else ()
        await self.journal.append(*preceding, (Kind.TOOL_INTENT, intent))  # durable before the side effect
        if self.state.status != RUNNING:
            return  # a cancel from another process was folded in while appending: do not act
        with self.tracer.start_as_current_span(f"execute_tool {tool.name}") as span:
            span.set_attribute(tm.OPERATION, "execute_tool")
            span.set_attribute(tm.TOOL_NAME, tool.name)
            span.set_attribute(tm.TOOL_CALL_ID, call["id"])
            span.set_attribute(tm.TOOL_ATTEMPT, attempt)
            span.set_attribute(tm.AGENT_ID, self.state.agent_id)
            try:
                result = await tool.fn(**arguments, ctx=self._context(call, attempt))
            except Exception as exc:
                _record_error(span, exc)
                await self._result(call, error=f"{type(exc).__name__}: {exc}")
                return
        await self._result(call, result=result)

    async def _reconcile(self, tool: Tool, call: dict[str, Any], attempt: int) -> None:
        assert tool.reconcile is not None  # Tool.__post_init__ guarantees it
        found = await tool.reconcile(self._context(call, attempt))
        if isinstance(found, Reconciled):
            await self._result(call, result=found.result, reconciled=True)
        else:
            await self._execute(tool, call, attempt)

    async def _result(self, call: dict[str, Any], *, result: Any = None, error: str | None = None, reconciled: bool = False) -> None:
        data = {"key": call["key"], "call_id": call["id"], "tool": call["name"], "result": result, "error": error}
        if reconciled:
            data["reconciled"] = True
        try:
            await self.journal.append((Kind.TOOL_RESULT, data))
        except UnencodableValueError as exc:
            # The side effect happened; say so rather than fail the run.
            data.update(result=None, error=f"tool returned a value that cannot be stored: {exc}")
            await self.journal.append((Kind.TOOL_RESULT, data))


def _record_error(span, exc: BaseException) -> None:
    """Mark ``span`` failed with the exception's type only: its message may quote
    arguments or results (personal data, secrets), which spans never carry."""
    span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
    span.add_event("exception", {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}"})


class _Requeue(Exception):
    """Internal: the actor stopped before handling a command; apply it directly."""
