"""Retrying a model call on transient errors (tenacity), honouring ``Retry-After``.

A provider that answers 429, 503 or times out usually answers the same
request a moment later. Exponential backoff with jitter spreads the retries
of many agents (the AWS Architecture Blog's "Exponential Backoff and
Jitter"); a server's ``Retry-After`` (RFC 9110, section 10.2.3) is a floor on
the wait. Each failed attempt is reported to ``on_failure`` before the wait,
so the journal says what happened while no content leaves the process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

if TYPE_CHECKING:
    from tenacity import RetryCallState

from durably.errors import InvalidArgumentError, TransientModelError

T = TypeVar("T")

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a transient model error is retried.

    Waits grow from ``initial_s`` by doubling up to ``max_s`` seconds, plus up
    to ``jitter_s`` of random jitter (exponential backoff with jitter, as in
    the AWS Architecture Blog's "Exponential Backoff and Jitter"); a
    ``Retry-After`` longer than that wait replaces it, up to
    ``max_retry_after_s`` (a longer one is not waited for: the attempt counts
    as the last).

    Attributes:
        attempts: Calls in all (1: no retry; default 4).
        initial_s: The first wait, in seconds.
        max_s: The longest backoff wait, in seconds.
        jitter_s: The most random jitter added to a wait, in seconds.
        max_retry_after_s: The longest ``Retry-After`` honoured, in seconds.

    Raises:
        InvalidArgumentError: ``attempts`` is not an int >= 1, or another figure
            is not a finite number >= 0.
    """

    attempts: int = 4
    initial_s: float = 0.5
    max_s: float = 30.0
    jitter_s: float = 0.5
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidArgumentError(f"RetryPolicy: attempts must be an int >= 1, got {self.attempts!r}")
        for name in ("initial_s", "max_s", "jitter_s", "max_retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidArgumentError(f"RetryPolicy: {name} must be finite and >= 0, got {value!r}")

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries.

        Returns:
            A ``RetryPolicy`` with ``attempts=1``.
        """
        return cls(attempts=1)

    async def call(
        self, fn: Callable[[], Awaitable[T]], on_failure: Callable[[int, BaseException, float | None], Awaitable[None]]
    ) -> T:
        """``await fn()``, retried while it raises a transient error (``is_transient``).

        Args:
            fn: The call to make, with no arguments.
            on_failure: ``on_failure(attempt, error, wait_s)``, awaited after each
                failed attempt (1-based), ``wait_s`` being the pause in seconds
                before the next one, or None when there is none.

        Returns:
            ``fn``'s result.

        Raises:
            Exception: ``fn``'s last error, when the attempts are spent or the
                error is not transient; or what ``on_failure`` raised (journaling
                the attempt failed), which is never retried.
        """
        try:
            return await fn()  # the common case, without building a retry loop (~0.2 ms a call)
        except Exception as exc:
            first = exc
        replayed = False

        async def again() -> T:
            nonlocal replayed
            if not replayed:  # tenacity's attempt 1 is the call that just failed
                replayed = True
                raise first
            return await fn()

        # Imported here: a runtime whose model never fails never loads tenacity (import time).
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

        backoff = wait_exponential_jitter(multiplier=self.initial_s, max=self.max_s, jitter=self.jitter_s)

        def wait(state: RetryCallState) -> float:
            return max(backoff(state), retry_after(_failure(state)) or 0.0)

        def retryable(exc: BaseException) -> bool:
            after = retry_after(exc)
            return is_transient(exc) and (after is None or after <= self.max_retry_after_s)

        async def before_sleep(state: RetryCallState) -> None:
            try:
                await on_failure(state.attempt_number, _failure(state), state.upcoming_sleep)
            except Exception as exc:
                raise _ReportFailed(exc) from exc

        made = 0
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.attempts),
                wait=wait,
                sleep=anyio.sleep,
                retry=retry_if_exception(retryable),
                before_sleep=before_sleep,
                reraise=True,
            ):
                with attempt:
                    made = attempt.retry_state.attempt_number
                    return await again()
        except _ReportFailed as failed:
            raise failed.error from None  # journaling the attempt failed (the store): that is the error now
        except Exception as exc:
            await on_failure(made, exc, None)  # the last attempt: nothing follows it
            raise
        raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


class _ReportFailed(Exception):
    """Internal: ``on_failure`` itself raised ``error``; never retried."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def is_transient(exc: BaseException) -> bool:
    """True for errors a later attempt may not meet: ``TransientModelError``,
    timeouts, connection errors, and HTTP 408/409/425/429/5xx (read from a
    ``status_code`` or ``status`` attribute, or the one of ``exc.response``)."""
    if isinstance(exc, TransientModelError):
        return True
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    status = _status(exc)
    return status is not None and (status in _TRANSIENT_STATUS or status >= 500)


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked to wait (``Retry-After``: seconds or an HTTP
    date), from ``exc.retry_after`` or ``exc.response.headers``; None if none."""
    if exc is None:
        return None
    value: Any = getattr(exc, "retry_after", None)
    if value is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        value = headers.get("retry-after") if headers is not None and hasattr(headers, "get") else None
    return parse_retry_after(value)


def parse_retry_after(value: Any) -> float | None:
    """A ``Retry-After`` value (number, digits or HTTP date) as seconds >= 0, or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) and value >= 0 else None
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            import email.utils  # only for an HTTP-date Retry-After (rare)

            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _status(exc: BaseException) -> int | None:
    for owner in (exc, getattr(exc, "response", None)):
        for name in ("status_code", "status"):
            value = getattr(owner, name, None)
            if type(value) is int:
                return value
    return None


def _failure(state: RetryCallState) -> BaseException:
    """The error of the attempt that just failed: tenacity calls ``wait`` and
    ``before_sleep`` only after one (``retry_if_exception``: results never retry)."""
    error = state.outcome.exception() if state.outcome is not None else None
    assert isinstance(error, BaseException), "tenacity waits only after a failed attempt"
    return error
