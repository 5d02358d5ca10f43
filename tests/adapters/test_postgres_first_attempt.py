"""Attack on the bare first attempt of a PostgreSQL call (no retry controller until a
failure): the server is killed (``pg_ctl stop -m immediate``) before an append's first
attempt. Back within the deadline: the append is retried and lands once. Still down at
the deadline: ``StoreUnavailableError`` (the SPI's type, not asyncpg's nor an
``OSError``), nothing written, and the same expected seq works once the server is back."""

from __future__ import annotations

import anyio
import pytest
from pg_server import (
    PostgresTestServer,
    own_server,  # noqa: F401 - the fixture: the module's own server, as ``server``
)

from durably.adapters.postgres import PostgresStore
from durably.storage import StoreUnavailableError, StreamId

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_first_attempt_against_a_killed_server_is_retried_or_typed(server: PostgresTestServer) -> None:
    stream = StreamId("first-attempt", "agent")
    schema = "first_attempt"
    patient_url, hasty_url = server.url(schema, deadline=30), server.url(schema, deadline=1)
    async with PostgresStore(patient_url) as patient, PostgresStore(hasty_url) as hasty:
        assert await patient.append(stream, 0, [b"r1"]) == 1
        assert await hasty.last_seq(stream) == 1  # both pools hold live connections

        await anyio.to_thread.run_sync(lambda: server.stop(immediate=True))
        with pytest.raises(StoreUnavailableError):
            await hasty.append(stream, 1, [b"never"])

        async def start_soon() -> None:
            await anyio.sleep(0.5)
            await anyio.to_thread.run_sync(server._pg_ctl_start)

        async with anyio.create_task_group() as group:
            group.start_soon(start_soon)
            assert await patient.append(stream, 1, [b"r2"]) == 2  # first attempt fails: retried until back
        assert [r.data async for r in hasty.read(stream)] == [b"r1", b"r2"]
        assert await hasty.append(stream, 2, [b"r3"]) == 3
