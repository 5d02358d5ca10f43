"""Adapters with one promise broken on purpose each, for the kit's meta-test.

They live in a module of their own so that the kit's child processes (peers,
the SIGKILLed writer) can import them by name, like any adapter class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from durably.adapters.filesystem import FileSystemStore
from durably.adapters.memory import MemoryStore
from durably.storage._errors import ConflictError, StoreUnavailableError
from durably.storage._spi import (
    CAP_BLOBS,
    CAP_LEASES,
    AppendRequest,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_append,
    check_fence,
)


class ClaimsMultiProcess(MemoryStore):
    """Keeps its data in this process's memory, yet does not declare ``CAP_SINGLE_PROCESS``."""

    capabilities = frozenset({CAP_BLOBS, CAP_LEASES})


class WritesBehind(FileSystemStore):
    """Acknowledges an append at once and writes it at the next call (a write-behind cache)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._pending: list[AppendRequest] = []

    async def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for request in pending:
            await super().append_batch([request])

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        await self._flush()
        results: list[int | Exception] = []
        for request in requests:
            actual = await super().last_seq(request.stream)
            if actual != request.expected_seq:
                results.append(ConflictError(request.stream, request.expected_seq, actual))
                continue
            self._pending.append(request)
            results.append(request.expected_seq + len(request.records))
        return results

    async def last_seq(self, stream: StreamId) -> int:
        await self._flush()
        return await super().last_seq(stream)

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        await self._flush()
        async for record in super().read(stream, after_seq, page_size=page_size):
            yield record

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        await self._flush()
        await super().put_snapshot(stream, seq, data, fence=fence)

    async def close(self) -> None:
        if self._is_open:
            await self._flush()
        await super().close()


#: Everything ``KeepsPurgedBytes`` ever stored, per store name: its "file".
journal_files: dict[str, bytearray] = {}


class KeepsPurgedBytes(MemoryStore):
    """An append-only "file" of every value written, never scrubbed by ``delete_stream``."""

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        self.file = journal_files.setdefault(url, bytearray())

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        for request in requests:
            for data in request.records:
                self.file += data
        return await super().append_batch(requests)

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        await super().put_snapshot(stream, seq, data, fence=fence)
        self.file += data


class RestartsTokensAfterPurge(MemoryStore):
    """Its ``delete_stream`` forgets the lease's token, so the next lease starts at 1 again."""

    async def delete_stream(self, stream: StreamId) -> None:
        await super().delete_stream(stream)
        self._leases.pop(stream, None)


class IgnoresTheFence(MemoryStore):
    """Declares leases but treats every fencing token as current: leases only advisory."""

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        for request in requests:
            check_append(request)
        return await super().append_batch([replace(request, fence=None) for request in requests])

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        check_fence(fence)
        await super().put_snapshot(stream, seq, data)


class LoadsWholeStream(MemoryStore):
    """Ignores ``page_size``, copies the whole rest of the stream, then yields it."""

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        everything = [StoredRecord(r.seq, bytes(memoryview(r.data))) async for r in super().read(stream, after_seq)]
        for record in everything:
            yield record


#: Names of the ``GoesDown`` stores that are unreachable now.
down: set[str] = set()


class GoesDown(MemoryStore):
    """A memory store its test can make unreachable (``down``); it then raises ``StoreUnavailableError``."""

    outage_error: type[Exception] = StoreUnavailableError

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        self.url = url

    def _check_open(self) -> None:
        super()._check_open()
        if self.url in down:
            raise self.outage_error(f"{self.url} is unreachable")


class RaisesRawErrors(GoesDown):
    """During an outage the backend's own exception escapes, not ``StoreUnavailableError``."""

    outage_error = ConnectionRefusedError


class ScansTheStream(MemoryStore):
    """Tail reads and snapshot lookups walk the whole stream (a query without an index)."""

    def _scan(self, stream: StreamId) -> list[StoredRecord]:
        found = self._streams.get(stream)
        return [StoredRecord(seq, found.records[seq]) for seq in sorted(found.records)] if found else []

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        self._check_open()
        for record in self._scan(stream):
            if record.seq > after_seq:
                yield record

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        self._scan(stream)  # what a backend without an index on the snapshots' seq pays
        return await super().get_snapshot(stream, at_or_before)
