"""A durably storage adapter that keeps every stream in one pickle file: ``onefile:///path/to/store.pickle``.

Written from docs/writing-an-adapter.md as a third-party author would. The whole
store lives in memory while open; every change rewrites the file atomically
(temp file, fsync, rename, fsync the directory) before it is acknowledged.
One open instance per file: two would not see each other's changes.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from anyio.to_thread import run_sync

from durably.storage._base import StoreBase
from durably.storage._errors import ConflictError, InvalidRequestError, StoreUnavailableError, UnsafeCompactionError
from durably.storage._spi import CAP_SINGLE_PROCESS, AppendRequest, StoredRecord, StoredSnapshot, StreamId, check_append


def _empty() -> dict:
    return {"last": 0, "records": {}, "snapshots": {}}


class OneFileStore(StoreBase):
    """All streams in one file. ``url``: ``onefile:///abs/path``; raises ``ValueError`` for anything else."""

    # No blobs; and the whole store is held in the memory of the one process that has it open.
    capabilities = frozenset({CAP_SINGLE_PROCESS})

    def __init__(self, url: str) -> None:
        super().__init__()
        parts = urlsplit(url)
        if parts.scheme != "onefile" or not parts.path:
            raise ValueError(f"expected onefile:///path/to/file, got {url!r}")
        self._path = Path(parts.path)
        self._streams: dict[StreamId, dict] = {}
        self._lock = anyio.Lock()  # one change at a time, so each sees the last one's result

    def _load(self) -> dict:
        try:
            return pickle.loads(self._path.read_bytes())
        except FileNotFoundError:
            return {}

    async def _open(self) -> None:
        self._streams = await run_sync(self._load)

    async def _save(self) -> None:
        """Persist everything; the caller's change is acknowledged only after this returns."""
        data = pickle.dumps(self._streams)

        def write() -> None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._path.parent)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, self._path)
            directory = os.open(self._path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

        try:
            await run_sync(write)
        except OSError as error:
            self._streams = await run_sync(self._load)  # back to what is on disk
            raise StoreUnavailableError(f"cannot write {self._path}: {error}") from error

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        self._check_open()
        for request in requests:
            check_append(request)
        async with self._lock:
            results: list[int | Exception] = []
            for request in requests:
                stream = self._streams.get(request.stream, _empty())
                if stream["last"] != request.expected_seq:
                    results.append(ConflictError(request.stream, request.expected_seq, stream["last"]))
                    continue
                for offset, data in enumerate(request.records, start=1):
                    stream["records"][request.expected_seq + offset] = data
                stream["last"] = request.expected_seq + len(request.records)
                self._streams[request.stream] = stream
                results.append(stream["last"])
            if any(isinstance(result, int) for result in results):
                await self._save()
            return results

    async def last_seq(self, stream: StreamId) -> int:
        self._check_open()
        return self._streams.get(stream, _empty())["last"]

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        self._check_open()
        records = self._streams.get(stream, _empty())["records"]
        for seq in sorted(seq for seq in list(records) if seq > after_seq):
            if seq in records:
                yield StoredRecord(seq, records[seq])

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes) -> None:
        self._check_open()
        async with self._lock:
            found = self._streams.get(stream)
            if found is None or not 1 <= seq <= found["last"]:
                raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
            found["snapshots"][seq] = data
            await self._save()

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        self._check_open()
        snapshots = self._streams.get(stream, _empty())["snapshots"]
        seqs = [seq for seq in snapshots if at_or_before is None or seq <= at_or_before]
        return StoredSnapshot(max(seqs), snapshots[max(seqs)]) if seqs else None

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        self._check_open()
        async with self._lock:
            snapshots = self._streams.get(stream, _empty())["snapshots"]
            doomed = [seq for seq in snapshots if seq < before_seq and seq != max(snapshots)]
            for seq in doomed:
                del snapshots[seq]
            if doomed:
                await self._save()

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        self._check_open()
        async with self._lock:
            found = self._streams.get(stream)
            if found is None:
                return  # an unknown stream has nothing to compact
            if not any(seq >= through_seq for seq in found["snapshots"]):
                raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
            for seq in [seq for seq in found["records"] if seq <= through_seq]:
                del found["records"][seq]
            await self._save()  # "last" stays: last_seq never decreases

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        self._check_open()
        for stream in sorted(s for s in self._streams if s.namespace == namespace and s.agent_id.startswith(prefix)):
            yield stream

    async def delete_stream(self, stream: StreamId) -> None:
        self._check_open()
        async with self._lock:
            if self._streams.pop(stream, None) is not None:
                await self._save()
