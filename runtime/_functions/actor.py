"""``FunctionActor``: the actor of a function agent's activation.

It runs the body (``FunctionAgent.run``) instead of a model loop, with the
``AgentActor``'s mailbox, lease, telemetry and stopping rules, and the
``ToolCalls`` policy code for calls whose outcome is unknown. Commands
(decisions, cancels, messages, budget) are folded in at each call boundary.

Parking: a call or an approval that cannot go on in this activation (an
approval requested, the budget reached, a cancel folded in, a drain, a failure)
halts the body. Calls already running finish and journal their results first;
then the body is cancelled, and the activation ends with nothing more written.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

from durably import _telemetry as tm
from durably._functions.run import _CURRENT, MODEL, CallSpec, Run
from durably._loop.actor import _STOPS, AgentActor, _type_name
from durably._loop.state import RUNNING
from durably._tools.tool import OnUnknownOutcome, ToolContext, idempotency_key
from durably.errors import CallFailedError, InvalidArgumentError, NonDeterminismError, NotInRunError
from durably.schemas._records import Kind
from durably.storage._errors import UnencodableValueError

if TYPE_CHECKING:
    from durably._functions.definition import FunctionAgent

log = logging.getLogger("durably.actor")

#: ``_prepare``'s answer when the body cannot go on in this activation.
_HALT: Any = object()


def _lone(error: Exception) -> Exception:
    """The one error a group holds (a task group the body ran wraps what its task raised), nested
    groups included, so the failure reason names it; ``error`` itself when it is no such group."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class FunctionActor(AgentActor):
    """Runs one activation of a function agent (see the module docstring).

    In and out as ``AgentActor``: ``definition`` is a ``FunctionAgent``.
    """

    definition: FunctionAgent

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._position = 0  # calls made so far without a call_id, in the order made
        self._approval_count = 0
        self._call_ids: set[str] = set()  # explicit ids and approval ids used in this activation
        self._in_flight = 0  # calls whose function runs (their intent is durable, their result not yet)
        self._halted = False
        self._body_scope: anyio.CancelScope | None = None
        self._stop_error: BaseException | None = None  # a store error that stopped a call
        self._live = True  # cleared once the body is over: a Run kept past it refuses calls

    async def _loop(self) -> None:
        await self._drain_mailbox()
        if self.state.status != RUNNING or self.stopping:
            await self.journal.flush()
            return
        run = Run(self)
        token = _CURRENT.set(run)
        outcome: tuple[str, Any] | None = None
        try:
            with anyio.CancelScope() as scope:
                self._body_scope = scope
                try:
                    outcome = ("result", await self.definition.run(run, self.state.task))
                except Exception as exc:
                    outcome = ("error", _lone(exc))
        finally:
            _CURRENT.reset(token)
            self._live = False
        if self._stop_error is not None:
            raise self._stop_error
        if outcome is not None and not self._halted:
            async with self._append_lock:
                await self._drain_mailbox()
                if self.state.status == RUNNING and not self.stopping:
                    await self._finish(*outcome)
        await self.journal.flush()

    async def _finish(self, how: str, value: Any) -> None:
        if how == "error":
            self.failure = tm.error_type(value)
            await self.journal.append((Kind.FAILED, {"reason": f"{_type_name(value)}: {value}"}))
            return
        dump = self.definition.dump_result
        try:
            stored = value if dump is None else dump(value)
            await self.journal.append((Kind.FINISHED, {"result": stored}))
        except UnencodableValueError as exc:
            self.failure = tm.error_type(exc)
            reason = (
                f"the run's result cannot be stored: {exc.path}: {exc.reason}; "
                "pass dump_result=/load_result= to FunctionAgent to store it as plain data"
            )
            await self.journal.append((Kind.FAILED, {"reason": reason}))
        except _STOPS:
            raise
        except Exception as exc:  # the dump_result hook failed
            self.failure = tm.error_type(exc)
            reason = f"the run's result cannot be stored: dump_result raised {_type_name(exc)}: {exc}"
            await self.journal.append((Kind.FAILED, {"reason": reason}))

    # -- calls ---------------------------------------------------------------

    async def call(self, spec: CallSpec) -> Any:
        """Run ``spec`` once in this run (``Run.call``); see the module docstring."""
        call = self._place(spec)
        try:
            prepared = await self._prepare(call, spec)
            if prepared is _HALT:
                await self._halt()
            if isinstance(prepared, _Stored):
                return self._replay(call, spec, prepared.entry)
            failed: CallFailedError | None = None
            try:
                value = await self._run_fn(call, spec, prepared)
            except CallFailedError as exc:
                failed = exc
            finally:
                self._in_flight -= 1
            if self._halted or self.state.status != RUNNING:
                await self._halt()  # failed (an unstorable result), a cancel folded in, or another call parked
            if failed is not None:
                raise failed
            return value
        except _STOPS as exc:
            self._stop_error = self._stop_error or exc
            self._halted = True
            if self._in_flight == 0:
                self._cancel_body()
            raise

    def _place(self, spec: CallSpec) -> dict[str, Any]:
        """The call as the ``ToolCalls`` code knows calls: id, name, arguments, key."""
        if not self._live:
            raise NotInRunError("this run's activation has ended; its Run makes no more calls")
        state = self.state
        if spec.call_id is None:
            self._position += 1
            call_id, where = f"call-{self._position}", f"position:{self._position}"
        else:
            if spec.call_id in self._call_ids:
                raise InvalidArgumentError(
                    f"Run.call {spec.name!r}: call_id {spec.call_id!r} is already used in this run"
                )
            self._call_ids.add(spec.call_id)
            call_id, where = spec.call_id, f"id:{spec.call_id}"
        key = idempotency_key(state.namespace, state.agent_id, state.run_id, where)
        return {"id": call_id, "name": spec.name, "arguments": spec.arguments(), "key": key}

    async def _prepare(self, call: dict[str, Any], spec: CallSpec) -> Any:
        """Under the append lock: ``_Stored`` (replay it), the attempt to run (its intent
        now durable, counted in flight), or ``_HALT``."""
        async with self._append_lock:
            if not await self._may_go_on():
                return _HALT
            entry = self.state.ledger_entry(call["key"])
            if entry is not None and entry["tool"] != spec.name:
                error = NonDeterminismError(call["id"], entry["tool"], spec.name)
                self.failure = tm.error_type(error)
                await self.journal.append((Kind.FAILED, {"reason": str(error)}))
                raise error
            if entry is None:
                if spec.kind == MODEL and (limit := self._budget_limit()) is not None:
                    await self.journal.append((Kind.BUDGET_EXCEEDED, limit))
                    return _HALT
                attempt = 1
            elif entry.get("done"):
                return _Stored(entry)
            else:
                # A model request is asked again: nothing of it was stored, so nothing is paid twice.
                policy = OnUnknownOutcome.RETRY if spec.kind == MODEL else spec.policy
                decided = await self._unknown_outcome(call, policy, spec.reconcile, spec.to_journal)
                if decided is None:
                    entry = self.state.ledger[call["key"]]
                    return _Stored(entry) if entry.get("done") and self.state.status == RUNNING else _HALT
                attempt = decided
            intent = {"key": call["key"], "call_id": call["id"], "tool": spec.name, "attempt": attempt}
            if call["arguments"]:
                intent["arguments"] = call["arguments"]
            await self.journal.append((Kind.TOOL_INTENT, intent))
            if self.state.status != RUNNING:
                return _HALT  # a command from another process (a cancel) was folded in with it
            self._in_flight += 1
            return attempt

    async def _run_fn(self, call: dict[str, Any], spec: CallSpec, attempt: int) -> Any:
        """Run the function (its intent is durable) and journal its result; return it or raise."""
        ctx = ToolContext(
            idempotency_key=call["key"], agent_id=self.state.agent_id, call_id=call["id"], attempt=attempt
        )
        failure: Exception | None = None
        value: Any = None
        with self.telemetry.tool_span(
            spec.name, call["id"], attempt, self.state.agent_id, self.definition.name
        ) as span:
            self.journal.check_lease()  # a worker past its lease runs no side effect
            try:
                value = await spec.invoke(ctx)
            except Exception as exc:
                tm.record_exception(span, exc)
                failure = exc
        error = None if failure is None else f"{_type_name(failure)}: {failure}"
        async with self._append_lock:
            if failure is None:
                try:
                    stored = spec.to_journal(value)
                    usage = _usage_of(spec, value)
                except Exception as exc:
                    # The call ran but its result cannot be stored as asked: as for an unencodable
                    # result, the agent fails and the call is marked done, so it never runs again.
                    await self._lost(call, spec, exc)
                    return None
                await self._result(call, result=stored, error=error, usage=usage)
            else:
                await self._result(call, error=error, usage=_usage_of(spec, None))
        if failure is not None:
            raise _failed(call, spec, error or "") from failure
        return spec.from_journal(stored) if spec.load is not None else value

    async def _lost(self, call: dict[str, Any], spec: CallSpec, exc: Exception) -> None:
        """Journal that ``call`` ran but its result was lost (a ``dump`` or ``usage`` hook
        raised), and fail the agent naming the call and the error."""
        said = f"{_type_name(exc)}: {exc}"
        lost = f"the call ran, but its result could not be stored ({said}); it will not run again"
        _, data = self._result_entry(call, error=lost, usage=_usage_of(spec, None))
        self.failure = tm.error_type(exc)
        reason = f"call {spec.name} ({call['id']}): result cannot be stored: {said}"
        await self.journal.append((Kind.TOOL_RESULT, data), (Kind.FAILED, {"reason": reason}))

    def _replay(self, call: dict[str, Any], spec: CallSpec, entry: dict[str, Any]) -> Any:
        if entry.get("error") is not None:
            raise _failed(call, spec, entry["error"])
        return spec.from_journal(entry.get("result"))

    # -- approvals -----------------------------------------------------------

    async def approval(self, question: str, data: dict[str, Any], approval_id: str | None) -> dict[str, Any]:
        """``Run.approval``: the decision, or park the agent until there is one."""
        if not self._live:
            raise NotInRunError("this run's activation has ended; its Run asks no more approvals")
        self._approval_count += 1
        approval_id = approval_id or f"approval-{self._approval_count}"
        if approval_id in self._call_ids:
            raise InvalidArgumentError(f"Run.approval: approval_id {approval_id!r} is already used in this run")
        self._call_ids.add(approval_id)
        state = self.state
        decision: dict[str, Any] | None = None
        try:
            async with self._append_lock:
                if await self._may_go_on():
                    request = state.approvals.get(approval_id)
                    if request is None:
                        key = idempotency_key(state.namespace, state.agent_id, state.run_id, f"approval:{approval_id}")
                        requested = {
                            "approval_id": approval_id,
                            "call_id": approval_id,
                            "tool": "approval",
                            "arguments": data,
                            "key": key,
                            "reason": question,
                        }
                        await self.journal.append((Kind.APPROVAL_REQUESTED, requested))
                    else:
                        decision = request["decision"]
        except _STOPS as exc:
            self._stop_error = self._stop_error or exc
            raise
        if decision is None:
            await self._halt()
        answer = {"approved": decision["approved"], "by": decision.get("by", ""), "note": decision.get("note", "")}
        if "result" in decision:
            answer["result"] = decision["result"]
        return answer

    # -- halting -------------------------------------------------------------

    async def _may_go_on(self) -> bool:
        """Fold in queued commands; False when the body must stop here (not running, draining, halted)."""
        if self._stop_error is not None:
            return False
        await self._drain_mailbox()
        return self.state.status == RUNNING and not self.stopping and not self._halted

    async def _halt(self) -> NoReturn:
        """Stop the body: at once when no call is running, else once the last one journaled its result."""
        self._halted = True
        if self._in_flight == 0:
            self._cancel_body()
        await anyio.sleep_forever()
        raise AssertionError("unreachable: the body's scope is cancelled")  # pragma: no cover

    def _cancel_body(self) -> None:
        if self._body_scope is not None:
            self._body_scope.cancel()


class _Stored:
    """A call's stored outcome (its ledger entry), to replay."""

    __slots__ = ("entry",)

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry


def _failed(call: dict[str, Any], spec: CallSpec, error: str) -> CallFailedError:
    kind, _, message = error.partition(": ")
    return CallFailedError(spec.name, call["id"], kind, message)


def _usage_of(spec: CallSpec, value: Any) -> dict[str, Any] | None:
    """What a model call cost, as journaled (None for other calls)."""
    if spec.kind != MODEL:
        return None
    if spec.usage is None or value is None:  # a failed request still counts as a step
        return {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    used = spec.usage(value)
    return {"input_tokens": used.input_tokens, "output_tokens": used.output_tokens, "cost_usd": used.cost_usd}
