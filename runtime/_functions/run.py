"""``Run``: what a function agent's body gets, and ``current_run`` to find it from anywhere in the body.

``Run.call`` journals a call as intent (durable before the function runs) and
result (after), as ``tool_intent`` and ``tool_result`` records, so every reader
of the journal (``durably show``, ``history``, the console, verify, reencrypt,
purge) understands it. A call is keyed by its place in the run: its position
(1st call, 2nd...) or an explicit ``call_id``. On resume the body runs again
from the start; a call whose result is stored returns it without running, a
call whose failure is stored raises ``CallFailedError`` again, and a call found
with an intent and no result (the process died while it ran) follows its
``on_unknown_outcome`` policy exactly as a tool's does.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio.to_thread

from durably._tools.schema import CONTEXT_PARAMETER
from durably._tools.tool import OnUnknownOutcome, Reconciler, ToolContext
from durably.errors import ArgumentTypeError, InvalidArgumentError, NotInRunError
from durably.storage._codec import check_encodable
from durably.storage._errors import UnencodableValueError

if TYPE_CHECKING:
    from durably._loop.model import Usage
    from durably._loop.state import AgentState

#: The run of the task this code runs in (tasks the body starts inherit it).
_CURRENT: ContextVar[Run | None] = ContextVar("durably_current_run", default=None)

CallKind = Literal["tool", "model"]
TOOL: CallKind = "tool"
MODEL: CallKind = "model"


def current_run() -> Run:
    """The ``Run`` of the function agent whose body (or a task it started) calls this.

    Returns:
        The current ``Run``.

    Raises:
        NotInRunError: Called outside a function agent's run.
    """
    run = _CURRENT.get()
    if run is None:
        raise NotInRunError("current_run() is only available inside a FunctionAgent's run (or a task it started)")
    return run


def in_run() -> Run | None:
    """The current ``Run``, or None outside a function agent's run."""
    return _CURRENT.get()


@dataclass(frozen=True, slots=True)
class CallSpec:
    """One ``Run.call`` as checked: what to run and how to journal it (internal)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    call_id: str | None
    policy: OnUnknownOutcome
    reconcile: Reconciler | None
    dump: Callable[[Any], Any] | None
    load: Callable[[Any], Any] | None
    kind: CallKind
    usage: Callable[[Any], Usage] | None
    shown: dict[str, Any] | None = None

    def arguments(self) -> dict[str, Any]:
        """The call's arguments as the journal shows them (its intent, an approval):
        ``shown`` if given, else ``fn``'s arguments by parameter name. A value the
        journal cannot hold, as it is or through ``dump``, is shown by its type name."""
        if self.shown is not None:
            named = self.shown
        else:
            try:
                named = dict(inspect.signature(self.fn).bind_partial(*self.args, **self.kwargs).arguments)
            except (TypeError, ValueError):  # no signature, or arguments that do not fit it: shown as given
                named = {**({"args": list(self.args)} if self.args else {}), **self.kwargs}
        return {str(k): _shown(v, self.dump) for k, v in named.items() if k != CONTEXT_PARAMETER}

    def to_journal(self, value: Any) -> Any:
        """``value`` as the journal stores it (``dump`` applied, if given)."""
        return value if self.dump is None else self.dump(value)

    def from_journal(self, stored: Any) -> Any:
        """A stored value as the body gets it (``load`` applied, if given)."""
        return stored if self.load is None else self.load(stored)

    async def invoke(self, ctx: ToolContext) -> Any:
        """Run ``fn`` (a sync one in a worker thread), passing ``ctx`` if it declares a ``ctx`` parameter."""
        kwargs = self.kwargs
        if CONTEXT_PARAMETER not in kwargs and _takes_context(self.fn):
            kwargs = {**kwargs, CONTEXT_PARAMETER: ctx}
        if _is_async(self.fn):
            return await self.fn(*self.args, **kwargs)
        result = await anyio.to_thread.run_sync(functools.partial(self.fn, *self.args, **kwargs))
        if inspect.isawaitable(result):  # a plain function handing back a coroutine (a lambda over an async def)
            return await result
        return result


class RunHost(Protocol):
    """What a ``Run`` asks of the activation running it (``FunctionActor``)."""

    @property
    def state(self) -> AgentState:
        """The agent's state as this activation has it."""
        ...

    async def call(self, spec: CallSpec) -> Any:
        """Run the call once in the run, journaled."""
        ...

    async def approval(self, question: str, data: dict[str, Any], approval_id: str | None) -> dict[str, Any]:
        """The decision, or park the agent until there is one."""
        ...


class Run:
    """One activation's view of a function agent's run; the body's first argument.

    The runtime makes it; user code does not. Also reachable as ``current_run()``.

    Args:
        actor: The activation's actor, owned by the runtime.
    """

    def __init__(self, actor: RunHost) -> None:
        self._actor = actor

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self._actor.state.agent_id

    @property
    def namespace(self) -> str:
        """The agent's namespace."""
        return self._actor.state.namespace

    @property
    def run_id(self) -> str:
        """The run's id (a new one after a purge and restart)."""
        return self._actor.state.run_id

    @property
    def task(self) -> str:
        """The task the run was started with."""
        return self._actor.state.task

    def __repr__(self) -> str:
        state = self._actor.state
        return f"<Run {state.namespace}/{state.agent_id} run {state.run_id[:8]}>"

    async def call(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        name: str | None = None,
        call_id: str | None = None,
        on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.ASK,
        reconcile: Reconciler | None = None,
        dump: Callable[[Any], Any] | None = None,
        load: Callable[[Any], Any] | None = None,
        kind: CallKind = TOOL,
        usage: Callable[[Any], Usage] | None = None,
        shown_arguments: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn(*args, **kwargs)`` once in this run, journaled.

        The intent is durable before ``fn`` runs and the result after; the
        activation's lease is checked before ``fn`` runs, and every append
        carries its fencing token. On a replay (a later activation of the run)
        a call whose result is stored returns it without running ``fn``. An
        ``fn`` that declares a ``ctx`` parameter gets a ``ToolContext``
        (idempotency key, agent id, call id, attempt). Keyword arguments named as
        this method's own options reach ``fn`` only through ``functools.partial``.

        Args:
            fn: An ``async def`` or a ``def`` (run in a worker thread).
            *args: Positional arguments for ``fn``.
            name: The call's name in the journal (default: ``fn``'s qualified
                name). On replay, the call at the same place must have the same name.
            call_id: An id unique within the run, which keys the call instead of
                its position (a framework passes the model's tool-call id, so that
                concurrent calls do not depend on the order tasks start in).
            on_unknown_outcome: What a later activation does with this call if the
                process died while it ran: ``ask`` (default: an approval), ``retry``
                (same idempotency key), ``reconcile`` (ask ``reconcile`` first), ``fail``.
            reconcile: ``async def reconcile(ctx) -> Reconciled | None``, for ``reconcile``.
            dump: Turns ``fn``'s result into a value the journal can hold (a
                pydantic model into a dict); None: stored as returned.
            load: Turns the stored value back into what the body gets; None: the
                body gets the stored value on replay and ``fn``'s own on the first run.
            kind: ``tool`` (default) or ``model``: a model request, whose usage
                counts against the agent's ``Budget`` (reached: the agent is
                suspended before the request) and which, with an unknown outcome,
                is simply asked again (nothing was stored, so nothing is paid twice).
            usage: For ``kind="model"``: ``usage(result) -> Usage``, what it cost.
            shown_arguments: The arguments the journal shows with the call's intent
                and any approval about it (a framework passes the tool's own);
                None: ``fn``'s arguments by parameter name. A value the journal
                cannot hold (as it is or through ``dump``) is shown by its type name.
            **kwargs: Keyword arguments for ``fn``.

        Returns:
            ``fn``'s result (or the stored one, through ``load``).

        Raises:
            CallFailedError: ``fn`` raised (now, or when the journal recorded it):
                the original type name and message; the original exception is its
                ``__cause__`` on the activation that ran it.
            NonDeterminismError: The journal holds another call at this place; the
                agent is failed (its data untouched).
            ArgumentTypeError: ``fn``, ``reconcile``, ``dump``, ``load`` or
                ``usage`` is not callable (``reconcile`` not async), ``name`` or
                ``call_id`` not a str, ``shown_arguments`` not a dict (nothing journaled).
            InvalidArgumentError: An empty ``name`` or ``call_id``, a ``call_id``
                already used in this run, an unknown policy or kind, the
                ``reconcile`` policy without a hook, ``usage`` on a tool call.
            NotInRunError: This run's activation has ended.
        """
        spec = _check(fn, args, kwargs, name, call_id, on_unknown_outcome, reconcile, dump, load, kind, usage)
        if shown_arguments is not None:
            if not isinstance(shown_arguments, dict):
                raise ArgumentTypeError(
                    f"Run.call {spec.name!r}: shown_arguments must be a dict, got {type(shown_arguments).__name__}"
                )
            spec = dataclasses.replace(spec, shown=shown_arguments)
        return await self._actor.call(spec)

    async def approval(
        self, question: str, *, data: dict[str, Any] | None = None, approval_id: str | None = None
    ) -> dict[str, Any]:
        """Ask a human, through the runtime's approvals (``Runtime.approve``, ``durably approve``, the console).

        The first time, the request is journaled and the agent parks: this
        activation ends, no process holds the agent, and a decision resumes it.
        The body then replays up to here and gets the decision.

        Args:
            question: What the human is asked (the approval's reason).
            data: Plain data shown with the request (its ``arguments``).
            approval_id: The approval's id, unique in the run (default:
                ``approval-N`` for the N-th approval of the run).

        Returns:
            The decision: ``{"approved": bool, "by": str, "note": str}``, plus
                ``result`` when the approver reported one.

        Raises:
            ArgumentTypeError: ``question`` is not a str, ``data`` not a dict,
                ``approval_id`` not a str.
            InvalidArgumentError: An empty ``approval_id``, or one already used in this run.
            NotInRunError: This run's activation has ended.
        """
        if not isinstance(question, str):
            raise ArgumentTypeError(f"Run.approval: question must be a str, got {type(question).__name__}")
        if data is not None and not isinstance(data, dict):
            raise ArgumentTypeError(f"Run.approval: data must be a dict, got {type(data).__name__}")
        _check_id("Run.approval", "approval_id", approval_id)
        return await self._actor.approval(question, data or {}, approval_id)


def _check_id(where: str, label: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{where}: {label} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{where}: {label} must not be empty")


def _check(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: Any,
    call_id: Any,
    policy: Any,
    reconcile: Any,
    dump: Any,
    load: Any,
    kind: Any,
    usage: Any,
) -> CallSpec:
    """The call's ``CallSpec``; raises ``ArgumentTypeError`` / ``InvalidArgumentError`` as ``Run.call`` documents."""
    if not callable(fn):
        raise ArgumentTypeError(f"Run.call: fn must be callable, got {type(fn).__name__} {fn!r}")
    name = _name_of(fn) if name is None else name
    _check_id("Run.call", "name", name)
    _check_id("Run.call", "call_id", call_id)
    try:
        checked = OnUnknownOutcome(policy)
    except ValueError:
        valid = ", ".join(repr(p.value) for p in OnUnknownOutcome)
        raise InvalidArgumentError(
            f"Run.call {name!r}: on_unknown_outcome={policy!r} is not a policy; use one of {valid}"
        ) from None
    if kind not in (TOOL, MODEL):
        raise InvalidArgumentError(f"Run.call {name!r}: kind must be 'tool' or 'model', got {kind!r}")
    if checked is OnUnknownOutcome.RECONCILE and reconcile is None:
        raise InvalidArgumentError(f"Run.call {name!r}: the reconcile policy needs a reconcile hook")
    if reconcile is not None and not _is_async(reconcile):
        raise ArgumentTypeError(f"Run.call {name!r}: reconcile must be an async function")
    for label, hook in (("dump", dump), ("load", load), ("usage", usage)):
        if hook is not None and not callable(hook):
            raise ArgumentTypeError(f"Run.call {name!r}: {label} must be callable, got {type(hook).__name__}")
    if usage is not None and kind != MODEL:
        raise InvalidArgumentError(f"Run.call {name!r}: usage is for model calls (kind='model')")
    return CallSpec(fn, args, kwargs, name, call_id, checked, reconcile, dump, load, kind, usage)


#: Above this many characters (its repr), an argument is shown by its type name: the
#: intent record stays small whatever the call is given.
_SHOWN_LIMIT = 2000


def _shown(value: Any, dump: Callable[[Any], Any] | None) -> Any:
    """``value`` as a journal record can hold it: as it is, else through ``dump``, else ``<TypeName>``."""
    candidates = [list(value) if type(value) is tuple else value]
    if dump is not None:
        try:
            candidates.append(dump(value))
        except Exception:  # dump is for fn's result; an argument it does not take is shown by type
            pass
    for candidate in candidates:
        try:
            check_encodable(candidate, "argument")
        except UnencodableValueError:
            continue
        if len(repr(candidate)) <= _SHOWN_LIMIT:
            return candidate
    return f"<{type(value).__name__}>"


def _name_of(fn: Any) -> str:
    target = fn.func if isinstance(fn, functools.partial) else fn
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return name if isinstance(name, str) and name else type(target).__qualname__


def _is_async(fn: Any) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004  (an object with an async __call__ is async too)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _takes_context(fn: Any) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature takes no ctx
        return False
    return CONTEXT_PARAMETER in parameters
