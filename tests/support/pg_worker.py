"""A worker process for the multi-process PostgreSQL takeover tests: ``s3_worker.py``'s
agents, boundaries and output, on a ``postgresql://`` store.

Everything is ``s3_worker``'s (the agents whose tool appends to ``--effects``, the
acknowledgement log, ``--crash NAME --at K``, ``--hold``), with the adapter's own
boundaries hooked on ``PostgresStore`` instead of ``S3Store``:

  put_landed   a group commit's transaction committed in PostgreSQL, its append
               not acknowledged to the runtime yet
  snapshot     a snapshot write is about to start (in the background writer)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

import s3_worker as base

from durably.adapters.postgres import PostgresStore


def install_postgres_hooks() -> None:
    original_append_once = PostgresStore._append_once

    async def append_once(self, sql, args, indexed=None):
        results = await original_append_once(self, sql, args, indexed)
        base.hit("put_landed")
        return results

    PostgresStore._append_once = append_once

    original_put_snapshot = PostgresStore.put_snapshot

    async def put_snapshot(self, stream, seq, data, *, fence=None):
        base.hit("snapshot")
        await original_put_snapshot(self, stream, seq, data, fence=fence)

    PostgresStore.put_snapshot = put_snapshot


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True, help="postgresql://...")
    parser.add_argument("--effects", required=True)
    parser.add_argument("--acks", required=True)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--snapshot-every", type=int, default=4)
    parser.add_argument("--crash")
    parser.add_argument("--at", type=int, default=1)
    parser.add_argument("--hold", choices=["model", "tool"])
    parser.add_argument("--hold-at", type=int, default=1)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    base.args = parser.parse_args()
    base.install_hooks()  # the runtime's boundaries and the acknowledgement log (its S3 hooks stay unused)
    install_postgres_hooks()
    anyio.run(base.main)
