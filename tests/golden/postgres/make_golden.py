"""Write the golden dump of the PostgreSQL adapter's schema version 1 (``postgres-v1.sql``).

Run once, by the release that introduced the version, from the repository root:
``python tests/golden/postgres/make_golden.py``. It starts a throw-away server
(``tests/support/pg_server.py``), writes the content of ``CONTENT`` through the
adapter, and keeps ``pg_dump --inserts`` of the ``durably`` schema. Later
versions never rewrite the file: the tests restore it and open it with the
current build, which must migrate it forward and read every byte back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent / "support"))

from pg_server import BIN, USER, PostgresTestServer  # noqa: E402

from durably.adapters.postgres import PostgresStore  # noqa: E402
from durably.storage import StreamId  # noqa: E402

#: What the dump holds: two streams, one compacted behind a snapshot, one with a blob.
STREAMS = {
    "agent-a": [b"golden:a:%d" % n for n in range(1, 7)],
    "agent-\u00e9/b": [b"\x00\x01binary\xff", b"golden:b:2"],
}
SNAPSHOT = ("agent-a", 4, b"golden:snapshot:a:4")
COMPACTED_THROUGH = ("agent-a", 3)
BLOB = ("agent-\u00e9/b", b"golden:blob")
NAMESPACE = "golden"


async def write(url: str) -> None:
    async with PostgresStore(url) as store:
        for agent_id, records in STREAMS.items():
            stream = StreamId(NAMESPACE, agent_id)
            await store.append(stream, 0, records[:1])
            await store.append(stream, 1, records[1:])
        await store.put_snapshot(StreamId(NAMESPACE, SNAPSHOT[0]), SNAPSHOT[1], SNAPSHOT[2])
        await store.delete_records(StreamId(NAMESPACE, COMPACTED_THROUGH[0]), COMPACTED_THROUGH[1])
        await store.put_blob(StreamId(NAMESPACE, BLOB[0]), BLOB[1])


def main() -> None:
    server = PostgresTestServer().start()
    try:
        anyio.run(write, server.url("durably"))
        dump = subprocess.run([str(BIN / "pg_dump"), "-h", "127.0.0.1", "-p", str(server.port), "-U", USER,
                               "--schema=durably", "--inserts", "--no-owner", "--no-privileges", "durably"],
                              capture_output=True, text=True, check=True, user=server.os_user, cwd=server.root)
        (HERE / "postgres-v1.sql").write_text(dump.stdout)
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
