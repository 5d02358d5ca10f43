"""The in-memory adapter: ``memory://name``. For tests and examples, not for durability.

Stores with the same name in one process share their data, so closing and
reopening ``memory://x`` behaves like reopening a database. ``memory://``
without a name is private to its instance.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from durably.storage.base import StoreBase
from durably.storage.errors import BlobNotFoundError, ConflictError, InvalidRequestError, UnsafeCompactionError
from durably.storage.spi import CAP_BLOBS, AppendRequest, StoredRecord, StoredSnapshot, StreamId, check_append


@dataclass
class _Stream:
    last_seq: int = 0
    records: dict[int, bytes] = field(default_factory=dict)
    snapshots: dict[int, bytes] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)


_shared: dict[str, dict[StreamId, _Stream]] = {}


class MemoryStore(StoreBase):
    """A ``Store`` held in a dict. ``url``: ``memory://`` or ``memory://name`` (shared by name)."""

    capabilities = frozenset({CAP_BLOBS})

    def __init__(self, url: str = "memory://") -> None:
        super().__init__()
        name = urlsplit(url).netloc
        self._streams: dict[StreamId, _Stream] = _shared.setdefault(name, {}) if name else {}

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        self._check_open()
        for request in requests:
            check_append(request)
        results: list[int | Exception] = []
        for request in requests:
            stream = self._streams.get(request.stream)
            actual = stream.last_seq if stream else 0
            if actual != request.expected_seq:
                results.append(ConflictError(request.stream, request.expected_seq, actual))
                continue
            stream = stream or self._streams.setdefault(request.stream, _Stream())
            for offset, data in enumerate(request.records, start=1):
                stream.records[actual + offset] = data
            stream.last_seq = actual + len(request.records)
            results.append(stream.last_seq)
        return results

    async def last_seq(self, stream: StreamId) -> int:
        self._check_open()
        found = self._streams.get(stream)
        return found.last_seq if found else 0

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return
        for seq in sorted(s for s in list(found.records) if s > after_seq):
            data = found.records.get(seq)
            if data is not None:
                yield StoredRecord(seq, data)

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes) -> None:
        self._check_open()
        found = self._streams.get(stream)
        if seq < 1 or found is None or seq > found.last_seq:
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        found.snapshots[seq] = bytes(data)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return None
        seqs = [s for s in found.snapshots if at_or_before is None or s <= at_or_before]
        if not seqs:
            return None
        best = max(seqs)
        return StoredSnapshot(best, found.snapshots[best])

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        self._check_open()
        found = self._streams.get(stream)
        if found is None or not found.snapshots:
            return
        latest = max(found.snapshots)
        for seq in [s for s in found.snapshots if s < before_seq and s != latest]:
            del found.snapshots[seq]

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        self._check_open()
        found = self._streams.get(stream)
        if found is None:
            return
        if not any(s >= through_seq for s in found.snapshots):
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
        for seq in [s for s in found.records if s <= through_seq]:
            del found.records[seq]

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        self._check_open()
        for stream in sorted(s for s in self._streams if s.namespace == namespace and s.agent_id.startswith(prefix)):
            yield stream

    async def delete_stream(self, stream: StreamId) -> None:
        self._check_open()
        self._streams.pop(stream, None)

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        self._check_open()
        digest = hashlib.sha256(data).hexdigest()
        self._streams.setdefault(stream, _Stream()).blobs[digest] = bytes(data)
        return digest

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        self._check_open()
        found = self._streams.get(stream)
        if found is None or digest not in found.blobs:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        return found.blobs[digest]
