"""A client paused inside a transaction does not stall another's take-over on PostgreSQL.

A worker SIGSTOPped (or frozen with its VM) between two statements of a transaction
stays "idle in transaction" on the server, holding its row locks: here the lease
row, locked ``FOR SHARE`` as a fenced ``put_snapshot`` does. Another worker taking
the expired lease over must update that row; without a bound it would wait as long
as the paused process lives. The adapter's ``idle_in_transaction_timeout`` makes the
server end such a session, and with it the locks. Real server, real paused process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from pg_server import PostgresTestServer

from durably.adapters.postgres import PostgresStore
from durably.errors import InvalidStoreURLError
from durably.storage import StreamId

SUPPORT = Path(__file__).resolve().parents[1] / "support"


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state T in /proc)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def paused_in_transaction(url: str, agent_id: str) -> subprocess.Popen[str]:
    """A client process, paused while its transaction holds the lease row of ``agent_id``."""
    client = subprocess.Popen(
        [sys.executable, str(SUPPORT / "pg_paused_client.py"), url, agent_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None
    assert client.stdout.readline().strip() == "locked"
    deadline = time.monotonic() + 30
    while not stopped(client.pid):
        assert time.monotonic() < deadline, "the client did not pause"
        time.sleep(0.02)
    return client


@pytest.mark.parametrize("options", [{}, {"idle_in_transaction_timeout": 1}], ids=["default", "one-second"])
def test_an_expired_lease_is_taken_over_from_a_client_paused_inside_a_transaction(
    pg_server: PostgresTestServer, options
):
    url = pg_server.url(**options)
    client = paused_in_transaction(url, "agent-1")
    try:

        async def take_over():
            async with PostgresStore(url) as store:
                await anyio.sleep(1.5)  # the paused client's one-second lease has expired
                # Without a bound the update waits on the paused client's row lock for as long
                # as that process lives; statement_timeout only cancels it to be retried.
                with anyio.fail_after(25):
                    return await store.acquire_lease(StreamId("default", "agent-1"), "b", 60.0)

        lease = anyio.run(take_over)
        assert lease is not None and lease.owner == "b"
    finally:
        client.kill()
        client.wait()


def test_the_idle_in_transaction_timeout_is_the_session_setting(pg_server: PostgresTestServer):
    async def setting(url: str) -> str:
        async with PostgresStore(url) as store, store._connection() as conn:
            return str(await conn.fetchval("SHOW idle_in_transaction_session_timeout"))

    assert anyio.run(setting, pg_server.url()) == "10s"
    assert anyio.run(setting, pg_server.url(idle_in_transaction_timeout=2.5)) == "2500ms"


@pytest.mark.parametrize("value", ["0", "-1", "inf", "soon", "1e7"])
def test_an_idle_in_transaction_timeout_that_is_not_positive_seconds_is_refused(pg_server, value):
    with pytest.raises(InvalidStoreURLError):
        PostgresStore(pg_server.url(idle_in_transaction_timeout=value))
