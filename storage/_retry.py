"""Retrying a store call: a bare first attempt, then a tenacity controller for the rest of the deadline.

Adapters retry transient failures (a dropped connection, throttling, a
serialization failure) with tenacity. Building tenacity's controller costs
about 40 us of CPU, paid on every call if each call built one, while nearly
every call succeeds the first time. ``retried`` runs that first attempt bare
and builds the controller only after a failure worth retrying, handing it the
time left of the call's deadline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the caller builds the controller: importing durably.storage loads no tenacity
    import tenacity

T = TypeVar("T")


async def retried(
    attempt: Callable[[], Awaitable[T]],
    *,
    retry_on: Callable[[BaseException], bool],
    controller: Callable[[float], tenacity.AsyncRetrying],
    deadline: float,
) -> T:
    """Run ``attempt`` until it succeeds, retrying the failures ``retry_on`` accepts.

    The first attempt runs without a controller; only a failure ``retry_on``
    accepts builds one, and that failed attempt counts as the controller's
    attempt 1, so its attempt limits cover the whole call.

    Args:
        attempt: The call; run again on each retry, so it must be safe to repeat.
        retry_on: Whether an exception is worth another attempt.
        controller: ``controller(seconds_left)``, the tenacity controller (stop,
            wait, sleep and retry policy) for what is left of ``deadline`` once
            the first attempt failed; it should retry what ``retry_on`` accepts
            and stop by then.
        deadline: Seconds for the whole call, counted from this call.

    Returns:
        What ``attempt`` returned.

    Raises:
        Exception: The first attempt's exception, as it was raised, when
            ``retry_on`` rejects it; else what the controller raises once it
            gives up (with ``reraise=True``, the last attempt's exception).
            Cancellation is never caught.
    """
    started = time.monotonic()
    try:
        return await attempt()
    except Exception as exc:
        if not retry_on(exc):
            raise
        failed: Exception | None = exc

    async def again() -> T:
        nonlocal failed
        if failed is not None:  # the controller's attempt 1 is the one that just failed
            error, failed = failed, None
            raise error
        return await attempt()

    async for state in controller(deadline - (time.monotonic() - started)):
        with state:
            return await again()
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover
