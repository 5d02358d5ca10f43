"""The storage SPI: what every backend implements, bytes in and bytes out.

An adapter stores opaque frames (already encoded by ``durably.storage._codec``)
keyed by stream and seq. It never decodes them. The contract below is what the
conformance kit (``durably.storage.conformance``) checks.

Vocabulary, as in event stores (EventStoreDB, Marten, Akka Persistence):

* a **stream** is the append-only journal of one agent, ``StreamId(namespace, agent_id)``;
* each record in it has a gapless **seq** starting at 1;
* an append states the **expected seq** (the last seq the writer saw, 0 for a
  new stream); a mismatch is a ``ConflictError`` and writes nothing;
* a **snapshot** is an encoded state at some seq; restore = latest snapshot at or
  before a seq + the records after it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeGuard, runtime_checkable

from ._errors import InvalidRequestError
from durably.errors import InvalidArgumentError

# The optional capabilities are types: each name below stands for one protocol at the end of
# this module (``OPTIONAL_PROTOCOLS``), and ``supports_leases(store)`` & co. narrow a ``Store``
# to it for a type checker. ``StoreBase`` subclasses derive ``capabilities`` from the protocols
# they subclass (``class MyStore(StoreBase, LeaseStore)``); other adapters list the names.
#: Optional capability ``BlobStore``: ``put_blob`` / ``get_blob`` (content-addressed artifacts).
CAP_BLOBS = "blobs"
#: Optional capability ``LeaseStore``: ``acquire_lease`` / ``release_lease`` (which worker runs a stream now).
CAP_LEASES = "leases"
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


@dataclass(frozen=True, slots=True, order=True)
class StreamId:
    """The address of one agent's journal: a namespace (a tenant or app) and an agent id.

    Both are non-empty strings of at most 200 characters without NUL; the
    namespace also has no '/'. The agent id may hold '/', '..', spaces and any
    Unicode, and ids differing only in case are different: an adapter whose
    backend has key or path rules encodes or hashes them. ``str(stream)`` is
    ``"namespace/agent_id"``.

    Attributes:
        namespace: The tenant or app the stream belongs to; no '/'.
        agent_id: The agent's id within the namespace; any Unicode, '/' included.

    Raises:
        InvalidArgumentError: (a ``ValueError``) when either field is not a
            non-empty ``str`` of at most 200 characters without NUL, or the
            namespace contains '/'.
    """

    namespace: str
    agent_id: str

    def __post_init__(self) -> None:
        for name, value in (("namespace", self.namespace), ("agent_id", self.agent_id)):
            if not isinstance(value, str) or not value or len(value) > 200 or "\x00" in value:
                raise InvalidArgumentError(f"StreamId.{name} must be a non-empty str of at most 200 chars without NUL")
        if "/" in self.namespace:
            raise InvalidArgumentError("StreamId.namespace must not contain '/'")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.agent_id}"


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One journal record as stored: its seq and its encoded frame.

    Attributes:
        seq: The record's position in its stream, from 1, gapless.
        data: The encoded frame, as the adapter was given it (never decoded by it).
    """

    seq: int
    data: bytes


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """One snapshot as stored: the seq it covers and its frame.

    Attributes:
        seq: The last record folded in: the snapshot covers records 1..seq.
        data: The encoded snapshot frame.
    """

    seq: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Lease:
    """A time-bounded claim of one worker on a stream.

    A lease says who *should* run a stream; the expected-seq check on every
    append is what makes a stale owner harmless (Kleppmann, "How to do
    distributed locking", 2016: leases need fencing).

    Attributes:
        stream: The stream the lease is on.
        owner: The worker holding it (a non-empty string the worker chose).
        token: A fencing token: it increases every time the lease passes to a
            new owner (a renewal by the same owner keeps it), and it never
            decreases for a stream id, across releases, expiry, reopen and
            ``delete_stream``.
        expires_at: When the lease ends, in unix seconds of the store's clock.
    """

    stream: StreamId
    owner: str
    token: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """A stream's status index entry (``CAP_STATUS_INDEX``): what scans need without the journal.

    The runtime computes it; an adapter stores it as given and never decodes
    frames to make one.

    Attributes:
        status: The agent's status after record ``seq``: ``running``,
            ``waiting_approval``, ``suspended``, ``finished``, ...
        definition: The agent definition's name.
        seq: The record that last changed the entry.
        updated_at: When that record was written, in unix seconds.
        open_approvals: The ids of approvals with no decision yet; empty by default.
    """

    status: str
    definition: str
    seq: int
    updated_at: float
    open_approvals: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexedStream:
    """One row of ``IndexStore.list_index``: a stream and its status index entry.

    Attributes:
        stream: The stream.
        entry: Its status index entry; None when it has none (the caller must
            read its journal).
    """

    stream: StreamId
    entry: IndexEntry | None


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One stream's part of a group commit: append ``records`` after ``expected_seq``.

    Attributes:
        stream: The stream to append to.
        expected_seq: The last seq the writer saw (0 for a new stream); the
            records get seqs ``expected_seq + 1 ..``.
        records: The encoded frames to append, at least one, each ``bytes``.
        index: The stream's new status index entry, written with the records
            (same transaction, or see ``IndexStore`` for what a store without
            transactions may lag by) when the request succeeds, and not at all
            when it conflicts; None (the default) leaves the entry as it is.
            Stores without ``CAP_STATUS_INDEX`` ignore it.
    """

    stream: StreamId
    expected_seq: int
    records: Sequence[bytes]
    index: IndexEntry | None = None


#: The highest seq a store must hold: a signed 64-bit integer, what SQLite and PostgreSQL columns take.
MAX_SEQ = 2**63 - 1


def check_append(request: AppendRequest) -> None:
    """Reject a malformed append before any I/O (call it first in ``append_batch``).

    Adapters call this; it keeps the checks in one place.

    Args:
        request: One request of the batch.

    Raises:
        InvalidRequestError: For a stream that is not a ``StreamId``, an expected seq
            that is not an int in 0..2**63-1 (a bool is not), an empty batch, a
            record that is not ``bytes`` or an index entry that is not an ``IndexEntry``.
    """
    if not isinstance(request.stream, StreamId):
        raise InvalidRequestError(f"an append's stream must be a StreamId, got {type(request.stream).__name__}")
    seq = request.expected_seq
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise InvalidRequestError(f"expected_seq must be an int in 0..2**63-1, got {seq!r}")
    if not request.records:
        raise InvalidRequestError("an append needs at least one record")
    for data in request.records:
        if not isinstance(data, bytes):
            raise InvalidRequestError(f"records must be bytes, got {type(data).__name__}")
    if request.index is not None and not isinstance(request.index, IndexEntry):
        raise InvalidRequestError(f"an index entry must be an IndexEntry, got {type(request.index).__name__}")


def check_blob(stream: object, data: object) -> None:
    """Reject a malformed ``put_blob`` before any I/O.

    Adapters call this, as ``check_append``.

    Args:
        stream: The ``stream`` argument of ``put_blob``; must be a ``StreamId``.
        data: The ``data`` argument; must be ``bytes`` (a ``bytearray`` or
            ``memoryview`` could change after the digest is taken).

    Raises:
        InvalidRequestError: Unless ``stream`` is a ``StreamId`` and ``data`` is ``bytes``.
    """
    if not isinstance(stream, StreamId):
        raise InvalidRequestError(f"a blob's stream must be a StreamId, got {type(stream).__name__}")
    if not isinstance(data, bytes):
        raise InvalidRequestError(f"blob data must be bytes, got {type(data).__name__}")


def check_lease(owner: object, ttl: object) -> None:
    """Reject a malformed ``acquire_lease`` before any I/O.

    Adapters call this, as ``check_append``.

    Args:
        owner: The ``owner`` argument of ``acquire_lease``; must be a non-empty ``str``.
        ttl: The ``ttl`` argument, in seconds; must be a finite number > 0 (a
            NaN or infinite ttl would make a lease that never or always
            expires; a ``bool`` is refused).

    Raises:
        InvalidRequestError: Unless ``owner`` is a non-empty ``str`` and ``ttl``
            a finite number of seconds > 0.
    """
    if not isinstance(owner, str) or not owner:
        raise InvalidRequestError(f"a lease owner must be a non-empty str, got {owner!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
        raise InvalidRequestError(f"a lease ttl must be a finite number of seconds > 0, got {ttl!r}")


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

    async def __aenter__(self) -> "Store": ...

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
                or a ``ConflictError`` (returned, not raised) when its expected seq
                was stale.

        Raises:
            StoreUnavailableError: When the backend fails; then nothing of the
                call may be assumed written or unwritten beyond what a re-read shows.
            InvalidRequestError: For a malformed request (``check_append``), before any I/O.
        """

    async def append(self, stream: StreamId, expected_seq: int, records: Sequence[bytes]) -> int:
        """Append ``records`` atomically after ``expected_seq``; return the new last seq.

        The records get seqs ``expected_seq+1 ..``.

        Args:
            stream: The stream to append to.
            expected_seq: The last seq the writer saw; 0 for a new stream.
            records: The encoded frames, at least one.

        Returns:
            The stream's new last seq.

        Raises:
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

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes) -> None:
        """Store a snapshot covering records 1..``seq``. Overwrites one at the same seq.

        Args:
            stream: The stream the snapshot belongs to.
            seq: The last record folded into the snapshot.
            data: The encoded snapshot frame.

        Raises:
            InvalidRequestError: When ``seq`` < 1 or > ``last_seq(stream)``.
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



@runtime_checkable
class BlobStore(Store, Protocol):
    """A ``Store`` that also declares ``CAP_BLOBS``: content-addressed artifacts per stream.

    Kept apart from ``Store`` so ``isinstance(store, Store)`` holds for an adapter
    without the optional capability.
    """

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """Store bytes (``CAP_BLOBS``); return their SHA-256 hex digest.

        Args:
            stream: The stream the blob belongs to; it is purged with it.
            data: The blob's bytes.

        Returns:
            The SHA-256 hex digest of ``data`` (64 lowercase hex characters).

        Raises:
            InvalidRequestError: When ``data`` is not ``bytes`` (``check_blob``), before any I/O.
        """

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        """The blob's bytes (``CAP_BLOBS``).

        Args:
            stream: The stream the blob belongs to.
            digest: The SHA-256 hex digest ``put_blob`` returned.

        Returns:
            The blob's bytes.

        Raises:
            BlobNotFoundError: When the stream has no blob with that digest, also
                for a digest that is not 64 lowercase hex characters (it names
                no blob; it never reaches a path or key).
        """


@runtime_checkable
class LeaseStore(Store, Protocol):
    """A ``Store`` that also declares ``CAP_LEASES``: one live worker per stream.

    Used by ``Runtime.resume_all``/``serve`` so that several workers sharing a
    store resume only agents nobody runs, and by operator commands to know an
    agent is live elsewhere. Leases are advisory; appends stay fenced by their
    expected seq whatever the leases say.
    """

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take, or renew, the lease of ``stream`` for ``owner`` for ``ttl`` seconds.

        Taking it when free, released or expired (also by its former owner)
        gives a token greater than any before for this stream id, also across
        reopen and ``delete_stream``; a renewal of an unexpired lease by its
        owner keeps the token and moves ``expires_at`` (unix seconds: now +
        ``ttl``). Atomic: of workers racing for a free lease, also in other
        processes, exactly one gets it. A lease never makes the stream appear
        in ``list_streams`` nor changes ``last_seq``.

        Args:
            stream: The stream to lease.
            owner: Who takes it: a non-empty string naming the worker.
            ttl: How long the lease lasts from now, in seconds (finite, > 0).

        Returns:
            The lease held now; None when another owner holds one that has not
                expired (nothing changed).

        Raises:
            InvalidRequestError: For ``ttl`` <= 0 or an empty owner (``check_lease``).
        """

    async def release_lease(self, lease: Lease) -> None:
        """Give the lease up if ``lease.owner`` still holds it with ``lease.token``; otherwise no-op.

        Args:
            lease: The lease as ``acquire_lease`` returned it.
        """

    async def get_lease(self, stream: StreamId) -> Lease | None:
        """The unexpired lease of ``stream``, or None.

        Args:
            stream: The stream to look at.

        Returns:
            The lease, or None when nobody holds an unexpired one.
        """


class ChangeSubscription(Protocol):
    """What ``ChangeStore.subscribe_changes`` yields: the streams of one namespace said to have changed."""

    async def wait(self) -> frozenset[StreamId] | None:
        """Wait for the next notifications; return the streams named since the last call.

        Never raises for an outage: the feed reconnects by itself.

        Returns:
            The streams said to have changed since the last call; None means
                notifications may have been missed (the feed was down and is back):
                whatever waits on it must look at every stream once, as it would on a poll.
        """


@runtime_checkable
class ChangeStore(Store, Protocol):
    """A ``Store`` that also declares ``CAP_CHANGES``: wake-ups across processes.

    A writer that changed a stream in a way another process waits for (a
    command appended to a parked agent) calls ``publish_change``; every
    subscriber of that namespace, in any process, is told within moments
    instead of at its next poll. Notifications are hints, at most once: a
    subscriber must still poll now and then (``Runtime.serve`` does), since a
    publisher may die between its append and its publish.
    """

    async def publish_change(self, stream: StreamId) -> None:
        """Notify the subscribers of ``stream.namespace`` that ``stream`` changed.

        Args:
            stream: The stream that changed.

        Raises:
            StoreUnavailableError: When the notification could not be sent.
        """

    def subscribe_changes(self, namespace: str) -> AbstractAsyncContextManager[ChangeSubscription]:
        """Listen for changes in one namespace: ``async with store.subscribe_changes(ns) as changes:``.

        ``await changes.wait()`` inside the block. The subscription listens for
        its whole block and stops when the block ends.

        Args:
            namespace: The namespace whose changes are wanted.

        Returns:
            An async context manager whose value is the ``ChangeSubscription``.
        """


@runtime_checkable
class IndexStore(Store, Protocol):
    """A ``Store`` that also declares ``CAP_STATUS_INDEX``: one status entry per stream.

    The journal stays the truth; the index is what lets ``resume_all``,
    ``serve`` and ``durably agents --status S`` touch only the streams that
    matter instead of restoring every stream ever run. An entry is written by
    ``append_batch`` from ``AppendRequest.index``: in the same transaction as
    the records in a store that has transactions. A store that has none (S3,
    a filesystem) may lag, but only in the safe direction: an entry that
    makes a stream *runnable* (status ``running``) is written before the
    records, one that makes it not runnable after them, so a crash in between
    leaves an entry that claims a stream runnable when it is not (it costs one
    restore, which corrects it), never the reverse. ``delete_stream`` removes
    the entry; ``delete_records`` keeps it.
    """

    def list_index(self, namespace: str, statuses: Collection[str] | None = None, *,
                   page_size: int = 512) -> AsyncIterator[IndexedStream]:
        """Yield the streams of ``namespace`` whose entry's status is in ``statuses`` (None: every status).

        Costs what it yields, not the namespace's size (an index on status).

        Args:
            namespace: The namespace to list; a stream of another namespace is never yielded.
            statuses: The statuses wanted; None (the default) for every status.
            page_size: Rows fetched from the backend at a time.

        Yields:
            One ``IndexedStream`` per matching stream, in no particular order.
                Also, with ``entry`` None, every stream with records but no entry
                (written before the index existed, or by a writer that does not
                keep it), whatever ``statuses`` says: the caller must read those
                journals, so no missing entry ever hides a stream. Never a stream
                that holds only blobs.
        """

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """The stream's status index entry, or None.

        Args:
            stream: The stream to look at.

        Returns:
            Its entry; None for an unknown stream or one without an entry.
        """

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """Set (None: remove) the stream's entry if its last seq is still ``at_seq``; True if written.

        For an entry computed from a journal read up to ``at_seq`` (a rebuild,
        a restore that found the entry stale): a record appended meanwhile
        makes it a no-op, so it never overwrites a newer entry.

        Args:
            stream: The stream whose entry to set.
            entry: The new entry; None removes it.
            at_seq: The last seq of the journal the entry was computed from.

        Returns:
            True if written; False when the stream's last seq is no longer
                ``at_seq``, or the stream is unknown (``at_seq`` 0 included: an
                unknown stream is never given an entry).
        """


#: Each optional capability's name in ``Store.capabilities`` and the protocol a store declaring it
#: implements (``type``, not ``type[Store]``: a type checker takes only concrete classes there).
OPTIONAL_PROTOCOLS: dict[str, type] = {CAP_BLOBS: BlobStore, CAP_LEASES: LeaseStore, CAP_CHANGES: ChangeStore,
                                        CAP_STATUS_INDEX: IndexStore}


def declared_capabilities(cls: type) -> frozenset[str]:
    """The names of the optional protocols that ``cls`` subclasses (``class S(StoreBase, LeaseStore)``).

    Nominal, not structural: a wrapper with every method of ``LeaseStore`` that
    forwards to a store without leases does not declare ``CAP_LEASES`` by that.

    Returns:
        The ``CAP_*`` names of the ``OPTIONAL_PROTOCOLS`` in the MRO of ``cls``.
    """
    return frozenset(name for name, protocol in OPTIONAL_PROTOCOLS.items() if protocol in cls.__mro__)


def supports_blobs(store: Store) -> TypeGuard[BlobStore]:
    """Whether ``store`` declares ``CAP_BLOBS``; if so a type checker sees it as a ``BlobStore``.

    Args:
        store: Any store.

    Returns:
        True when ``CAP_BLOBS`` is in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_BLOBS in store.capabilities


def supports_leases(store: Store) -> TypeGuard[LeaseStore]:
    """Whether ``store`` declares ``CAP_LEASES``; if so a type checker sees it as a ``LeaseStore``.

    Args:
        store: Any store.

    Returns:
        True when ``CAP_LEASES`` is in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_LEASES in store.capabilities


def supports_changes(store: Store) -> TypeGuard[ChangeStore]:
    """Whether ``store`` declares ``CAP_CHANGES``; if so a type checker sees it as a ``ChangeStore``.

    Args:
        store: Any store.

    Returns:
        True when ``CAP_CHANGES`` is in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_CHANGES in store.capabilities


def supports_status_index(store: Store) -> TypeGuard[IndexStore]:
    """Whether ``store`` declares ``CAP_STATUS_INDEX``; if so a type checker sees it as an ``IndexStore``.

    Args:
        store: Any store.

    Returns:
        True when ``CAP_STATUS_INDEX`` is in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_STATUS_INDEX in store.capabilities
