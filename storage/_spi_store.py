"""The ``Store`` protocol: the methods every backend implements, and the capability names.

Part of the storage SPI (``durably.storage._spi``, which re-exports every name);
the optional capabilities' protocols are in ``durably.storage._spi_capabilities``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from ._spi_values import AppendRequest, StoredRecord, StoredSnapshot, StreamId

# The optional capabilities are types: each name below stands for one protocol of
# ``durably.storage._spi_capabilities`` (``OPTIONAL_PROTOCOLS``), and ``supports_leases(store)`` & co. narrow a ``Store``
# to it for a type checker. ``StoreBase`` subclasses derive ``capabilities`` from the protocols
# they subclass (``class MyStore(StoreBase, LeaseStore)``); other adapters list the names.
#: Optional capability ``BlobStore``: ``put_blob`` / ``get_blob`` (content-addressed artifacts).
CAP_BLOBS = "blobs"
#: Optional capability ``BlobDeleteStore``: ``delete_blobs`` (drop blobs nothing names any more).
CAP_BLOB_DELETE = "blob-delete"
#: Optional capability ``LeaseStore``: ``acquire_lease`` / ``release_lease`` (which worker runs a stream now).
CAP_LEASES = "leases"
#: Optional capability ``LeaseRenewStore``: ``renew_leases`` (renew many of one owner's leases in one call).
CAP_LEASE_RENEW = "lease-renew"
#: A declared limitation: one OS process at a time may use a location (``memory://``, an
#: embedded database another process cannot open while this one writes). Operator
#: commands from another process, several workers and ``durably torture`` need a
#: store without it; the conformance kit skips its cross-process checks for it.
CAP_SINGLE_PROCESS = "single-process"
#: Optional capability ``ChangeStore``: ``publish_change`` / ``subscribe_changes`` (wake other processes up).
CAP_CHANGES = "changes"
#: Optional capability: a status index per stream (``IndexStore``): ``AppendRequest.index`` is
#: written with its records, ``list_index`` answers "which streams have status S" without
#: reading journals. Without it the runtime scans and restores every stream, as before.
CAP_STATUS_INDEX = "status-index"


@runtime_checkable
class Store(Protocol):
    """An async store of streams, snapshots and (optionally) blobs.

    Lifecycle: build it from a URL with ``durably.storage.open_store`` (no I/O),
    then ``async with store:`` (or ``await store.open()`` ... ``await store.close()``).
    The class takes the URL as its only positional argument; the URL's form after
    the scheme is the adapter's to define and document (durably's own:
    ``sqlite:///relative.db`` and ``sqlite:////absolute.db`` as SQLAlchemy,
    ``file:///absolute/dir`` as RFC 8089, ``s3://bucket/prefix?option=value``).
    Any method called outside the open window raises ``StoreClosedError``.
    Closing and reopening the same location keeps everything acknowledged, and
    so does a SIGKILL of the process: nothing is acknowledged from a cache.
    Unless the store declares ``CAP_SINGLE_PROCESS``, any number of OS processes
    may open the same location at once and see one store.

    Errors common to every method: ``StoreUnavailableError`` when the backend
    cannot be reached, times out or is full (never the backend's own exception
    types), after which everything acknowledged before is still there;
    ``InvalidRequestError`` for a malformed call (an empty batch, a negative
    expected seq, a record that is not ``bytes``, a blob that is not ``bytes``, a bad
    lease argument), raised before any I/O by ``check_append`` / ``check_blob`` /
    ``check_lease``.
    """

    #: Names of the optional capabilities this adapter supports (see ``CAP_*``).
    capabilities: frozenset[str]

    async def open(self) -> None:
        """Connect and create what the backend needs (tables, buckets). Idempotent."""

    async def close(self) -> None:
        """Release connections. Idempotent. Pending appends finish or fail first."""

    async def __aenter__(self) -> Store: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches: a group commit.

        Each request is atomic: all of its records or none. Every successful
        request is durable when this returns: that is the acknowledgement.

        Args:
            requests: Requests for distinct or repeated streams (a repeated
                stream's later request sees the earlier one's records).

        Returns:
            One entry per request, in order: the new last seq (int) on success,
                a ``FencedError`` (returned, not raised) when its ``fence`` is set
                and no longer the stream's lease (stores with ``CAP_LEASES``), or
                a ``ConflictError`` (returned) when its expected seq was stale.

        Raises:
            StoreUnavailableError: When the backend fails; then nothing of the
                call may be assumed written or unwritten beyond what a re-read shows.
            InvalidRequestError: For a malformed request (``check_append``), before any I/O.
        """

    async def append(
        self, stream: StreamId, expected_seq: int, records: Sequence[bytes], *, fence: int | None = None
    ) -> int:
        """Append ``records`` atomically after ``expected_seq``; return the new last seq.

        The records get seqs ``expected_seq+1 ..``.

        Args:
            stream: The stream to append to.
            expected_seq: The last seq the writer saw; 0 for a new stream.
            records: The encoded frames, at least one.
            fence: The writer's lease token, checked as ``AppendRequest.fence``; None: no check.

        Returns:
            The stream's new last seq.

        Raises:
            FencedError: When ``fence`` is set and is no longer the stream's lease (nothing written).
            ConflictError: When the stream's last seq is not ``expected_seq``
                (nothing written).
        """

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to the stream; 0 for an unknown stream.

        Args:
            stream: The stream to look at.

        Returns:
            The last seq. It never decreases, also after ``delete_records``
                removed every record.
        """

    def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncGenerator[StoredRecord, None]:
        """Yield the stored records with seq > ``after_seq`` in seq order.

        Memory is bounded by the page, whatever the stream's length, and a read
        of the tail of a long stream costs about what it costs on a short one.
        An async generator (``async def`` with ``yield``): readers that stop early
        close it (``aclose``) so its page or cursor is released at once.

        Args:
            stream: The stream to read.
            after_seq: Yield only records with a greater seq; 0 (the default) reads from the start.
            page_size: Records fetched from the backend at a time.

        Yields:
            The stored records, in seq order. An unknown stream yields nothing;
                records deleted by compaction are not yielded.
        """

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        """Store a snapshot covering records 1..``seq``. Overwrites one at the same seq.

        Args:
            stream: The stream the snapshot belongs to.
            seq: The last record folded into the snapshot.
            data: The encoded snapshot frame.
            fence: The writer's lease token, checked as ``AppendRequest.fence``
                (atomically with the write), so a stale holder's snapshot of a
                purged and restarted stream (an older incarnation at the same seq)
                is never stored; None: no check.

        Raises:
            FencedError: When ``fence`` is set and is no longer the stream's lease (nothing written).
            InvalidRequestError: When ``seq`` < 1 or > ``last_seq(stream)``, or ``fence`` is malformed (``check_fence``).
        """

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        """The snapshot with the highest seq <= ``at_or_before`` (None: the latest), or None.

        Found without scanning the stream's records: as fast on a long stream as on a short one.

        Args:
            stream: The stream to look at.
            at_or_before: The highest seq the snapshot may cover; None (the default) for the latest.

        Returns:
            That snapshot, or None when there is none.
        """

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """Delete snapshots with seq < ``before_seq``; the latest snapshot is always kept.

        Args:
            stream: The stream whose snapshots go.
            before_seq: Snapshots with a smaller seq are deleted (except the latest).
        """

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """Compaction: delete records with seq <= ``through_seq``.

        ``last_seq`` is unchanged. An unknown stream has nothing to delete: no-op.

        Args:
            stream: The stream to compact.
            through_seq: The last seq to delete.

        Raises:
            UnsafeCompactionError: Unless a snapshot exists at a seq >=
                ``through_seq`` (restore still needs everything after the latest snapshot).
        """

    def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        """Yield the streams of ``namespace`` whose agent id starts with ``prefix``, sorted by agent id.

        Args:
            namespace: The namespace to list; streams of other namespaces are never yielded.
            prefix: The start of the agent ids wanted; "" (the default) for all.

        Yields:
            The matching streams, sorted by agent id.
        """

    async def delete_stream(self, stream: StreamId) -> None:
        """Purge: delete the stream's records, snapshots, blobs and last seq, and end its lease.

        Afterwards the stream is unknown (last seq 0) and may be started anew;
        nothing of its data stays readable in the backend's files or objects.
        The lease's fencing token is the one thing kept (not its owner), so the
        next lease of the stream id gets a greater token.

        Args:
            stream: The stream to purge; an unknown stream is not an error.
        """
