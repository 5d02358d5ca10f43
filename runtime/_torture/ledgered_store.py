"""A ``Store`` wrapper for the worker under torture: logs acknowledgements, dies at journal boundaries.

Everything goes to the wrapped store unchanged. After an append is
acknowledged, and before the runtime hears of it, each record's SHA-256 goes
to the acknowledgement ledger (fsynced): the judge later requires every one of
them stored byte-identical. ``hit(boundary)`` is called at the journal's
boundaries (before an append, after its acknowledgement, around a snapshot,
before compaction); the worker SIGKILLs itself at the chosen occurrence.
Each acknowledgement also names the fencing token the append carried and the
process that made it, and with a ``grants`` ledger every lease this process was
granted (a new token, not a renewal) and released goes there too: the
activations the fleet judge tells apart.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager

import anyio

from durably.errors import ArgumentTypeError
from durably.storage._spi import (
    AppendRequest,
    BlobStore,
    ChangeStore,
    ChangeSubscription,
    IndexedStream,
    IndexEntry,
    IndexStore,
    Lease,
    LeaseStore,
    Store,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    supports_blob_delete,
    supports_blobs,
    supports_changes,
    supports_lease_renew,
    supports_leases,
    supports_status_index,
)
from durably.storage._torture import Ledger


class LedgeredStore:
    """``store`` with acknowledgements logged to ``acks`` (tagged ``worker``) and ``hit`` at boundaries.

    With ``grants`` (a ledger), each lease granted with a token this process had
    not seen for that stream, and each release, is logged there before the
    runtime hears of it.
    """

    def __init__(
        self, store: Store, acks: Ledger, worker: str, hit: Callable[[str], None], grants: Ledger | None = None
    ) -> None:
        self.inner = store
        self.acks = acks
        self.worker = worker
        self.hit = hit
        self.grants = grants
        self.capabilities = store.capabilities
        self._tokens: dict[StreamId, int] = {}

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> LedgeredStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        self.hit("before_append")
        results = await self.inner.append_batch(requests)
        acknowledged = [
            {
                "agent": request.stream.agent_id,
                "first": result - len(request.records) + 1,
                "worker": self.worker,
                "pid": os.getpid(),
                "fence": request.fence,
                "sha": [hashlib.sha256(data).hexdigest() for data in request.records],
            }
            for request, result in zip(requests, results, strict=False)
            if isinstance(result, int)
        ]
        if acknowledged:

            def log_acknowledged() -> None:
                for entry in acknowledged:
                    self.acks.append(entry)

            await anyio.to_thread.run_sync(log_acknowledged)
            self.hit("after_ack")
        return results

    async def append(
        self, stream: StreamId, expected_seq: int, records: Sequence[bytes], *, fence: int | None = None
    ) -> int:
        (result,) = await self.append_batch([AppendRequest(stream, expected_seq, list(records), fence=fence)])
        if isinstance(result, Exception):
            raise result
        return result

    async def last_seq(self, stream: StreamId) -> int:
        return await self.inner.last_seq(stream)

    def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncGenerator[StoredRecord, None]:
        return self.inner.read(stream, after_seq, page_size=page_size)

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        self.hit("before_snapshot")
        await self.inner.put_snapshot(stream, seq, data, fence=fence)
        self.hit("after_snapshot")

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        return await self.inner.get_snapshot(stream, at_or_before)

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        await self.inner.delete_snapshots(stream, before_seq)

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        self.hit("before_compact")
        await self.inner.delete_records(stream, through_seq)

    def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        return self.inner.list_streams(namespace, prefix)

    async def delete_stream(self, stream: StreamId) -> None:
        await self.inner.delete_stream(stream)

    # The optional methods: called only when ``capabilities`` (the wrapped store's) names them.
    def _blobs(self) -> BlobStore:
        if not supports_blobs(self.inner):
            raise ArgumentTypeError(f"{type(self.inner).__name__} does not declare blobs")
        return self.inner

    def _leases(self) -> LeaseStore:
        if not supports_leases(self.inner):
            raise ArgumentTypeError(f"{type(self.inner).__name__} does not declare leases")
        return self.inner

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        return await self._blobs().put_blob(stream, data)

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        return await self._blobs().get_blob(stream, digest)

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        if not supports_blob_delete(self.inner):
            raise ArgumentTypeError(f"{type(self.inner).__name__} does not declare blob-delete")
        await self.inner.delete_blobs(stream, digests)

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        lease = await self._leases().acquire_lease(stream, owner, ttl)
        if lease is not None and self.grants is not None and self._tokens.get(stream) != lease.token:
            self._tokens[stream] = lease.token
            await self._log_grant("grant", stream, owner, lease.token)
        return lease

    async def release_lease(self, lease: Lease) -> None:
        await self._leases().release_lease(lease)
        if self.grants is not None:
            await self._log_grant("release", lease.stream, lease.owner, lease.token)

    async def renew_leases(self, owner: str, ttl: float, leases: Collection[Lease]) -> list[Lease]:
        # A renewal keeps each lease's token: no grant to log.
        if not supports_lease_renew(self.inner):
            raise ArgumentTypeError(f"{type(self.inner).__name__} does not declare lease-renew")
        return await self.inner.renew_leases(owner, ttl, leases)

    async def _log_grant(self, kind: str, stream: StreamId, owner: str, token: int) -> None:
        entry = {
            "kind": kind,
            "agent": stream.agent_id,
            "owner": owner,
            "token": token,
            "worker": self.worker,
            "pid": os.getpid(),
        }
        if self.grants is not None:
            await anyio.to_thread.run_sync(self.grants.append, entry)

    async def get_lease(self, stream: StreamId) -> Lease | None:
        return await self._leases().get_lease(stream)

    # The status index (CAP_STATUS_INDEX), when the store keeps one: forwarded as it is.
    def _index(self) -> IndexStore:
        if not supports_status_index(self.inner):
            raise ArgumentTypeError(f"{type(self.inner).__name__} does not declare a status index")
        return self.inner

    def list_index(
        self, namespace: str, statuses: Collection[str] | None = None, *, page_size: int = 512
    ) -> AsyncIterator[IndexedStream]:
        return self._index().list_index(namespace, statuses, page_size=page_size)

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        return await self._index().get_index(stream)

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        return await self._index().put_index(stream, entry, at_seq)

    # Change notifications (CAP_CHANGES), when the store has them: forwarded as they are.
    def _changes(self) -> ChangeStore:
        if not supports_changes(self.inner):
            raise ArgumentTypeError(f"{type(self.inner).__name__} does not declare change notifications")
        return self.inner

    async def publish_change(self, stream: StreamId) -> None:
        await self._changes().publish_change(stream)

    def subscribe_changes(self, namespace: str) -> AbstractAsyncContextManager[ChangeSubscription]:
        return self._changes().subscribe_changes(namespace)
