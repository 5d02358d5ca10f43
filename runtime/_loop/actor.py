"""The agent actor: a mailbox and the step loop of DESIGN.md.

One actor per live agent, the only writer of its stream in this process.
Between steps it drains its mailbox (messages, decisions, budget, cancel);
then it either resolves the pending tool calls (``tool_calls.ToolCalls``) or
asks the model for the next response (retried by the definition's
``RetryPolicy``, validated before it is journaled, its calls checked against
their tools' schemas). It returns when the agent finishes, fails, is cancelled or
parks (waits for a human): a parked agent holds no memory in the runtime.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from durably import _telemetry as tm
from durably._journal.writer import AgentJournal
from durably._loop.agent import AgentDefinition
from durably._loop.call_ids import ConversationCallIds
from durably._loop.child_calls import ChildAgents
from durably._loop.commands import Command, to_record
from durably._loop.limits import Admission, estimate_input_tokens
from durably._loop.live import DELTA, AgentEvent, LiveEvents, events_of
from durably._loop.model import REFUSED, ModelResponse, ToolCall, billed_usage, check_reply
from durably._loop.model_retries import is_transient
from durably._loop.progress import StepLog
from durably._loop.state import FAILED, RUNNING, AgentState
from durably._loop.tool_calls import ToolCalls
from durably._telemetry import Telemetry
from durably._tools.tool import idempotency_key
from durably.errors import AgentFencedError, AgentLeaseLostError, InvalidCommandError, ToolArgumentsError
from durably.schemas._records import Kind, Record
from durably.storage._errors import StoreUnavailableError, UnencodableValueError

if TYPE_CHECKING:
    from opentelemetry import trace

log = logging.getLogger("durably.actor")
_FLUSH_ON_EXIT_S = 5.0  # how long a cancelled actor may spend committing a staged tool result
#: What stops an activation without a record: nothing more can be written safely (the journal holds the truth).
_STOPS = (AgentFencedError, AgentLeaseLostError, StoreUnavailableError)


class AgentActor(ToolCalls):
    """Runs one agent until it stops or parks.

    In: ``definition``, ``journal`` (holding the restored state), ``telemetry``,
    ``mailbox_size`` (bounded: senders wait when it is full), ``span`` (the
    activation's ``invoke_agent`` span, started by the runtime before it journaled
    the activation; the actor ends it; None when nothing records). After ``run``:
    ``state`` is final for this activation, ``error`` holds what stopped it
    abnormally (``AgentFencedError``, ``AgentLeaseLostError``, ``StoreUnavailableError``) or None.
    Before each model call (each attempt) and each tool call the actor checks
    that its lease is still live (``AgentJournal.check_lease``): a worker paused
    past its lease spends nothing more.
    """

    #: Set once the lease is given back (the handle waits for it); ``Runtime._spawn`` sets it.
    exited: anyio.Event
    #: Asked before each model attempt when the runtime has a limiter (it waits for the fleet's limits).
    admission: Admission | None = None

    def __init__(
        self,
        definition: AgentDefinition,
        journal: AgentJournal,
        telemetry: Telemetry,
        *,
        mailbox_size: int = 64,
        span: trace.Span | None = None,
    ) -> None:
        self.definition = definition
        self.journal = journal
        self.telemetry = telemetry
        self.span = span
        self.failure: str | None = None  # error.type of what failed the agent in this activation
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
        self._validated: dict[str, dict[str, Any]] = {}  # call key -> its coerced arguments, until it runs
        self._conversation_ids = ConversationCallIds()
        self.children: ChildAgents | None = None  # how child agents start and end; the runtime sets it
        #: This process's subscribers (``Runtime.stream``); ``Runtime._spawn`` sets it.
        self.live: LiveEvents | None = None
        self._steps = StepLog(journal.stream)
        self._unpublished: list[AgentEvent] = []  # events of folded records not yet durable
        journal.on_fold = self._folded
        journal.on_commit = self._publish_durable

    def _folded(self, record: Record, state: AgentState) -> None:
        """Each record this activation folds: one INFO line per step, and its live events once durable."""
        try:
            self._steps.folded(record, state)
            if self.live is not None:
                # A record folded at a seq still pending replaces what a rebase undid there.
                self._unpublished = [e for e in self._unpublished if e.seq is not None and e.seq < record.seq]
                self._unpublished.extend(events_of(state.agent_id, record, state))
                self._publish_durable()
        except Exception:  # observers only: a bug here must never stop the journal folding
            log.exception("agent %s: reporting record %d failed", self.journal.stream, record.seq)

    def _publish_durable(self) -> None:
        """Hand the live events of durable records to this process's readers (a staged result waits for its commit)."""
        if self.live is None:
            return
        durable = self.journal.durable_seq
        while self._unpublished and (self._unpublished[0].seq or 0) <= durable:
            self.live.publish(self._unpublished.pop(0))

    def _delta(self, text: str) -> None:
        if self.live is not None and text:
            self.live.publish(AgentEvent(self.state.agent_id, DELTA, None, time.time(), text=text))

    @property
    def state(self) -> AgentState:
        return self.journal.state

    async def run(self) -> None:
        """The step loop. Never raises for agent-level failures: they are journaled."""
        try:
            with tm.activated(self.span, end=True):
                try:
                    await self._loop()
                except _STOPS as exc:
                    # Nothing more can be written safely; the journal holds the truth.
                    log.warning("agent %s stopped: %s", self.journal.stream, exc)
                    self.error = exc
                except Exception as exc:
                    # A bug (ours or a hook's) must stop this agent only, never the runtime and
                    # its other agents; say why in the journal if the journal still takes it.
                    log.exception("agent %s stopped by an unexpected error", self.journal.stream)
                    self.error = exc
                    self.failure = tm.error_type(exc)
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await self.journal.append((Kind.FAILED, {"reason": f"internal error: {type(exc).__name__}"}))
                if self.span is not None:
                    self._end_span(self.span)
        finally:
            if self.journal.staged:
                # Cancelled (a shutdown) right after a tool ran: its result is a fact, keep it.
                with anyio.move_on_after(_FLUSH_ON_EXIT_S, shield=True), contextlib.suppress(Exception):
                    await self.journal.flush()
            self._close_mailbox()
            self.done.set()

    def _end_span(self, span: trace.Span) -> None:
        """What the activation came to, on its ``invoke_agent`` span: the status
        reached, and ERROR with ``error.type`` when the agent failed or was stopped."""
        span.set_attribute(tm.STATUS, self.state.status)
        if self.error is not None and self.failure is None:
            tm.record_error(span, tm.error_type(self.error))
        elif self.state.status == FAILED:
            tm.record_error(span, self.failure or tm.OTHER_ERROR)

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
        await self.journal.flush()  # a drain or a park right after a tool ran: its result is durable first

    async def _compact_history(self) -> bool:
        """Shorten the conversation if the ``HistoryPolicy`` says so; True if it did.

        A summariser that fails (a provider outage) skips compaction for this
        step: the conversation runs long for a while rather than the agent dying.
        """
        policy = self.definition.history
        if policy is None or (cut := policy.cut(self.state.messages)) is None:
            return False
        first, count = cut
        data: dict[str, Any] = {"first": first, "count": count}
        if policy.summarize is not None:
            self.journal.check_lease()  # a summary is a model call too
            try:
                async with self.journal.overlapped():
                    data["summary"] = await policy.summarize(self.state.messages[first : first + count])
            except _STOPS:
                raise  # the staged result's commit failed: nothing more can be written
            except Exception as exc:
                log.warning(
                    "agent %s: summariser failed (%s), history kept for now", self.journal.stream, type(exc).__name__
                )
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
        self._steps.asking()
        response = await self._ask_model()
        if response is None:
            return  # failed for good: journaled
        refused = response.stop_reason == REFUSED
        # A refused or filtered reply decides nothing: its calls (if any) are not made.
        calls = [] if refused else self._journal_calls(response.tool_calls)
        stopped = self.state.status != RUNNING  # a command (a cancel) folded in while the model thought
        usage = response.usage
        data = {
            "text": response.text,
            "tool_calls": calls,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost_usd": usage.cost_usd,
            },
            "plan": response.plan,
            "model": response.model or self.definition.model.name,
        }
        if response.stop_reason:
            data["stop_reason"] = response.stop_reason
        entries: list[tuple[str, dict[str, Any]]] = [(Kind.MODEL_RESPONDED, data)]
        if stopped:
            # What happened is journaled (its tokens were spent); nothing it decides is acted on.
            try:
                await self.journal.append(*entries)
            except UnencodableValueError as exc:  # stopped already: not failed for an answer it will not act on
                log.warning("agent %s: the answer after it stopped cannot be stored: %s", self.journal.stream, exc)
            return
        valid = []
        for call in calls:
            # Checked before anything is journaled: an invalid call runs nothing, and
            # the model reads what was wrong in the call's result, as the next step.
            problem = self._call_problem(call)
            if problem is None:
                valid.append(call)
            else:
                entries.append(self._result_entry(call, error=problem))
        if refused:
            # Not a result: the run did not do its task. ``retry`` asks the model again.
            self.failure = REFUSED
            entries.append((Kind.FAILED, {"reason": f"{REFUSED}: {response.text or 'no text given'}"}))
        elif not calls:
            entries.append((Kind.FINISHED, {"result": response.text}))
        try:
            if ready := self._ready(valid):
                # The response and the intents of the calls it starts in one atomic append:
                # one commit less per step, and a crash leaves all or nothing.
                await self._execute([(call, 1) for call in ready], preceding=entries)
            else:
                await self.journal.append(*entries)
        except UnencodableValueError as exc:
            self.failure = tm.error_type(exc)
            await self.journal.append((Kind.FAILED, {"reason": f"model response cannot be stored: {exc}"}))

    async def _ask_model(self) -> ModelResponse | None:
        """The model's next reply, validated, after the definition's retries; None
        when the agent failed instead (each failed attempt and the failure journaled)."""
        model = self.definition.model
        # The live model sees what redaction kept out of the journal; the state does not.
        view = self.journal.redactor.model_view(self.state.messages)

        telemetry = self.telemetry
        provider = tm.provider_of(model)

        billed: dict[str, Any] | None = None  # what the last failed attempt's refused reply cost

        async def attempt() -> ModelResponse:
            self.journal.check_lease()  # a worker past its lease pays for no call
            if (limit := self._budget_limit()) is not None:
                raise _OverBudget(limit)  # refused replies of this step spent it: no more calls
            if self.admission is None:
                return await call()
            async with self.admission(
                self.definition.name,
                self.definition.limits,
                provider,
                model.name,
                self.journal.stream,
                self._waited,
                lambda: estimate_input_tokens(view),
            ) as charge:
                self.journal.check_lease()  # the wait may have outlasted the lease
                response = await call()
                await charge(response.usage.input_tokens + response.usage.output_tokens)
                return response

        async def call() -> ModelResponse:
            nonlocal billed
            # The span records the error's type only (its message may quote content).
            meters = telemetry.metrics
            started = time.perf_counter() if meters is not None else 0.0
            failure = None
            with telemetry.span(f"chat {model.name}", client=True) as span:
                if span is not None:
                    span.set_attributes(
                        {
                            tm.OPERATION: "chat",
                            tm.PROVIDER: provider,
                            tm.MODEL: model.name,
                            tm.AGENT_ID: self.state.agent_id,
                            tm.CONVERSATION_ID: self.state.agent_id,
                        }
                    )
                response: ModelResponse | None = None
                pieces = 0

                def on_delta(text: str) -> None:
                    nonlocal pieces
                    pieces += 1
                    self._delta(text)

                try:
                    # A streaming model streams always: the reply is the same, and only it is journaled.
                    respond_stream = getattr(model, "respond_stream", None)
                    if respond_stream is not None:
                        response = await respond_stream(view, self._tool_specs, on_delta)
                    else:
                        response = await model.respond(view, self._tool_specs)
                    check_reply(response)  # a reply that does not fold never reaches the journal
                except BaseException as exc:  # a cancel mid-stream is an interrupted stream too
                    if pieces and meters is not None:
                        meters.streams_interrupted.add(1, {**telemetry.attributes, tm.PROVIDER: provider})
                    if not isinstance(exc, Exception):
                        raise
                    failure = tm.error_type(exc)
                    billed = billed_usage(exc, response)  # refused, yet billed: journaled with the failure
                    raise
                finally:
                    if meters is not None:
                        self._measure_call(meters, provider, model.name, time.perf_counter() - started, failure)
                if span is not None:
                    usage = response.usage
                    span.set_attributes(
                        {
                            tm.RESPONSE_MODEL: response.model or model.name,
                            tm.INPUT_TOKENS: usage.input_tokens,
                            tm.OUTPUT_TOKENS: usage.output_tokens,
                        }
                    )
                    if response.stop_reason:
                        span.set_attribute(tm.FINISH_REASONS, (tm.finish_reason(response.stop_reason),))
                if meters is not None:
                    self._measure_tokens(meters, provider, model.name, response)
                return response

        async def failed(number: int, exc: BaseException, wait_s: float | None) -> None:
            nonlocal billed
            if isinstance(exc, (AgentLeaseLostError, _OverBudget, StoreUnavailableError)):
                # Not the model's failure (the lease, the budget, or the store a limit is kept in):
                # nothing to journal, and no retry.
                raise exc
            # What failed and when, never what was said: no content in this record.
            if wait_s is not None and telemetry.metrics is not None:
                telemetry.metrics.retries.add(1, {**telemetry.attributes, tm.RETRY_KIND: "model"})
            data = {"attempt": number, "error": _type_name(exc), "transient": is_transient(exc), "retry_in": wait_s}
            if billed is not None:
                data["usage"], billed = billed, None  # counted in usage and budgets by the fold
            await self.journal.append((Kind.MODEL_FAILED, data))

        try:
            # The last tool result is committed while the model thinks (or with its answer).
            async with self.journal.overlapped():
                return await self.definition.retry.call(attempt, failed)
        except _STOPS:
            raise
        except _OverBudget as over:
            await self.journal.append((Kind.BUDGET_EXCEEDED, over.limit))
            return None
        except Exception as exc:
            self.failure = tm.error_type(exc)
            await self.journal.append((Kind.FAILED, {"reason": f"model error: {_type_name(exc)}: {exc}"}))
            return None

    def _waited(self, key: str, seconds: float) -> None:
        log.info("agent %s waited %.1f s for limit %r", self.journal.stream, seconds, key)
        if (meters := self.telemetry.metrics) is not None:
            meters.limit_wait.record(seconds, {**self.telemetry.attributes, tm.LIMIT_KEY: key})

    def _measure_call(self, meters: tm.Metrics, provider: str, model: str, seconds: float, failure: str | None) -> None:
        attributes = {**self.telemetry.attributes, tm.OPERATION: "chat", tm.PROVIDER: provider, tm.MODEL: model}
        if failure is not None:
            attributes[tm.ERROR_TYPE] = failure
        meters.operation_duration.record(seconds, attributes)

    def _measure_tokens(self, meters: tm.Metrics, provider: str, model: str, response: ModelResponse) -> None:
        attributes = {
            **self.telemetry.attributes,
            tm.OPERATION: "chat",
            tm.PROVIDER: provider,
            tm.MODEL: model,
            tm.RESPONSE_MODEL: response.model or model,
        }
        meters.token_usage.record(response.usage.input_tokens, {**attributes, tm.TOKEN_TYPE: "input"})
        meters.token_usage.record(response.usage.output_tokens, {**attributes, tm.TOKEN_TYPE: "output"})

    def _call_problem(self, call: dict[str, Any]) -> str | None:
        """Why ``call`` cannot run (unknown tool, invalid arguments), or None."""
        tool = self.definition.tool(call["name"])
        if tool is None:
            known = ", ".join(t.name for t in self.definition.tools) or "none"
            return f"unknown tool {call['name']!r} (the tools are: {known})"
        try:
            # Kept for the run that follows in this activation: one validation per call.
            self._validated[call["key"]] = tool.validate(call["arguments"])
        except ToolArgumentsError as exc:
            return str(exc)
        return None

    def _journal_calls(self, tool_calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
        """The calls as journaled: ids unique in the conversation, keys unique in the run.

        A provider may reuse a call id across turns (or within one answer): a
        call whose id is empty or already in the conversation gets a generated
        one that is not in it either, since a provider refuses a conversation
        that repeats a ``tool_call_id``. The key must not follow the id, or a
        key-deduplicating API would drop a new call as a repeat. So the key is
        derived from the model turn and the call's position, and journaled,
        never derived again on read.
        """
        state, turn = self.state, self.state.usage["steps"] + 1
        in_conversation = self._conversation_ids.of(state.messages)
        given: set[str] = set()  # this answer's ids, kept apart: the answer may never be journaled
        calls = []
        for i, c in enumerate(tool_calls):
            call_id = c.id
            if not call_id or call_id in in_conversation or call_id in given:
                call_id, n = f"call-{turn}-{i}", 1
                while call_id in in_conversation or call_id in given:
                    call_id, n = f"call-{turn}-{i}-{n}", n + 1
            given.add(call_id)
            key = idempotency_key(state.namespace, state.agent_id, state.run_id, f"{turn}:{i}:{call_id}")
            calls.append({"id": call_id, "name": c.name, "arguments": c.arguments, "key": key})
        return calls


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return (
        kind.__qualname__ if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{kind.__qualname__}"
    )


class _OverBudget(Exception):
    """Internal: the billed, refused replies of this step reached a budget limit (``limit``)."""

    def __init__(self, limit: dict[str, Any]) -> None:
        super().__init__(f"budget: {limit['limit']} limit reached")
        self.limit = limit


class _Requeue(Exception):
    """Internal: the actor stopped before handling a command; apply it directly."""
