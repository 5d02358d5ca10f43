"""The optional capabilities: blobs, leases, change notifications, the status index.

Part of the storage SPI (``durably.storage._spi``, which re-exports every name).
Each is a protocol extending ``Store`` and named by a ``CAP_*`` string in
``Store.capabilities``; ``supports_*`` narrow a ``Store`` to one for a type checker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeGuard, runtime_checkable

from ._spi_store import CAP_BLOB_DELETE, CAP_BLOBS, CAP_CHANGES, CAP_LEASE_RENEW, CAP_LEASES, CAP_STATUS_INDEX, Store
from ._spi_values import IndexedStream, IndexEntry, Lease, StreamId


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
class BlobDeleteStore(BlobStore, Protocol):
    """A ``BlobStore`` that also declares ``CAP_BLOB_DELETE``: blobs can be deleted one by one.

    A capability of its own, not a default: a store written before it keeps its
    blobs until the stream is purged, which loses nothing (the runtime then leaves
    pages no snapshot names in place), while a default that did nothing would let
    the runtime believe bytes were gone that are still stored (e.g. pages sealed
    under a retired key after ``reencrypt``).
    """

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        """Delete the blobs of ``stream`` named by ``digests`` (``CAP_BLOB_DELETE``).

        Idempotent: a digest the stream holds no blob under (never stored, deleted
        already, held only by another stream, or malformed: it names no blob and
        never reaches a path or key) is skipped, not an error. Other streams' blobs
        are untouched, even with the same digest. When it returns, every named blob
        is gone (``get_blob`` raises ``BlobNotFoundError``); when it raises, any of
        them may be gone or still there, so the caller deletes a blob only once
        nothing it must keep names it.

        Args:
            stream: The stream whose blobs to delete.
            digests: The SHA-256 hex digests ``put_blob`` returned; empty is a no-op.

        Raises:
            InvalidRequestError: When ``stream`` is not a ``StreamId`` or ``digests``
                is a ``str`` or not a collection of ``str`` (``check_blob_digests``), before any I/O.
            StoreUnavailableError: When the store cannot be reached (after the adapter's retries).
        """


@runtime_checkable
class LeaseStore(Store, Protocol):
    """A ``Store`` that also declares ``CAP_LEASES``: one live worker per stream.

    Used by ``Runtime.resume_all``/``serve`` so that several workers sharing a
    store run an agent only under its lease, and by operator commands to know an
    agent is live elsewhere. Leases are enforced, not advisory: a store with this
    capability checks ``AppendRequest.fence`` (and ``put_snapshot``'s ``fence``)
    against the stream's lease in the same atomic step as the expected seq, and
    answers ``FencedError`` for a token that is not the latest grant's or whose
    lease ``delete_stream`` ended. A store that cannot check a fence atomically
    must not declare ``CAP_LEASES``: it is then a single-worker store.
    """

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take, or renew, the lease of ``stream`` for ``owner`` for ``ttl`` seconds.

        Taking it when free, released or expired (also by its former owner)
        gives a token greater than any before for this stream id, also across
        reopen and ``delete_stream`` (a store that commits leases without a fsync,
        as SQLite does, may give again the tokens of grants a power loss undid,
        never one that a durable append was made under); a renewal of an unexpired lease by its
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


@runtime_checkable
class LeaseRenewStore(LeaseStore, Protocol):
    """A ``LeaseStore`` that also declares ``CAP_LEASE_RENEW``: one owner's leases renewed in one call.

    A runtime holding a thousand leases renews them every ``ttl / 3``; one
    ``acquire_lease`` each is a thousand round trips (or transactions) a round,
    queued behind the agents' own writes, and leases lapsed under load. Without
    this capability the runtime renews lease by lease, as before; with it, the
    leases a batch does not renew still go through ``acquire_lease`` one by one,
    which tells a lease another owner holds from one that lapsed.
    """

    async def renew_leases(self, owner: str, ttl: float, leases: Collection[Lease]) -> list[Lease]:
        """Renew, in one atomic step, each of ``leases`` still held by ``owner`` under its token and unexpired.

        Only a renewal, never a grant: a lease released, expired (by the store's
        clock), purged, taken by another owner or granted again under another
        token is left exactly as it is and not returned, so a batch never
        revives a lease anyone may have acted on the loss of. A renewed lease
        keeps its token and its ``expires_at`` moves to now + ``ttl``, as a
        renewal by ``acquire_lease`` would. Safe to retry: renewing twice renews.

        Args:
            owner: Who renews: every lease must be this owner's.
            ttl: How long each renewed lease lasts from now, in seconds (finite, > 0).
            leases: The leases as ``acquire_lease`` (or an earlier renewal) returned
                them, one per stream; empty is a no-op.

        Returns:
            The leases renewed, with their new ``expires_at``, in no particular
                order; a lease left out was not renewed.

        Raises:
            InvalidRequestError: For a bad ``owner`` or ``ttl``, a lease of another
                owner, a token out of 1..2**63-1 or a stream named twice
                (``check_lease_renewal``), before any I/O.
            StoreUnavailableError: When the store cannot be reached (after the adapter's retries).
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

    def list_index(
        self, namespace: str, statuses: Collection[str] | None = None, *, page_size: int = 512
    ) -> AsyncIterator[IndexedStream]:
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
OPTIONAL_PROTOCOLS: dict[str, type] = {
    CAP_BLOBS: BlobStore,
    CAP_BLOB_DELETE: BlobDeleteStore,
    CAP_LEASES: LeaseStore,
    CAP_LEASE_RENEW: LeaseRenewStore,
    CAP_CHANGES: ChangeStore,
    CAP_STATUS_INDEX: IndexStore,
}


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


def supports_blob_delete(store: Store) -> TypeGuard[BlobDeleteStore]:
    """Whether ``store`` declares ``CAP_BLOB_DELETE`` (and ``CAP_BLOBS``); if so a type checker sees a ``BlobDeleteStore``.

    Args:
        store: Any store.

    Returns:
        True when both ``CAP_BLOBS`` and ``CAP_BLOB_DELETE`` are in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_BLOBS in store.capabilities and CAP_BLOB_DELETE in store.capabilities


def supports_leases(store: Store) -> TypeGuard[LeaseStore]:
    """Whether ``store`` declares ``CAP_LEASES``; if so a type checker sees it as a ``LeaseStore``.

    Args:
        store: Any store.

    Returns:
        True when ``CAP_LEASES`` is in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_LEASES in store.capabilities


def supports_lease_renew(store: Store) -> TypeGuard[LeaseRenewStore]:
    """Whether ``store`` declares ``CAP_LEASE_RENEW`` (and ``CAP_LEASES``); if so a type checker sees a ``LeaseRenewStore``.

    Args:
        store: Any store.

    Returns:
        True when both ``CAP_LEASES`` and ``CAP_LEASE_RENEW`` are in ``store.capabilities`` (a ``TypeGuard``).
    """
    return CAP_LEASES in store.capabilities and CAP_LEASE_RENEW in store.capabilities


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
