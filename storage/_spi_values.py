"""The SPI's values: the shapes a store takes and returns, and the checks of its arguments.

Part of the storage SPI (``durably.storage._spi``, which re-exports every name):
plain frozen dataclasses, so an adapter can build and compare them freely, and
``check_*`` functions that adapters call first so the argument rules live in one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from durably.errors import InvalidArgumentError

from ._errors import InvalidRequestError

#: A blob's name: the SHA-256 hex digest of its bytes.
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True, order=True)
class StreamId:
    """The address of one agent's journal: a namespace (a tenant or app) and an agent id.

    Both are non-empty strings of at most 200 characters without NUL; the
    namespace also has no '/'. The agent id may hold '/', '..', spaces and any
    Unicode, and ids differing only in case are different: an adapter whose
    backend has key or path rules encodes or hashes them. ``str(stream)`` is
    ``"namespace/agent_id"`` for display (logs, errors), every character that is not
    printable (a newline, a control or bidi character) shown as an escape like ``\\x0a``.

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
        text = f"{self.namespace}/{self.agent_id}"
        if text.isprintable():
            return text
        # A log line, an error or a terminal shows an id with a newline or a control
        # character as escapes: an agent id cannot forge another log line or rewrite the screen.
        return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


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

    A lease says who runs a stream; its token, carried by every append and
    snapshot of the holder (``AppendRequest.fence``) and checked by the store in
    the same atomic step as the expected seq, is what makes a stale owner
    harmless, even a paused one whose expected seq still matches (Kleppmann,
    "How to do distributed locking", 2016: leases need fencing).

    Attributes:
        stream: The stream the lease is on.
        owner: The worker holding it (a non-empty string the worker chose).
        token: A fencing token: it increases every time the lease passes to a
            new owner (a renewal by the same owner keeps it), and it never
            decreases for a stream id, across releases, expiry, reopen and
            ``delete_stream``. A store may commit leases without a fsync (SQLite
            does): a power loss can then undo the last grants, and a token may be
            issued again, but never one that a durable append was made under.
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
        wake_at: When a ``sleeping`` agent's timer fires, in unix seconds; None
            for any other status (and by default).
    """

    status: str
    definition: str
    seq: int
    updated_at: float
    open_approvals: tuple[str, ...] = ()
    wake_at: float | None = None


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
        fence: The fencing token (``Lease.token``) of the lease the writer holds
            on ``stream``, or None (the default) for a writer that holds none (an
            operator's command, a single-process store). A store with
            ``CAP_LEASES`` checks it in the same atomic step as ``expected_seq``:
            unless the stream's latest lease grant has exactly this token and was
            not ended by ``delete_stream``, nothing is written and the request's
            result is a ``FencedError``. A lease that merely expired or was
            released, with nobody granted one since, still admits its token.
    """

    stream: StreamId
    expected_seq: int
    records: Sequence[bytes]
    index: IndexEntry | None = None
    fence: int | None = None


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
    check_fence(request.fence)


def check_fence(fence: object) -> None:
    """Reject a malformed fencing token before any I/O (``check_append`` calls it; ``put_snapshot`` too).

    Args:
        fence: None, or a fencing token: an int in 1..2**63-1 (a bool is not).

    Raises:
        InvalidRequestError: For anything else.
    """
    if fence is not None and (isinstance(fence, bool) or not isinstance(fence, int) or not 1 <= fence <= MAX_SEQ):
        raise InvalidRequestError(f"a fence must be None or a lease token (an int in 1..2**63-1), got {fence!r}")


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


def check_blob_digests(stream: object, digests: object) -> list[str]:
    """Reject a malformed ``delete_blobs`` before any I/O; return the digests that can name a blob.

    Adapters call this, as ``check_append``.

    Args:
        stream: The ``stream`` argument of ``delete_blobs``; must be a ``StreamId``.
        digests: The ``digests`` argument; a collection of ``str`` (a lone ``str``
            is refused: it would be read as its characters).

    Returns:
        The distinct digests that are 64 lowercase hex characters, in first-seen
            order; the others name no blob, so deleting them is a no-op.

    Raises:
        InvalidRequestError: Unless ``stream`` is a ``StreamId`` and ``digests`` a
            collection (not a ``str`` or ``bytes``) of ``str``.
    """
    if not isinstance(stream, StreamId):
        raise InvalidRequestError(f"a blob's stream must be a StreamId, got {type(stream).__name__}")
    if isinstance(digests, (str, bytes)) or not isinstance(digests, Collection):
        raise InvalidRequestError(f"digests must be a collection of str, got {type(digests).__name__}")
    names = list(digests)
    if not all(isinstance(d, str) for d in names):
        raise InvalidRequestError("digests must be a collection of str")
    return [d for d in dict.fromkeys(names) if _DIGEST.fullmatch(d)]


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


def check_lease_renewal(owner: object, ttl: object, leases: object) -> list[Lease]:
    """Reject a malformed ``renew_leases`` before any I/O; return its leases as a list.

    Adapters call this, as ``check_append``.

    Args:
        owner: The ``owner`` argument of ``renew_leases``; as ``check_lease``'s.
        ttl: The ``ttl`` argument, in seconds; as ``check_lease``'s.
        leases: A collection of ``Lease`` (not a lone ``Lease``), each held by
            ``owner`` (its ``owner`` equal to it), with an ``int`` token in
            1..2**63-1 (as a fence), no stream named twice (one stream has one current lease).

    Returns:
        The leases, in the order given.

    Raises:
        InvalidRequestError: For a bad ``owner`` or ``ttl`` (``check_lease``), a
            ``leases`` that is not a collection of ``Lease``, a lease of another
            owner, a token that is not an ``int`` in 1..2**63-1, or a stream named twice.
    """
    check_lease(owner, ttl)
    if isinstance(leases, (str, bytes, Lease)) or not isinstance(leases, Collection):
        raise InvalidRequestError(f"leases must be a collection of Lease, got {type(leases).__name__}")
    found = list(leases)
    streams: set[StreamId] = set()
    for lease in found:
        if not isinstance(lease, Lease) or not isinstance(lease.stream, StreamId):
            raise InvalidRequestError(f"leases must be a collection of Lease, got a {type(lease).__name__}")
        if lease.owner != owner:
            raise InvalidRequestError(f"a lease of {lease.owner!r} cannot be renewed by {owner!r}")
        # The range of ``check_fence``: every adapter refuses a token no store can have the same way,
        # where PostgreSQL's bigint would otherwise fail the whole batch and SQLite match nothing.
        if isinstance(lease.token, bool) or not isinstance(lease.token, int) or not 1 <= lease.token <= MAX_SEQ:
            raise InvalidRequestError(f"a lease token must be an int in 1..2**63-1, got {lease.token!r}")
        if lease.stream in streams:
            raise InvalidRequestError(f"the lease of {lease.stream} is named twice")
        streams.add(lease.stream)
    return found
