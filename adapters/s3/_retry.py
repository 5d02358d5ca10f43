"""Fault handling of the S3 adapter: which failures are transient, and retrying them.

Retries are tenacity's (``AsyncRetrying`` with capped, jittered exponential
backoff: the "full jitter" of the AWS Architecture Blog's *Exponential Backoff
and Jitter*), bounded both by a number of attempts and by a deadline.
botocore's own retry layer is switched off (``total_max_attempts=1``) so there
is one policy in one place: botocore's standard mode does not retry S3's
``409 ConditionalRequestConflict``, and a conditional append must not be
re-sent blindly after an ambiguous failure (the adapter reads the key back
first), which botocore's retry handler cannot do.

Transient: throttling (``SlowDown`` and the other throttling codes, 429), any
5xx, ``409 ConditionalRequestConflict`` / ``OperationAborted``, ``RequestTimeout``,
dropped or refused connections and timeouts. Everything else (403, 404, 412...)
is final. A transient failure still present when the attempts or the deadline
run out becomes ``StoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import aiohttp
import anyio
import tenacity
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from durably.storage._errors import StoreUnavailableError
from durably.storage._retry import retried as retry_call

T = TypeVar("T")

TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds of the backoff: ``max_attempts`` tries, waits of ``base_delay`` * 2**n seconds
    (random full jitter) capped at ``max_delay``, and no new attempt after ``deadline`` seconds."""

    max_attempts: int = 6
    base_delay: float = 0.05
    max_delay: float = 2.0
    deadline: float = 30.0


def error_code(exc: BaseException) -> str | None:
    """The S3 error code of a ``ClientError`` (e.g. ``"SlowDown"``), else None."""
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code")
    return None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a ``ClientError``, else None."""
    if isinstance(exc, ClientError):
        return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


def is_transient(exc: BaseException) -> bool:
    """True when trying again may succeed: throttling, 5xx, 409 conflicts, connection faults, timeouts."""
    if isinstance(exc, ClientError):
        status = http_status(exc) or 0
        return error_code(exc) in TRANSIENT_CODES or status == 429 or status >= 500
    return isinstance(exc, (HTTPClientError, BotoConnectionError, aiohttp.ClientError, ConnectionError, TimeoutError))


def is_not_found(exc: BaseException) -> bool:
    """True for a 404 (``NoSuchKey``, ``NoSuchUpload``, a HEAD's bare 404)."""
    return http_status(exc) == 404


def is_precondition_failed(exc: BaseException) -> bool:
    """True for ``412 PreconditionFailed``: an ``If-None-Match``/``If-Match`` that did not hold."""
    return http_status(exc) == 412


def retrying(policy: RetryPolicy, retry_on: Callable[[BaseException], bool] = is_transient) -> tenacity.AsyncRetrying:
    """A tenacity retry controller for ``policy`` that retries exceptions ``retry_on`` accepts."""
    return tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(policy.max_attempts) | tenacity.stop_after_delay(policy.deadline),
        wait=tenacity.wait_random_exponential(multiplier=policy.base_delay, max=policy.max_delay),
        retry=tenacity.retry_if_exception(retry_on),
        sleep=anyio.sleep,
        reraise=True,
    )


async def retried(
    policy: RetryPolicy, attempt: Callable[[], Awaitable[T]], retry_on: Callable[[BaseException], bool] = is_transient
) -> T:
    """Run ``attempt`` until it succeeds, retrying exceptions ``retry_on`` accepts under ``policy``.

    The first attempt runs bare (``durably.storage.retried``). Raises the last failure as it was raised.
    """
    return await retry_call(
        attempt,
        retry_on=retry_on,
        controller=lambda left: retrying(replace(policy, deadline=left), retry_on),
        deadline=policy.deadline,
    )


def unavailable(what: str, exc: BaseException) -> StoreUnavailableError:
    """A ``StoreUnavailableError`` for operation ``what`` that failed with ``exc`` (set as its cause)."""
    error = StoreUnavailableError(f"S3 {what} failed: {exc}")
    error.__cause__ = exc
    return error


async def call_with_retries(
    policy: RetryPolicy, what: str, attempt: Callable[[], Awaitable[T]], *, expect: tuple[int, ...] = ()
) -> T:
    """Run ``attempt`` until it succeeds, retrying transient failures under ``policy``.

    Out: ``attempt``'s result. A ``ClientError`` whose HTTP status is in
    ``expect`` is re-raised for the caller to handle (e.g. 404, 412). Raises
    ``StoreUnavailableError`` for a transient failure that outlasted the
    policy and for any other botocore error (403, bad credentials...), which a
    caller of the SPI cannot act on except by reporting the store unusable.
    """
    try:
        return await retried(policy, attempt)
    except ClientError as exc:
        if http_status(exc) in expect:
            raise
        raise unavailable(what, exc) from exc
    except (BotoCoreError, aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
        raise unavailable(what, exc) from exc
