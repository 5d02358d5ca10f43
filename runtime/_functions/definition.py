"""``FunctionAgent``: an agent whose run is an async function (user code, or a framework's loop)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
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

        The body's module is named as an import names it, also when its file
        runs as a script (``__main__``), so a submitting script and a worker
        that imports the file agree.

        Returns:
            The first 16 hex characters of the SHA-256 of ``"function"``, the
                name, the version and the body's module and qualified name.
        """
        return self._digest(self._where())

    def same_digests(self) -> frozenset[str]:
        """The digests a journal may hold for this definition.

        Returns:
            ``digest()``, and the digest under the module name ``__main__``
                (how a body run from a script was fingerprinted before its
                module was resolved), so such journals resume as the same definition.
        """
        qualname = self._where().partition(":")[2]
        return frozenset({self.digest(), self._digest(f"__main__:{qualname}")})

    def digest_covers(self) -> str:
        """Say in words what a changed digest means: the body's module or name.

        Returns:
            A sentence naming the body as the digest now knows it.
        """
        return f"the function's module or name changed (now {self._where().replace(':', '.', 1)!r})"

    def _where(self) -> str:
        body = self.run
        qualname = getattr(body, "__qualname__", type(body).__qualname__)
        return f"{importable_module(getattr(body, '__module__', '') or '')}:{qualname}"

    def _digest(self, where: str) -> str:
        from hashlib import sha256  # here, not at import: hashlib loads OpenSSL's bindings (import time)

        module, _, qualname = where.partition(":")
        parts = ("function", self.name, self.version, f"{module}.{qualname}")
        return sha256("\x00".join(parts).encode()).hexdigest()[:16]


def importable_module(module: str) -> str:
    """Name a module as an import names it, also the script that runs as ``__main__``.

    Args:
        module: A module's ``__name__`` (a function's ``__module__``).

    Returns:
        ``module`` unchanged unless it is ``"__main__"``; then the name given
            with ``python -m`` (``__main__.__spec__.name``), else the script
            file's stem, prefixed with the packages it sits in (each directory
            up that holds an ``__init__.py``); ``"__main__"`` when there is no file
            (an interactive session).
    """
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        return str(spec.name)
    file = getattr(main, "__file__", None)
    if not file:
        return module
    path = Path(file).resolve()
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():  # a script inside a package is imported as pkg.sub.stem
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)
