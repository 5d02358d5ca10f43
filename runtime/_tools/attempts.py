"""The attempts of one tool call: a retry policy, a timeout, heartbeats.

A call runs as attempts numbered from 1, all under the call's one
idempotency key. An attempt fails when the tool raises, runs past its
``timeout``, or stays silent (no ``ctx.heartbeat``) past its
``heartbeat_timeout``; both limits cancel it through an anyio cancel scope.
``ToolRetry`` decides whether another attempt follows and after which pause:
exponential backoff with jitter, as the model's ``RetryPolicy`` does (the AWS
Architecture Blog's "Exponential Backoff and Jitter"), driven by tenacity.
The runtime journals each failure before the pause (``on_failure``), so a
process that dies while waiting is resumed by the next one, which counts the
attempts already made.

What journals belongs to the caller: this module gets it as callbacks, and
whatever they raise (a store error, a lost lease) stops the call at once,
never retried and never told to the model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from durably._figures import check_bool, check_figure
from durably.errors import ArgumentTypeError, InvalidArgumentError, ToolArgumentsError, ToolTimeoutError

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = ["Heartbeats", "ToolRetry", "check_seconds", "run_attempts"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ToolRetry:
    """How often and how patiently a failed tool attempt is tried again.

    The pause before attempt ``n + 1`` is ``backoff * 2 ** (n - 1)`` seconds,
    capped at ``max_delay``, plus up to ``jitter`` seconds of random jitter.
    Every attempt has the call's one idempotency key, so a system that
    deduplicates by it sees one request; ``ctx.attempt`` tells them apart.

    Attributes:
        attempts: Attempts in all, the first included (1: no retry; default 3).
        backoff: The first pause, in seconds.
        max_delay: The longest pause before jitter, in seconds.
        jitter: The most random jitter added to a pause, in seconds.
        retry_on: The exception classes worth another attempt (default:
            every ``Exception``). ``ToolArgumentsError`` is never retried: the
            same arguments would fail the same way.
        retry_timeouts: Retry an attempt that timed out (``ToolTimeoutError``)
            or not, whatever ``retry_on`` holds (default True).

    Raises:
        InvalidArgumentError: ``attempts`` is not an int >= 1, or ``backoff``,
            ``max_delay`` or ``jitter`` is not a finite number >= 0 (a ``ValueError``).
        ArgumentTypeError: ``retry_on`` holds something other than exception
            classes, or ``retry_timeouts`` is not a bool (a ``TypeError``).
    """

    attempts: int = 3
    backoff: float = 1.0
    max_delay: float = 60.0
    jitter: float = 1.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    retry_timeouts: bool = True

    def __post_init__(self) -> None:
        check_figure("ToolRetry", "attempts", self.attempts, integer=True, optional=False)
        if self.attempts < 1:
            raise InvalidArgumentError(f"ToolRetry: attempts must be >= 1, got {self.attempts!r}")
        for name in ("backoff", "max_delay", "jitter"):
            check_figure("ToolRetry", name, getattr(self, name), optional=False)
        kinds = (self.retry_on,) if isinstance(self.retry_on, type) else self.retry_on
        if not isinstance(kinds, (tuple, list)) or not all(
            isinstance(k, type) and issubclass(k, BaseException) for k in kinds
        ):
            raise ArgumentTypeError(f"ToolRetry: retry_on must be a tuple of exception classes, got {self.retry_on!r}")
        object.__setattr__(self, "retry_on", tuple(kinds))
        check_bool("ToolRetry", "retry_timeouts", self.retry_timeouts)

    @classmethod
    def none(cls) -> ToolRetry:
        """A policy that never retries (one attempt).

        Returns:
            A ``ToolRetry`` with ``attempts=1``.
        """
        return cls(attempts=1)

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` (what an attempt raised) is worth another attempt.

        Args:
            error: The failed attempt's exception.

        Returns:
            ``retry_timeouts`` for a ``ToolTimeoutError``; else True for an
                instance of a ``retry_on`` class that is not a ``ToolArgumentsError``.
        """
        if isinstance(error, ToolTimeoutError):  # a TimeoutError, so an OSError too: decided here alone
            return self.retry_timeouts
        return isinstance(error, self.retry_on) and not isinstance(error, ToolArgumentsError)

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt ``attempt`` (1-based), jitter included.

        Args:
            attempt: The number of the attempt that failed.

        Returns:
            Seconds to wait before the next attempt.
        """
        exponential = self.backoff * 2.0 ** min(attempt - 1, 64)  # 2**64 s: past any max_delay, never inf
        return min(exponential, self.max_delay) + random.uniform(0.0, self.jitter)


def check_seconds(owner: str, name: str, value: Any) -> float | None:
    """``value`` if it is None or a finite number of seconds > 0.

    Raises ``InvalidArgumentError`` (a ``ValueError``) naming ``owner`` and ``name`` otherwise.
    """
    if value is None:
        return None
    check_figure(owner, name, value, optional=False)
    if value <= 0:
        raise InvalidArgumentError(f"{owner}: {name} must be > 0 seconds, got {value!r}")
    return float(value)


class Heartbeats:
    """One call's heartbeats: the latest details, journaled at most once per ``every`` seconds.

    ``beat`` is what ``ToolContext.heartbeat`` calls. The first beat of an
    attempt is written at once; later ones within ``every`` seconds of the last
    write are kept in memory (only the newest), written by the next beat past
    the window or by ``flush`` when the attempt fails, so a retry reads them.
    ``last`` is the newest details of any attempt of the call, starting with
    what the journal held (a resumed call's).
    """

    def __init__(self, every: float, write: Callable[[Any], Awaitable[None]], last: Any = None) -> None:
        self.every = every
        self.last = last
        self._write = write
        self._pending = False
        self._written_at = -math.inf
        self.beat_at = anyio.current_time()
        self.error: BaseException | None = None  # what a write raised (the store): it stops the call
        self._lock = anyio.Lock()

    def start_attempt(self) -> None:
        """Restart the silence clock (a new attempt begins)."""
        self.beat_at = anyio.current_time()

    async def beat(self, details: Any) -> None:
        """Record ``details`` as the call's progress; journal them unless one was written within ``every`` seconds.

        Raises:
            UnencodableValueError: ``details`` cannot be journaled (nothing written).
            StoreError: The journal write failed; the call stops with it.
        """
        self.last, self._pending = details, True
        self.beat_at = anyio.current_time()
        if self.beat_at - self._written_at >= self.every:
            await self.flush()

    async def flush(self) -> None:
        """Journal the newest details if they are not yet (nothing to do otherwise). Raises as ``beat``."""
        async with self._lock:
            if not self._pending:
                return
            self._pending = False
            try:
                await self._write(self.last)
            except Exception as exc:
                if not isinstance(exc, (TypeError, ValueError)):  # an unencodable value is the tool's to fix
                    self.error = exc
                raise
            self._written_at = anyio.current_time()


async def _attempt(
    invoke: Callable[[], Awaitable[T]],
    heartbeats: Heartbeats,
    timeout: float | None,
    heartbeat_timeout: float | None,
    name: str,
    number: int,
) -> T:
    """``await invoke()`` cancelled past ``timeout`` or after ``heartbeat_timeout`` of silence.

    Raises ``ToolTimeoutError`` for either; anything ``invoke`` raises.
    """
    heartbeats.start_attempt()
    if timeout is None and heartbeat_timeout is None:
        return await invoke()
    silent = False
    with anyio.CancelScope(deadline=anyio.current_time() + timeout if timeout is not None else math.inf) as scope:
        if heartbeat_timeout is None:
            return await invoke()

        async def watch() -> None:
            nonlocal silent
            while True:
                due = heartbeats.beat_at + heartbeat_timeout
                if anyio.current_time() >= due:
                    silent = True
                    scope.cancel()
                    return
                await anyio.sleep_until(due)

        outcome: list[T] = []
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            try:
                outcome.append(await invoke())
            except Exception as exc:  # re-raised below, not wrapped in the task group's ExceptionGroup
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        return outcome[0]
    if silent:
        raise ToolTimeoutError(
            f"tool {name!r} attempt {number} sent no heartbeat for {heartbeat_timeout:g}s and was cancelled",
            seconds=heartbeat_timeout or 0.0,
            heartbeat=True,
        )
    raise ToolTimeoutError(
        f"tool {name!r} attempt {number} timed out after {timeout:g}s and was cancelled", seconds=timeout or 0.0
    )


class _Stop(Exception):
    """Internal: a callback (journaling) raised ``error``; the call stops with it, unretried."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def run_attempts(
    name: str,
    policy: ToolRetry,
    first: int,
    invoke: Callable[[int], Awaitable[T]],
    *,
    begin: Callable[[int], Awaitable[None]],
    on_failure: Callable[[int, BaseException, float], Awaitable[None]],
    heartbeats: Heartbeats,
    timeout: float | None = None,
    heartbeat_timeout: float | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    guard: Callable[[], None] = lambda: None,
) -> T:
    """Run attempts ``first``, ``first + 1``, ... of a call until one returns or ``policy`` stops.

    The journaled attempts count: at most ``policy.attempts`` in all, but
    attempt ``first`` always runs (a call re-run after a crash by its
    ``on_unknown_outcome`` policy).

    Args:
        name: The tool's name, for messages.
        policy: The ``ToolRetry`` deciding what follows a failure.
        first: The number of the first attempt to run here.
        invoke: ``invoke(number)`` runs attempt ``number`` once.
        begin: ``begin(number)`` before each attempt after ``first``: journals its
            intent (durable before the side effect).
        on_failure: ``on_failure(number, error, delay_s)`` after a failed attempt
            another one follows, before the pause: journals the failure.
        heartbeats: The call's ``Heartbeats``; flushed when an attempt fails.
        timeout: Seconds an attempt may run (None: no limit).
        heartbeat_timeout: Seconds an attempt may go without a heartbeat (None: no limit).
        sleep: Waits out a pause (``anyio.sleep`` by default); what it raises ends
            the call with that error, the failure already journaled.
        guard: Called just before each attempt's ``invoke`` (e.g. the lease check);
            what it raises stops the call, unretried and never the attempt's failure.

    Returns:
        What the successful attempt returned.

    Raises:
        Exception: The last attempt's error (a ``ToolTimeoutError`` for a
            cancelled one) once no attempt follows; or what ``begin``,
            ``on_failure``, ``guard`` or a heartbeat write raised, never retried.
    """
    remaining = max(1, policy.attempts - first + 1)

    async def attempt(number: int) -> T:
        if number > first:
            try:
                await begin(number)
            except Exception as exc:
                raise _Stop(exc) from exc
        try:
            guard()
        except Exception as exc:
            raise _Stop(exc) from exc
        try:
            value = await _attempt(lambda: invoke(number), heartbeats, timeout, heartbeat_timeout, name, number)
        except Exception:
            if heartbeats.error is not None:
                raise _Stop(heartbeats.error) from None
            try:
                await heartbeats.flush()  # the retry, or whoever resumes the call, reads the newest details
            except Exception as exc:
                if heartbeats.error is not None:
                    raise _Stop(exc) from exc
            raise
        if heartbeats.error is not None:  # the tool caught its heartbeat's store error: it stops the call all the same
            raise _Stop(heartbeats.error)
        return value

    try:
        return await attempt(first)  # the common case, without building a retry loop
    except _Stop as stop:
        raise stop.error from None
    except Exception as exc:
        if remaining == 1 or not policy.retries(exc):
            raise
        failed = exc

    replayed = False

    async def again(number: int) -> T:
        nonlocal replayed
        if not replayed:  # tenacity's attempt 1 is the one that just failed
            replayed = True
            raise failed
        return await attempt(number)

    # Imported here: a runtime whose tools never fail never loads tenacity (import time).
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

    def number_of(state: RetryCallState) -> int:
        return first + state.attempt_number - 1

    def wait(state: RetryCallState) -> float:
        return policy.delay(number_of(state))

    async def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        assert isinstance(error, BaseException), "tenacity waits only after a failed attempt"
        try:
            await on_failure(number_of(state), error, state.upcoming_sleep)
        except Exception as exc:
            raise _Stop(exc) from exc

    try:
        async for retrying in AsyncRetrying(
            stop=stop_after_attempt(remaining),
            wait=wait,
            sleep=sleep,
            retry=retry_if_exception(lambda e: not isinstance(e, _Stop) and policy.retries(e)),
            before_sleep=before_sleep,
            reraise=True,
        ):
            with retrying:
                return await again(number_of(retrying.retry_state))
    except _Stop as stop:
        raise stop.error from None
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover
