"""The S3 adapter's snapshots and compaction: ``put_snapshot``, ``get_snapshot``, ``delete_snapshots``, ``delete_records``.

``S3Snapshotting`` gives ``S3Store`` these four methods; the objects and
requests are ``s3_snapshots``' (one object per snapshot) and ``s3_compaction``'s
(the compaction mark, trimming, tombstones). Why compaction goes as it does:
"Compaction" and "Fencing after compaction" in the module docstring of
``durably.adapters.s3._store`` (the adapter's overview), which "the module
docstring" in these methods' docstrings means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durably.storage._errors import FencedError, InvalidRequestError, UnsafeCompactionError
from durably.storage._spi import StoredSnapshot, StreamId, check_fence

from . import _snapshots as s3_snapshots
from ._keys import StreamKeys, seq_from_name

if TYPE_CHECKING:
    from ._compaction import S3Compaction
    from ._fencing import KnownHeads
    from ._leases import S3Leases
    from ._options import S3Options
    from ._requests import S3Requests


class S3Snapshotting:
    """Mixin giving ``S3Store`` the snapshot methods and compaction (``delete_records``).

    Relies on the host's ``_check_open()``, ``_keys(stream)``, ``options``, its
    requests (``_s3``), compaction (``_compaction``) and leases (``_leases``), the
    stream ends it knows (``_known``) and ``_last_seq(stream, keys)`` (``S3Journal``'s).
    """

    if TYPE_CHECKING:  # the host's (S3Store, S3Journal, StoreBase), declared for the type checker
        options: S3Options
        _s3: S3Requests
        _compaction: S3Compaction
        _leases: S3Leases
        _known: KnownHeads

        def _check_open(self) -> None: ...

        def _keys(self, stream: StreamId) -> StreamKeys: ...

        async def _last_seq(self, stream: StreamId, keys: StreamKeys) -> int: ...

    # ---------------------------------------------------------------- snapshots (s3_snapshots)

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        """Store the snapshot of ``stream`` at ``seq``, overwriting one at the same seq.

        One PUT, or a multipart upload from ``multipart_threshold`` bytes. ``seq`` is checked
        against the latest batch end this store knows, and only when it is above that against
        ``last_seq`` (one list call and one ranged GET more). A ``fence`` is checked first
        against the lease object (one GET): the snapshot is written only if the stream's
        latest lease grant has that token and no purge ended it. That check precedes the
        write (see "Limits" in ``s3_fencing``); snapshots are off the hot path, and a stale
        holder's snapshot of the same incarnation folds the same records.

        Args:
            stream: The stream the snapshot belongs to.
            seq: The seq it covers (records 1..``seq`` folded in).
            data: The encoded snapshot frame.
            fence: The writer's lease token, checked as ``AppendRequest.fence``; None: no check.

        Raises:
            FencedError: When ``fence`` is set and is no longer the stream's lease (nothing written).
            InvalidRequestError: When ``data`` is not ``bytes``, ``fence`` is malformed, or ``seq``
                is not within 1..``last_seq(stream)``.
        """
        self._check_open()
        check_fence(fence)
        if not isinstance(data, bytes):
            raise InvalidRequestError(f"snapshot data must be bytes, got {type(data).__name__}")
        keys = self._keys(stream)
        if fence is not None and not await self._leases.grants(stream, fence):
            last = self._known.end(stream)
            raise FencedError(stream, last, last, fence=fence)
        if seq < 1 or (seq > self._known.end(stream) and seq > await self._last_seq(stream, keys)):
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        await s3_snapshots.put_snapshot(self._s3, self.options, keys, seq, data)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        """The snapshot of ``stream`` with the highest seq <= ``at_or_before``: one list call and one GET.

        Found without listing the history: snapshot names are descending seqs, so one list
        call with ``StartAfter`` finds it.

        Args:
            stream: The stream to look in.
            at_or_before: The highest seq wanted; None: the latest snapshot.

        Returns:
            The snapshot, or None when the stream has none at or before that seq.

        Raises:
            StoreUnavailableError: Also when listed snapshots kept being deleted before they
                could be read (eight times).
        """
        self._check_open()
        return await s3_snapshots.get_snapshot(self._s3, stream, self._keys(stream), at_or_before)

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """Delete the snapshots of ``stream`` with seq < ``before_seq``, always keeping the latest one.

        List calls for the snapshots below ``before_seq``, then multi-object deletes (1,000
        keys per request).

        Args:
            stream: The stream whose snapshots go.
            before_seq: Snapshots below this seq are deleted, unless one is the latest.
        """
        self._check_open()
        await s3_snapshots.delete_snapshots(self._s3, self._keys(stream), before_seq)

    # ---------------------------------------------------------------- compaction (s3_compaction)

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """Compaction: delete the records of ``stream`` with seq <= ``through_seq``.

        As in "Compaction" in the module docstring: raises the compaction mark, trims the
        batch holding ``through_seq + 1`` (or the newest one), then overwrites each batch
        wholly <= ``through_seq`` with a tombstone, so no batch key is ever freed.
        ``last_seq`` is unchanged. An unknown stream has nothing to delete: a no-op.

        Args:
            stream: The stream to compact.
            through_seq: The highest seq to delete.

        Raises:
            UnsafeCompactionError: Unless a snapshot exists at a seq >= ``through_seq``.
            StoreUnavailableError: Also when an object kept changing under a concurrent writer.
        """
        self._check_open()
        keys = self._keys(stream)
        latest, _token = await self._s3.list_page(keys.snapshots, max_keys=1)
        if not latest or seq_from_name(latest[0]) < through_seq:
            if not latest and await self._last_seq(stream, keys) == 0:
                return  # an unknown stream has nothing to compact
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
        if through_seq < 1:
            return
        await self._compaction.compact(keys, through_seq)
