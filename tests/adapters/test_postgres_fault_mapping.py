"""Every way asyncpg reports a failed call on a dropped or restarted server maps onto
``StoreUnavailableError`` (retried first, cause attached), and the connection it failed on is
marked broken (terminated, never handed out again); an error the server answered on a live
connection keeps the connection. The restarts themselves are in ``tests/fleet/test_postgres_restarts.py``."""

from __future__ import annotations

import asyncpg
import pytest
from asyncpg import exceptions

from durably.adapters.postgres._faults import OutcomeUnknown, broken, transient, translate
from durably.errors import PostgresSetupError
from durably.storage import InvalidRequestError, StoreUnavailableError

RESTART_FAILURES = [
    exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    exceptions.ProtocolError("unexpected message"),
    exceptions.OutdatedSchemaCacheError("cached statement plan is invalid"),
    exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    exceptions.ConnectionFailureError("connection failure"),
    exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.InterfaceError("connection is closed"),
    ConnectionResetError(104, "Connection reset by peer"),
    ConnectionRefusedError(111, "Connect call failed"),
    EOFError(),
    TimeoutError(),
]


@pytest.mark.parametrize("failure", RESTART_FAILURES, ids=lambda e: type(e).__name__)
def test_a_restart_failure_is_retried_then_store_unavailable_and_breaks_the_connection(failure) -> None:
    assert transient(failure)
    error = translate(failure, "append")
    assert isinstance(error, StoreUnavailableError) and error.__cause__ is failure
    assert type(failure).__name__ in str(error)
    assert broken(failure) and broken(OutcomeUnknown(failure, 42))


def test_an_answered_error_keeps_the_connection_and_is_typed() -> None:
    undefined = exceptions.UndefinedTableError('relation "x.streams" does not exist')
    assert not broken(undefined) and not transient(undefined)
    assert isinstance(translate(undefined, "read"), PostgresSetupError)
    bad_value = exceptions.CharacterNotInRepertoireError("invalid byte sequence")
    assert not broken(bad_value) and isinstance(translate(bad_value, "append"), InvalidRequestError)
    serialization = exceptions.SerializationError("could not serialize access")
    assert transient(serialization) and not broken(serialization)
    starting = exceptions.CannotConnectNowError("the database system is starting up")  # refused: nothing ran
    assert transient(starting) and isinstance(translate(starting, "read"), StoreUnavailableError)
