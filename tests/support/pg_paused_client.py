"""A PostgreSQL client that pauses itself inside a transaction holding a lease row's lock.

``python pg_paused_client.py URL AGENT_ID``: opens the store, takes the lease of
``default/AGENT_ID`` for one second as owner ``a``, then, on one of the store's
pooled connections (so with the adapter's own server settings), begins a
transaction, locks the lease row ``FOR SHARE`` exactly as a fenced
``put_snapshot`` does, prints ``locked`` and SIGSTOPs itself: a worker paused
between two statements of a transaction, idle in transaction on the server.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from durably.adapters.postgres import PostgresStore
from durably.storage import StreamId


async def main(url: str, agent_id: str) -> None:
    stream = StreamId("default", agent_id)
    async with PostgresStore(url) as store:
        lease = await store.acquire_lease(stream, "a", 1.0)
        assert lease is not None
        async with store._connection() as conn, conn.transaction():
            token = await conn.fetchval(store._sql["lease_token_for_share"], "default", agent_id, lease.token)
            assert token == lease.token
            print("locked", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
