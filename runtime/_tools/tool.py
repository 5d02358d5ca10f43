"""Tools, their idempotency keys, and what happens to a call whose outcome is unknown.

A tool is a function (``async def`` or ``def``) taking its arguments as
keywords, and ``ctx`` (a ``ToolContext``) if it declares it. Its JSON Schema
comes from its signature (``tool_schema``); the model's arguments are validated
against it before anything is journaled. durably journals a ``tool_intent``
before calling it and a ``tool_result`` after. If the process dies in between,
nobody knows whether the side effect happened: the tool's
``on_unknown_outcome`` policy decides. A call that fails (raises, times out)
is retried by its ``ToolRetry`` (``durably._tools.attempts``).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache, partial
from typing import Any, overload

import anyio.to_thread

from durably._figures import check_bool, check_figure
from durably._tools.attempts import ToolRetry, check_seconds
from durably._tools.results import journal_form
from durably._tools.schema import CONTEXT_PARAMETER, ToolSignature, read_signature
from durably.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["OnUnknownOutcome", "Reconciled", "Tool", "ToolContext", "idempotency_key", "tool"]


class OnUnknownOutcome(StrEnum):
    """Policy for an intent found without a result on resume.

    * ``retry``: run again with the same idempotency key. At-least-once; exactly
      once when the tool (or the system behind it) deduplicates by key, as
      Stripe's ``Idempotency-Key`` header does.
    * ``reconcile``: ask the tool's ``reconcile`` hook whether the key already
      happened; run again only if it did not. Exactly-once when the hook is right.
    * ``ask`` (the default): turn it into an approval request; a human decides
      to re-run it, skip it (the model is told it did not happen), or report
      that it happened with its result (``Runtime.approve(..., result=...)``).
      Never a duplicate effect, never a dead end.
    * ``fail``: stop the agent with status ``failed``. At-most-once;
      ``Runtime.retry`` turns the call into an ``ask`` approval.
    """

    RETRY = "retry"
    RECONCILE = "reconcile"
    ASK = "ask"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool gets besides its arguments (declare a ``ctx`` parameter).

    Attributes:
        idempotency_key: Stable across retries of this call (32 hex chars): pass
            it on to the external system so it can deduplicate.
        agent_id: The agent making the call.
        call_id: The model's id of the call.
        attempt: 1 for the first run; counts every attempt of the call, those
            retried after a failure or a timeout and those re-run after a crash.
        last_heartbeat: The details of the newest ``heartbeat`` of this call's
            earlier attempts (journaled, so a resumed call sees them too), or
            None. A retried attempt resumes its work from them.
        beat: The runtime's sink for ``heartbeat`` (None outside a run, e.g.
            in a unit test: ``heartbeat`` then does nothing).
    """

    idempotency_key: str
    agent_id: str
    call_id: str
    attempt: int
    last_heartbeat: Any = None
    beat: Callable[[Any], Awaitable[None]] | None = field(default=None, repr=False, compare=False)

    async def heartbeat(self, details: Any = None) -> None:
        """Report progress: ``details`` (plain data, as a tool result may be) are
        journaled for a later attempt to read as ``last_heartbeat``, and the
        tool's ``heartbeat_timeout`` clock restarts.

        Journaling is rate-limited to one record per the tool's
        ``heartbeat_every`` seconds; the newest details in between are kept and
        journaled by the next heartbeat past that, or when the attempt fails.
        A sync tool (running in a worker thread) calls
        ``anyio.from_thread.run(ctx.heartbeat, details)``.

        Args:
            details: What the tool has done so far (None: only "alive").

        Raises:
            UnencodableValueError: ``details`` cannot be journaled (a ``TypeError``).
            StoreError: The journal write failed; the call stops with it.
        """
        if self.beat is not None:
            await self.beat(journal_form(details))


def idempotency_key(namespace: str, agent_id: str, run_id: str, call_id: str) -> str:
    """The key of a tool call: SHA-256 of its coordinates, 32 hex chars.

    The run id is part of it so that an agent id reused after a purge never
    collides with keys an external system saw before.
    """
    material = "\x00".join((namespace, agent_id, run_id, call_id)).encode()
    digest: str = _sha256()(material).hexdigest()
    return digest[:32]


@cache
def _sha256() -> Callable[[bytes], Any]:
    # Loaded on first use, not at import (hashlib loads OpenSSL's bindings), and once: an
    # import statement run on every call costs about as much as the hash itself.
    from hashlib import sha256

    return sha256


Reconciler = Callable[[ToolContext], Awaitable["Reconciled | None"]]


#: The tool names every model API accepts (OpenAI's and Anthropic's function names).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _check_name(name: object) -> str:
    """``name`` if it is a tool name a model can call; raises ``ArgumentTypeError`` (a
    ``TypeError``) for a non-str and ``InvalidArgumentError`` (a ``ValueError``) for any
    other str. The one check of ``Tool`` and ``tool``."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"a tool's name must be a str, got {type(name).__name__} {name!r}")
    if not _TOOL_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"tool name {name!r} is not one a model can call: 1 to 64 ASCII letters, digits, '_' or '-'"
        )
    return name


def _policy(tool_name: str, value: Any) -> OnUnknownOutcome:
    """``value`` as an ``OnUnknownOutcome``; raises ``InvalidArgumentError`` (a ``ValueError``) naming the tool and the valid values."""
    try:
        return OnUnknownOutcome(value)
    except ValueError:
        valid = ", ".join(repr(p.value) for p in OnUnknownOutcome)
        raise InvalidArgumentError(
            f"tool {tool_name!r}: on_unknown_outcome={value!r} is not a policy; use one of {valid}"
        ) from None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A ``reconcile`` hook's answer that the call did happen.

    Attributes:
        result: What the call returned, journaled as its result.
    """

    result: Any


@dataclass(frozen=True)
class Tool:
    """A tool an agent may call.

    A ``Tool`` is callable as its function is, for unit tests:
    ``await send_email(to="a@b.c", body="hi", ctx=ToolContext(...))`` runs ``fn``
    directly (no validation, no journal), returning what it returns.

    Attributes:
        name: The tool's name as the model sees it.
        fn: ``async def`` or ``def``, called with the validated arguments as
            keywords, plus ``ctx`` (a ``ToolContext``) only if it declares a
            ``ctx`` parameter; a ``def`` runs in a worker thread (anyio), so it
            does not block the event loop; cancelling it waits for the thread,
            as anyio allows.
        description: What the model is told the tool does; None takes the
            docstring's text.
        parameters: The JSON Schema shown to the model; None (the default)
            derives it from the signature (see ``tool_schema``). Arguments are
            always validated against the signature.
        requires_approval: Every call waits for a human decision first.
        on_unknown_outcome: An ``OnUnknownOutcome`` (or its value): what a
            resumed run does with a call whose outcome is unknown (default ``ask``).
        reconcile: The async hook the ``reconcile`` policy asks (required for it).
        sequential: This tool's calls never run concurrently with other calls
            of the same model turn.
        retry: The ``ToolRetry`` for failed attempts (None: the definition's
            ``tool_retry``, else one attempt).
        timeout: Seconds one attempt may run before it is cancelled and fails
            with ``ToolTimeoutError`` (None: no limit). A ``def`` tool's thread
            cannot be stopped: its timeout takes effect when the thread returns.
        heartbeat_timeout: Seconds an attempt may go without ``ctx.heartbeat``
            (counted from its start) before it is cancelled and fails with
            ``ToolTimeoutError`` (None: no limit).
        heartbeat_every: The least seconds between two journaled heartbeats of
            a call (default 5).

    Raises:
        ArgumentTypeError: ``name`` is not a str, ``fn`` is not a function (or
            is already a ``Tool``), ``requires_approval`` is not a bool,
            ``reconcile`` is not an async function, or the signature is one a
            model cannot call (a ``TypeError``).
        InvalidArgumentError: ``name`` is not one a model can call (1 to 64
            ASCII letters, digits, ``_`` or ``-``), ``reconcile`` policy without
            a hook, or an ``on_unknown_outcome`` that is not a policy (the message
            lists them; a ``ValueError``); a ``timeout`` or
            ``heartbeat_timeout`` that is not a finite number > 0, a
            ``heartbeat_every`` that is not one >= 0.
    """

    name: str
    fn: Callable[..., Any]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    requires_approval: bool = False
    on_unknown_outcome: OnUnknownOutcome = OnUnknownOutcome.ASK
    reconcile: Reconciler | None = None
    sequential: bool = False
    retry: ToolRetry | None = None
    timeout: float | None = None
    heartbeat_timeout: float | None = None
    heartbeat_every: float = 5.0
    # Set by __post_init__: the function's signature as read once, and whether it is async.
    _read: ToolSignature = field(init=False, repr=False, compare=False)
    _is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if isinstance(self.fn, Tool) or not callable(self.fn):
            raise ArgumentTypeError(f"tool {self.name!r}: fn must be a function, got {type(self.fn).__name__}")
        check_bool(f"tool {self.name!r}", "requires_approval", self.requires_approval)  # "no" would gate every call
        object.__setattr__(self, "on_unknown_outcome", _policy(self.name, self.on_unknown_outcome))
        if self.on_unknown_outcome is OnUnknownOutcome.RECONCILE and self.reconcile is None:
            raise InvalidArgumentError(f"tool {self.name!r}: the reconcile policy needs a reconcile hook")
        if self.reconcile is not None and not inspect.iscoroutinefunction(self.reconcile):
            raise ArgumentTypeError(f"tool {self.name!r}: reconcile must be an async function")
        if self.retry is not None and not isinstance(self.retry, ToolRetry):
            raise ArgumentTypeError(f"tool {self.name!r}: retry must be a ToolRetry, got {type(self.retry).__name__}")
        where = f"tool {self.name!r}"
        object.__setattr__(self, "timeout", check_seconds(where, "timeout", self.timeout))
        object.__setattr__(self, "heartbeat_timeout", check_seconds(where, "heartbeat_timeout", self.heartbeat_timeout))
        check_figure(where, "heartbeat_every", self.heartbeat_every, optional=False)
        read: ToolSignature = read_signature(self.name, self.fn)
        object.__setattr__(self, "_read", read)
        call = getattr(self.fn, "__call__", None)  # noqa: B004  (the method itself: an object with an async __call__ is async too)
        object.__setattr__(self, "_is_async", inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(call))
        if self.parameters is None:
            object.__setattr__(self, "parameters", read.schema)
        if self.description is None:
            object.__setattr__(self, "description", read.description)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the tool's function directly with ``args``/``kwargs`` (an ``async def``
        returns its coroutine); nothing is validated or journaled. For unit tests."""
        return self.fn(*args, **kwargs)

    def spec(self) -> dict[str, Any]:
        """The tool as the model sees it.

        Returns:
            ``{"name", "description", "parameters"}``, the last a JSON Schema.
        """
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def signature(self) -> str:
        """What defines the tool's behaviour, for the agent definition's digest.

        Returns:
            A string of the name, the schema (so a changed signature is a
                definition change), ``requires_approval`` and ``on_unknown_outcome``.
        """
        schema = json.dumps(self.parameters, sort_keys=True, default=str)
        return f"{self.name}|{schema}|{self.requires_approval}|{self.on_unknown_outcome.value}"

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Validate the model's arguments against the tool's signature.

        Args:
            arguments: The model's arguments, a dict.

        Returns:
            The arguments coerced to the annotated types.

        Raises:
            ToolArgumentsError: The arguments do not fit; it names each field and
                its problem.
        """
        return self._read.validate(self.name, arguments)

    async def invoke(
        self, arguments: dict[str, Any], ctx: ToolContext, *, validated: dict[str, Any] | None = None
    ) -> Any:
        """Validate ``arguments`` and call the tool.

        Args:
            arguments: The model's arguments, a dict.
            ctx: The call's ``ToolContext``, passed as ``ctx`` if the function
                declares it.
            validated: What ``validate(arguments)`` returned already, to skip a
                second validation (None: validate here).

        Returns:
            What the tool's function returned.

        Raises:
            ToolArgumentsError: The arguments do not fit the signature.
            Exception: Whatever the tool raises.
        """
        kwargs = dict(validated) if validated is not None else self._read.validate(self.name, arguments)
        if self._read.takes_context:
            kwargs[CONTEXT_PARAMETER] = ctx
        if self._is_async:
            return await self.fn(**kwargs)
        return await anyio.to_thread.run_sync(partial(self.fn, **kwargs))

    def to_journal(self, result: Any) -> Any:
        """Turn a tool's result into what the journal stores.

        Args:
            result: What the tool returned.

        Returns:
            ``result`` as the journal stores it (see ``tool_results.journal_form``).
        """
        return journal_form(result)

    def load_result(self, stored: Any) -> Any:
        """Rebuild a journaled result as the tool's declared return type.

        Args:
            stored: The result as the journal stored it.

        Returns:
            ``stored`` validated into the tool's return annotation (through
                pydantic); unchanged when the tool declares none.

        Raises:
            pydantic.ValidationError: ``stored`` does not fit the return type.
        """
        adapter = self._read.returns
        return stored if adapter is None else adapter.validate_python(stored)


@overload
def tool(name: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.ASK,
    reconcile: Reconciler | None = None,
    sequential: bool = False,
    retry: ToolRetry | None = None,
    timeout: float | None = None,
    heartbeat_timeout: float | None = None,
    heartbeat_every: float = 5.0,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    name: str | Callable[..., Any] | None = None,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.ASK,
    reconcile: Reconciler | None = None,
    sequential: bool = False,
    retry: ToolRetry | None = None,
    timeout: float | None = None,
    heartbeat_timeout: float | None = None,
    heartbeat_every: float = 5.0,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator turning a function (``async def`` or ``def``) into a ``Tool``.

    Use bare (``@tool``) or with options (``@tool(requires_approval=True)``).
    The description defaults to the function's docstring, without its
    ``Args:``/``Returns:`` sections, which describe the parameters in the JSON
    Schema instead (built from the signature by pydantic, as OpenAI's Agents SDK
    ``function_tool`` does).

    Args:
        name: The tool's name as the model sees it (default: the function's);
            or the function itself, for bare ``@tool``.
        description: What the model is told the tool does.
        parameters: A JSON Schema to show instead of the derived one.
        requires_approval: Park the agent before each call until a human decides.
        on_unknown_outcome: An ``OnUnknownOutcome`` (or its value: ``retry``,
            ``reconcile``, ``ask``, ``fail``): what a resumed run does with a
            call that was running when the process died.
        reconcile: The hook the ``reconcile`` policy asks whether the call's
            idempotency key already happened (returns a ``Reconciled`` or None).
        sequential: Run this tool's calls one at a time, never beside others.
        retry: A ``ToolRetry``: attempts, backoff and which errors to retry
            (None: the definition's ``tool_retry``, else one attempt).
        timeout: Seconds an attempt may run before it is cancelled (a failed
            attempt, retried by default).
        heartbeat_timeout: Seconds an attempt may go without ``ctx.heartbeat``
            before it is cancelled (a failed attempt).
        heartbeat_every: The least seconds between two journaled heartbeats.

    Returns:
        The ``Tool`` (bare use), or a decorator returning it.

    Raises:
        ArgumentTypeError: ``name`` is not a str (when ``tool(...)`` is
            called), or the decorated object is not a function or is already a
            tool, or its signature has no JSON Schema (a ``TypeError``, at
            decoration time).
        InvalidArgumentError: ``name`` is not one a model can call (1 to 64
            ASCII letters, digits, ``_`` or ``-``); a lambda (or any function
            whose own name is not one) decorated without ``name=``; or as ``Tool``
            raises, e.g. ``reconcile`` policy without a hook or a ``timeout``
            that is not a number of seconds > 0 (a ``ValueError``).
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        if isinstance(fn, Tool):
            raise ArgumentTypeError(f"{fn.name!r} is already a tool")
        if not callable(fn):
            raise ArgumentTypeError(f"@tool decorates a function, got {type(fn).__name__}")
        if name is None:
            own = getattr(fn, "__name__", None)
            if not isinstance(own, str) or not _TOOL_NAME.fullmatch(own):
                problem = (
                    f"a {type(fn).__name__} has no __name__"
                    if not isinstance(own, str)
                    else f"{own!r} is not a tool name a model can call (1 to 64 ASCII letters, digits, '_' or '-')"
                )
                raise InvalidArgumentError(f'{problem}: pass name=, e.g. @tool(name="lookup_order")')
            tool_name = own
        else:
            tool_name = _check_name(name)
        return Tool(
            name=tool_name,
            fn=fn,
            description=description,
            parameters=parameters,
            requires_approval=requires_approval,
            on_unknown_outcome=_policy(tool_name, on_unknown_outcome),
            reconcile=reconcile,
            sequential=sequential,
            retry=retry,
            timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
            heartbeat_every=heartbeat_every,
        )

    if callable(name) and not isinstance(name, str):
        fn, name = name, None
        return wrap(fn)
    if name is not None:
        _check_name(name)  # now, not when the decorator runs: tool(42) fails where it is written
    return wrap
