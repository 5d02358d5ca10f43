"""How PostgreSQL's failures map onto the SPI's typed errors, and retrying the transient ones.

Three kinds of failure, told apart by asyncpg's exception (its SQLSTATE):

* **The statement never ran, or was rolled back whole**: refused or failed
  connection attempts, ``too_many_connections`` (53300), a serialization
  failure (40001) or deadlock (40P01), ``statement_timeout`` or a cancel
  (57014), ``lock_not_available`` (55P03), a read-only transaction after a
  failover (25006), the server starting up (57P03). The transaction did not
  commit, so the call is retried (tenacity, capped and jittered exponential
  backoff, bounded by a deadline); when the deadline passes it surfaces as
  ``StoreUnavailableError`` (retryable by the SPI's definition).
* **The outcome is unknown**: the connection dropped, the server restarted
  or terminated the backend (08xxx, 57P01, 57P02, ``InterfaceError``, an OS
  error, a client-side timeout) while a statement was in flight. It may have
  committed. Reads and idempotent writes are simply retried; an append is
  resolved by read-back first (``PostgresStore._resolve``), never re-sent blind.
  asyncpg's own client-side failures (``InternalClientError`` and its
  subclasses: "cannot switch to state N; another operation is in progress" on a
  connection a restart left half-way through a message exchange, a protocol
  error) belong here too: the connection is in an unknown state, so it is
  thrown away (``broken``) and the call goes on as for a dropped connection.
* **Final**: the caller's mistake (a value PostgreSQL cannot store:
  ``InvalidRequestError``) or the database's set-up (permission denied, a
  dropped table: ``PostgresSetupError``). Retrying cannot help.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import asyncpg
import tenacity

from durably.errors import PostgresSetupError
from durably.storage._errors import InvalidRequestError, StoreError, StoreUnavailableError
from durably.storage._retry import retried as retry_call

T = TypeVar("T")


class OutcomeUnknown(Exception):
    """Internal: a statement was in flight when its connection failed (``backend_pid`` ran it)."""

    def __init__(self, cause: BaseException, backend_pid: int | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.backend_pid = backend_pid


#: SQLSTATEs of a statement that was rolled back whole (or never started): safe to run again.
ROLLED_BACK = frozenset({"40001", "40P01", "57014", "55P03", "25006", "57P03", "53300", "53400"})
#: SQLSTATE classes and codes that mean the connection is gone (the outcome of its statement is unknown).
CONNECTION_LOST_CLASSES = ("08",)
CONNECTION_LOST = frozenset({"57P01", "57P02"})
#: SQLSTATEs of a value the caller passed that PostgreSQL cannot store.
BAD_VALUE_CLASSES = ("22",)
BAD_VALUE = frozenset({"54000"})


def sqlstate(exc: BaseException) -> str:
    return getattr(exc, "sqlstate", None) or ""


#: What asyncpg raises, besides server errors, when a connection fails under a call: the link
#: (OS errors, timeouts, ``InterfaceError``: "connection is closed") or the client's protocol
#: state (``InternalClientError``: a connection left mid-exchange by a dropped server).
CLIENT_FAILURES: tuple[type[BaseException], ...] = (
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
    ConnectionError,
    EOFError,
)


def connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` means the connection (and whatever it had in flight) is gone."""
    if isinstance(exc, asyncpg.PostgresError):
        code = sqlstate(exc)
        return code in CONNECTION_LOST or code.startswith(CONNECTION_LOST_CLASSES)
    return isinstance(exc, CLIENT_FAILURES)


def broken(exc: BaseException) -> bool:
    """True when the connection a call failed on must not be used again: anything but an error
    the server answered with on a live connection (a cancellation mid-statement, a client-side
    failure, a lost link) may leave it mid-exchange."""
    if isinstance(exc, OutcomeUnknown):
        exc = exc.cause
    return not isinstance(exc, asyncpg.PostgresError) or connection_lost(exc)


def transient(exc: BaseException) -> bool:
    """True when running the call again may succeed (see the module docstring)."""
    return isinstance(exc, OutcomeUnknown) or connection_lost(exc) or sqlstate(exc) in ROLLED_BACK


def translate(exc: BaseException, what: str) -> BaseException:
    """The SPI's error for ``exc`` raised by operation ``what`` (cause attached), or ``exc`` itself."""
    if isinstance(exc, OutcomeUnknown):
        exc = exc.cause
    code = sqlstate(exc)
    error: StoreError
    if isinstance(exc, UnicodeEncodeError) or code in BAD_VALUE or code.startswith(BAD_VALUE_CLASSES):
        error = InvalidRequestError(f"postgres {what}: a value PostgreSQL cannot store: {exc}")
    elif transient(exc):
        error = StoreUnavailableError(f"postgres {what} failed: {type(exc).__name__}: {exc}")
    elif isinstance(exc, asyncpg.PostgresError):
        error = PostgresSetupError(f"postgres {what} failed ({code}): {exc}")
    else:
        return exc
    error.__cause__ = exc
    return error


def retrying(deadline: float) -> tenacity.AsyncRetrying:
    """Retries of transient failures: full-jitter exponential backoff (50 ms doubling, capped at
    2 s; AWS Architecture Blog, "Exponential Backoff and Jitter"), no new attempt after ``deadline`` s."""
    return tenacity.AsyncRetrying(
        stop=tenacity.stop_after_delay(deadline),
        wait=tenacity.wait_random_exponential(multiplier=0.05, max=2.0),
        retry=tenacity.retry_if_exception(transient),
        sleep=anyio.sleep,
        reraise=True,
    )


async def retried(deadline: float, attempt: Callable[[], Awaitable[T]]) -> T:
    """Run ``attempt`` until it succeeds; transient failures retried (``retrying``) until ``deadline`` s.

    The first attempt runs bare (``durably.storage.retried``). Raises the last failure untranslated.
    """
    return await retry_call(attempt, retry_on=transient, controller=retrying, deadline=deadline)


async def with_retries(deadline: float, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """Run ``attempt`` (idempotent) until it succeeds; transient failures retried until ``deadline``.

    Raises the translated error (``StoreUnavailableError``, ``InvalidRequestError``,
    ``PostgresSetupError``) of the last failure.
    """
    try:
        return await retried(deadline, attempt)
    except Exception as exc:
        translated = translate(exc, what)
        if translated is exc:
            raise
        raise translated from exc
