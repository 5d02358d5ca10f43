"""Every built-in adapter runs the public conformance kit.

The S3 adapter runs it in tests/adapters/test_s3_adapter.py (``TestS3Conformance``), next to
the local S3 server fixture it needs; running it here as well would only double the time.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from contextlib import asynccontextmanager

import anyio

from durably.adapters.filesystem import FileSystemStore
from durably.adapters.memory import MemoryStore
from durably.storage import StreamId
from durably.storage.conformance import StoreConformance, files_bytes


class TestMemoryStore(StoreConformance):
    cannot_fail = "it keeps everything in this process's memory: no connection, file or server to lose"

    def make_store(self, tmp_path):
        # memory://name shares data per name in this process: one name per test location.
        return MemoryStore(f"memory://{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]}")


class TestFileSystemStore(StoreConformance):
    def store_url(self, tmp_path):
        return (tmp_path / "store").as_uri()

    async def stored_bytes(self, tmp_path):
        return files_bytes(tmp_path / "store")

    @asynccontextmanager
    async def outage(self, tmp_path):
        # The directory is taken away and a plain file put in its place: every path through it fails.
        root = tmp_path / "store"
        away = tmp_path / "store-away"
        os.rename(root, away)
        root.write_bytes(b"not a directory")
        try:
            yield
        finally:
            root.unlink()
            os.rename(away, root)


class TestSQLiteStore(StoreConformance):
    def store_url(self, tmp_path):
        # A busy timeout of 1 s (default 10 s) keeps the outage check short; racing
        # transactions last milliseconds, far below it.
        return f"sqlite:///{tmp_path / 'store.db'}?busy_timeout=1000"

    async def stored_bytes(self, tmp_path):
        return files_bytes(*(tmp_path / name for name in ("store.db", "store.db-wal", "store.db-shm")))

    @asynccontextmanager
    async def outage(self, tmp_path):
        # Another connection holds the write lock past the busy timeout: SQLite's outage.
        blocker = sqlite3.connect(tmp_path / "store.db", isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()


CHILD = """
import sys, anyio
from durably.adapters.filesystem import FileSystemStore
from durably.storage import ConflictError, StreamId

async def main(url, name, batches):
    stream = StreamId("xproc", "shared")
    async with FileSystemStore(url) as store:
        for batch in range(int(batches)):
            records = [f"{name}.{batch}.{part}".encode() for part in range(3)]
            expected = await store.last_seq(stream)
            while True:
                try:
                    await store.append(stream, expected, records)
                    break
                except ConflictError as conflict:
                    expected = conflict.actual_seq if conflict.actual_seq is not None else await store.last_seq(stream)

anyio.run(main, *sys.argv[1:])
"""


async def test_filesystem_appends_race_across_processes(tmp_path) -> None:
    """Processes, not tasks, racing on one directory: the exclusive create still picks one winner per seq."""
    processes, batches = 4, 15
    async with anyio.create_task_group() as group:
        for n in range(processes):
            group.start_soon(anyio.run_process, [sys.executable, "-c", CHILD, tmp_path.as_uri(), f"p{n}", str(batches)])
    async with FileSystemStore(tmp_path.as_uri()) as store:
        records = [record async for record in store.read(StreamId("xproc", "shared"))]
    total = processes * batches * 3
    assert [record.seq for record in records] == list(range(1, total + 1))
    names = [record.data.decode().rsplit(".", 1) for record in records]
    for start in range(0, total, 3):
        owner = {name for name, _ in names[start : start + 3]}
        assert len(owner) == 1 and [part for _, part in names[start : start + 3]] == ["0", "1", "2"], names[
            start : start + 3
        ]
    assert len({name for name, _ in names}) == processes * batches, "every acknowledged batch exactly once"
