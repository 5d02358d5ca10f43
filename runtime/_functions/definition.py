"""``FunctionAgent``: an agent whose run is an async function (user code, or a framework's loop)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from durably._loop.agent import AgentDefinition, Budget, MigrateHook, OnDefinitionChange
from durably._loop.model import ModelResponse
from durably._loop.state import FINISHED
from durably.errors import ArgumentTypeError

if TYPE_CHECKING:
    from durably._functions.run import Run
    from durably._loop.state import AgentState

#: A function agent's body: ``async def body(run, task) -> result``.
Body = Callable[["Run", str], Awaitable[Any]]


class _BodyModel:
    """The ``model`` slot of a function agent's definition: its body asks models itself
    (through ``Run.call``), so the runtime never calls this one."""

    name = "function"
    provider = "durably.function"

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        """Never called: a ``FunctionActor`` runs the body instead of a model loop.

        Raises:
            ArgumentTypeError: Always (a function agent has no model of its own).
        """
        raise ArgumentTypeError("a FunctionAgent has no model of its own; its body calls models through Run.call")


_BODY_MODEL = _BodyModel()


class FunctionAgent(AgentDefinition):
    """An agent whose run is an async function: ``async def body(run, task) -> result``.

    The body is user code (or a framework's agent loop). Every side effect and
    model request in it goes through ``run.call`` (or a ``@journaled`` function),
    which journals it as intent and result; ``run.approval`` parks the agent
    until a human decides. On resume the body runs again from the start and
    each call with a stored result returns it without running again, so the
    body must be deterministic apart from its journaled calls. The runtime
    starts, resumes, approves, cancels and serves it as any ``AgentDefinition``
    (``Runtime.register``, ``start``, ``run``, ``submit``, ``durably worker``).

    Args:
        name: The definition's name (recorded in the journal; a runtime resumes
            a stream with the definition registered under it).
        run: The body, an ``async def`` taking the ``Run`` and the task (a str).
            What it returns is the run's result (``dump_result`` makes it storable).
        version: The author's label, part of the digest.
        budget: The default ``Budget``; model calls (``run.call(..., kind="model")``)
            count against it.
        on_definition_change: What a resume under a changed digest does (see
            ``OnDefinitionChange``; default ``stop``).
        migrate: The hook of the ``migrate`` policy.
        dump_result: Turns the body's result into a value the journal can hold
            (None: stored as returned).
        load_result: Turns the stored result back (``result_of(state)``;
            ``AgentState.result`` holds the stored form).

    Attributes:
        model: A placeholder the runtime never calls (the body asks its models
            through ``Run.call``); it names the agent's provider ``durably.function``.
        tools: Empty: the body's calls are its tools.
        instructions: Empty.
        history: None: the body keeps its own conversation.
        retry: Unused (a model request inside the body is a call).
        max_parallel_tools: Unused (the body decides what runs concurrently).
        tool_retry: Unused (a journaled call's retries are the body's own).
        limits: Unused: fleet-wide ``Limit``s gate the model loop's calls, not
            a body's journaled model calls.

    Raises:
        ArgumentTypeError: ``run`` is not an async function, ``dump_result`` or
            ``load_result`` is not callable (a ``TypeError``); or as
            ``AgentDefinition`` raises (a non-str name).
        InvalidArgumentError: An empty name, or ``migrate`` policy without a hook.
    """

    run: Body
    dump_result: Callable[[Any], Any] | None
    load_result: Callable[[Any], Any] | None

    def __init__(
        self,
        name: str,
        run: Body,
        version: str = "1",
        *,
        budget: Budget | None = None,
        on_definition_change: OnDefinitionChange | str = OnDefinitionChange.STOP,
        migrate: MigrateHook | None = None,
        dump_result: Callable[[Any], Any] | None = None,
        load_result: Callable[[Any], Any] | None = None,
    ) -> None:
        where = f"function agent {name!r}"
        call = getattr(run, "__call__", None)  # noqa: B004  (an object with an async __call__ is a body too)
        if not (inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(call)):
            raise ArgumentTypeError(f"{where}: run must be an async function (async def body(run, task)), got {run!r}")
        for label, hook in (("dump_result", dump_result), ("load_result", load_result)):
            if hook is not None and not callable(hook):
                raise ArgumentTypeError(f"{where}: {label} must be callable, got {type(hook).__name__}")
        if not isinstance(version, str):
            raise ArgumentTypeError(f"{where}: version must be a str, got {type(version).__name__}")
        super().__init__(
            name=name,
            model=_BODY_MODEL,
            version=version,
            budget=budget if budget is not None else Budget(),
            on_definition_change=OnDefinitionChange(on_definition_change),
            migrate=migrate,
        )
        object.__setattr__(self, "run", run)
        object.__setattr__(self, "dump_result", dump_result)
        object.__setattr__(self, "load_result", load_result)

    def result_of(self, state: AgentState) -> Any:
        """The run's result as the body returned it: ``state.result`` through ``load_result``.

        Args:
            state: The agent's state (``Runtime.run``, ``status``, ``wait``).

        Returns:
            ``load_result(state.result)``, or ``state.result`` without the hook;
                None while the run has not finished.
        """
        if state.status != FINISHED or self.load_result is None:
            return state.result if state.status == FINISHED else None
        return self.load_result(state.result)

    def digest(self) -> str:
        """Fingerprint the definition: its version and the body's qualified name.

        Returns:
            The first 16 hex characters of the SHA-256 of ``"function"``, the
                name, the version and the body's module and qualified name.
        """
        from hashlib import sha256  # here, not at import: hashlib loads OpenSSL's bindings (import time)

        body = self.run
        where = f"{getattr(body, '__module__', '')}.{getattr(body, '__qualname__', type(body).__qualname__)}"
        return sha256("\x00".join(("function", self.name, self.version, where)).encode()).hexdigest()[:16]
