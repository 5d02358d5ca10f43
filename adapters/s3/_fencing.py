"""Fencing tokens on S3: what a store knows of a stream's end, and which leases it holds.

S3 has no transactions: one PUT can only be conditional on its own key. A
fenced append (``AppendRequest.fence``) is still decided by that one
conditional write, because the lease token is written into the journal:

* **Levels.** Every batch object carries a *level* (``s3_batch``): the
  fencing token it was written under; an unfenced append inherits the level
  of the batch it follows. Levels never decrease along a stream's seqs.
* **Takeover markers.** When ``acquire_lease`` grants a *new* token (not a
  renewal), it takes the key of the stream's next append, ``r/{end + 1}``,
  with a takeover marker of that level (``If-None-Match``, or ``If-Match``
  on an older marker there) before it returns. A stale holder's append at
  that seq then gets 412, reads the key back, finds a marker or batch of a
  higher level than its token and answers ``FencedError``: the refusal is
  the conditional write itself, with no read-then-write window. A stale
  holder's batch that landed before the marker was written before the new
  grant took effect: it is kept, and the marker goes after it (acquire
  chases the end). The new holder's first append replaces its own marker
  (``If-Match`` on the ETag it remembers): still one PUT. ``last_seq`` and
  readers see a marker as "no records" (its header's last seq is the end).
* **Checked reads.** An append that cannot use the known end (below) reads
  the stream's newest batch header first, as unfenced appends already did:
  a level above its token is ``FencedError``; a level below it (the grant's
  marker is not there: the token may never have been granted, or a purge
  emptied the stream) is checked against the lease object, which
  ``delete_stream`` leaves marked purged. A takeover after that read puts
  its marker at or before the key the append then writes, so the PUT fails.
* **The known end** (``Head``): the end, level and marker ETag a store last
  saw for a stream. A fenced append skips the reads only when its expected
  seq is that end, its token is that level, and the store itself holds that
  lease by its own clock (``HeldLeases``). The last condition covers what no
  key can: a purge frees every key of the stream, so a writer whose cached
  end predates a purge and restart could otherwise create the new
  incarnation's next key. A holder past its lease's expiry reads first, and
  a purge of a lease still held is the operator's to refuse.

Limits, kept by the rules above rather than by a write: a fenced
``put_snapshot`` checks the lease object and then writes, so a stale
holder's snapshot in flight across a purge and restart of its stream can
land; and a writer on the fast path while its lease is purged under it can
append to the next incarnation. Both need a purge of a stream whose holder is
live, which must not race its writers (see "Limits" in ``durably.adapters.s3``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from durably.storage._spi import Lease, StreamId

#: Entries (streams) each cache of a store keeps, least recently used first out.
CACHE_MAX = 65_536


@dataclass(frozen=True, slots=True)
class Head:
    """What a store knows of a stream's end.

    ``end``: its last seq; ``level``: the fencing token of the newest batch or
    marker (0: none); ``marker``: the ETag of the takeover marker holding the
    key of seq ``end + 1``, when the store knows it (then the next append
    replaces it with ``If-Match``), else None.
    """

    end: int
    level: int = 0
    marker: str | None = None

    def supersedes(self, other: Head | None) -> bool:
        """Whether this view is at least as new as ``other``: ends and levels never go back."""
        return other is None or (self.end, self.level) >= (other.end, other.level)


class KnownHeads:
    """The ``Head`` of each stream a store last saw (an LRU of ``CACHE_MAX`` streams)."""

    def __init__(self) -> None:
        self._heads: OrderedDict[StreamId, Head] = OrderedDict()

    def get(self, stream: StreamId) -> Head | None:
        """The stream's known head, or None."""
        return self._heads.get(stream)

    def end(self, stream: StreamId) -> int:
        """The stream's known end, 0 when unknown."""
        head = self._heads.get(stream)
        return 0 if head is None else head.end

    def remember(self, stream: StreamId, head: Head) -> None:
        """Keep ``head`` unless an older view than the one known (see ``Head.supersedes``)."""
        known = self._heads.pop(stream, None)
        if known is not None and (head.end, head.level, head.marker) == (known.end, known.level, None):
            head = known  # the same end, and the marker's ETag is still worth knowing
        if known is not None and not head.supersedes(known):
            head = known
        self._heads[stream] = head
        if len(self._heads) > CACHE_MAX:
            self._heads.popitem(last=False)

    def forget(self, stream: StreamId) -> None:
        """Drop what is known of ``stream`` (a purge)."""
        self._heads.pop(stream, None)

    def clear(self) -> None:
        """Forget every stream."""
        self._heads.clear()


class HeldLeases:
    """The leases a store acquired and has not given up: token and ``expires_at`` per stream.

    In: ``clock``, the unix-seconds clock the lease logic uses. A lease counts
    as held until its ``expires_at`` by that clock (the holder's own view, see
    ``s3_leases``).
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._held: OrderedDict[StreamId, tuple[int, float]] = OrderedDict()

    def hold(self, lease: Lease) -> None:
        """Record ``lease`` as held by this store."""
        self._held.pop(lease.stream, None)
        self._held[lease.stream] = (lease.token, lease.expires_at)
        if len(self._held) > CACHE_MAX:
            self._held.popitem(last=False)

    def drop(self, stream: StreamId, token: int | None = None) -> None:
        """Forget the lease of ``stream`` (only if it has ``token``, when given)."""
        held = self._held.get(stream)
        if held is not None and (token is None or held[0] == token):
            del self._held[stream]

    def holds(self, stream: StreamId, token: int) -> bool:
        """Whether this store holds the lease of ``stream`` with ``token`` and it has not expired."""
        held = self._held.get(stream)
        return held is not None and held[0] == token and self.clock() < held[1]
