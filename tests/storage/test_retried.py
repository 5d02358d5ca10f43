"""``durably.storage.retried``: a store call's first attempt runs bare, the retry controller comes only after a failure.

The controllers here are real tenacity ones (no wait between attempts, so the
tests stay fast); only the attempts are the test's own functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest
import tenacity

from durably.storage import retried

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Transient(Exception):
    """A failure worth another attempt."""


class Final(Exception):
    """A failure no retry can help."""


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, Transient)


class Controllers:
    """A controller factory that records the seconds left it was asked for; ``attempts`` caps the whole call."""

    def __init__(self, attempts: int = 5) -> None:
        self.attempts = attempts
        self.asked: list[float] = []

    def __call__(self, left: float) -> tenacity.AsyncRetrying:
        self.asked.append(left)
        return tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.attempts) | tenacity.stop_after_delay(left),
            retry=tenacity.retry_if_exception(is_transient),
            sleep=anyio.sleep,
            reraise=True,
        )


def failing(*failures: Exception) -> tuple[list[int], Callable[[], Awaitable[int]]]:
    """An attempt that raises ``failures`` one per call, then returns the number of calls."""
    calls: list[int] = []

    async def attempt() -> int:
        calls.append(len(calls) + 1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return len(calls)

    return calls, attempt


async def test_a_call_that_succeeds_at_once_builds_no_controller() -> None:
    controllers = Controllers()
    calls, attempt = failing()
    assert await retried(attempt, retry_on=is_transient, controller=controllers, deadline=10.0) == 1
    assert calls == [1] and controllers.asked == []


async def test_a_transient_failure_is_retried_under_one_controller_given_the_time_left() -> None:
    controllers = Controllers()
    calls, attempt = failing(Transient("one"), Transient("two"))
    assert await retried(attempt, retry_on=is_transient, controller=controllers, deadline=10.0) == 3
    assert calls == [1, 2, 3]
    (left,) = controllers.asked
    assert 0 < left <= 10.0


async def test_the_first_attempts_time_is_taken_off_the_deadline() -> None:
    controllers = Controllers()
    calls: list[int] = []

    async def slow_then_fine() -> str:
        calls.append(1)
        if len(calls) == 1:
            await anyio.sleep(0.2)
            raise Transient("slow")
        return "done"

    assert await retried(slow_then_fine, retry_on=is_transient, controller=controllers, deadline=10.0) == "done"
    (left,) = controllers.asked
    assert left <= 9.8


async def test_the_failed_first_attempt_counts_against_the_controllers_attempts() -> None:
    controllers = Controllers(attempts=3)
    calls, attempt = failing(*(Transient(f"t{n}") for n in range(1, 6)))
    with pytest.raises(Transient, match="t3"):  # the last failure, as it was raised
        await retried(attempt, retry_on=is_transient, controller=controllers, deadline=10.0)
    assert calls == [1, 2, 3], "three attempts in all, the bare one included"


async def test_a_failure_retry_on_rejects_is_raised_at_once_without_a_controller() -> None:
    controllers = Controllers()
    calls, attempt = failing(Final("no"))
    with pytest.raises(Final, match="no"):
        await retried(attempt, retry_on=is_transient, controller=controllers, deadline=10.0)
    assert calls == [1] and controllers.asked == []


async def test_a_final_failure_on_a_retry_is_raised_as_it_was() -> None:
    controllers = Controllers()
    calls, attempt = failing(Transient("first"), Final("then final"))
    with pytest.raises(Final, match="then final"):
        await retried(attempt, retry_on=is_transient, controller=controllers, deadline=10.0)
    assert calls == [1, 2] and len(controllers.asked) == 1
