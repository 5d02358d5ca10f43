"""``@journaled``: a function that is a journaled call when it runs inside a function agent's run."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, overload

from durably._functions.run import _check, in_run
from durably._tools.tool import OnUnknownOutcome, Reconciler
from durably.errors import ArgumentTypeError


@overload
def journaled(fn: Callable[..., Any], /) -> Callable[..., Awaitable[Any]]: ...


@overload
def journaled(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.ASK,
    reconcile: Reconciler | None = None,
    dump: Callable[[Any], Any] | None = None,
    load: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]: ...


def journaled(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    on_unknown_outcome: OnUnknownOutcome | str = OnUnknownOutcome.ASK,
    reconcile: Reconciler | None = None,
    dump: Callable[[Any], Any] | None = None,
    load: Callable[[Any], Any] | None = None,
) -> Callable[..., Awaitable[Any]] | Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]:
    """Make a function (``async def`` or ``def``) a journaled call of the run it is called in.

    Use bare (``@journaled``) or with options (``@journaled(on_unknown_outcome="retry")``).
    The decorated function is always awaited. Inside a function agent's run
    (the body, or a task it started) each call goes through
    ``current_run().call(fn, ...)`` with these options; outside a run the
    function simply runs (a ``def`` in the calling thread), journaling nothing,
    so it stays usable in scripts and unit tests.

    Args:
        fn: The function (bare use).
        name: The call's name in the journal (default: the function's qualified name).
        on_unknown_outcome: As ``Run.call``: ``ask`` (default), ``retry``, ``reconcile``, ``fail``.
        reconcile: The hook of the ``reconcile`` policy.
        dump: As ``Run.call``: the result into a value the journal can hold.
        load: As ``Run.call``: the stored value back.

    Returns:
        The async wrapper (bare use), or a decorator returning it.

    Raises:
        ArgumentTypeError: The decorated object is not callable, or a hook is
            not (``reconcile`` not async), at decoration time.
        InvalidArgumentError: An unknown policy, ``reconcile`` policy without a
            hook, or an empty ``name``, at decoration time.
    """

    def wrap(target: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        if not callable(target):
            raise ArgumentTypeError(f"@journaled decorates a function, got {type(target).__name__}")
        # Checked once here, so a bad option fails at import, not in the middle of a run.
        _check(target, (), {}, name, None, on_unknown_outcome, reconcile, dump, load, "tool", None)

        @functools.wraps(target)
        async def call(*args: Any, **kwargs: Any) -> Any:
            run = in_run()
            if run is None:
                result = target(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result
            return await run.call(
                target,
                *args,
                name=name,
                on_unknown_outcome=on_unknown_outcome,
                reconcile=reconcile,
                dump=dump,
                load=load,
                **kwargs,
            )

        return call

    return wrap if fn is None else wrap(fn)
