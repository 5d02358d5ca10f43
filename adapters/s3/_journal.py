"""The S3 adapter's journal: ``append_batch`` (one conditional PUT per request), ``last_seq`` and ``read``.

``S3Journal`` gives ``S3Store`` its appends and the journal reads. The key
layout they rely on, "Batching", "Restore" and "Faults": the module docstring of
``durably.adapters.s3._store`` (the adapter's overview), which "the module
docstring" in these methods' docstrings means. The requests themselves are in
``s3_put_batch`` (creating a batch object exactly once) and ``s3_window`` (read
windows); fencing tokens (levels, takeover markers, the known end) are
explained in ``s3_fencing``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

import anyio

from durably.storage._errors import ConflictError, FencedError, InvalidRequestError, StoreUnavailableError
from durably.storage._spi import AppendRequest, StoredRecord, StreamId, check_append

from ._batch import TOKEN_SIZE, Batch
from ._fencing import Head, HeldLeases, KnownHeads
from ._keys import MAX_SEQ, StreamKeys
from ._put_batch import BatchTaken, put_batch, read_header
from ._window import read_window

if TYPE_CHECKING:
    from ._compaction import S3Compaction
    from ._leases import S3Leases
    from ._requests import S3Requests

#: How many times one append or marker follows the stream's end past other writers' objects before giving up.
_HOPS = 1000


class S3Journal:
    """Mixin giving ``S3Store`` the journal methods: ``append_batch``, ``last_seq`` and ``read``.

    Relies on the host's ``_check_open()``, ``_keys(stream)``, its requests
    (``_s3``), compaction (``_compaction``, whose mark a read restarts at) and
    leases (``_leases``, ``_held``: the ones it holds), the stream ends it knows
    (``_known``, ``s3_fencing.KnownHeads``), and the count of appends in flight
    (``_appending``, with ``_drained`` set when it falls to 0: ``close`` waits for it).
    """

    if TYPE_CHECKING:  # the host's (S3Store, StoreBase), declared for the type checker
        _s3: S3Requests
        _compaction: S3Compaction
        _leases: S3Leases
        _held: HeldLeases
        _known: KnownHeads
        _appending: int
        _drained: anyio.Event | None

        def _check_open(self) -> None: ...

        def _keys(self, stream: StreamId) -> StreamKeys: ...

    # ---------------------------------------------------------------- appends

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches concurrently: a group commit; see ``Store.append_batch``.

        Each request is one conditional PUT (``If-None-Match: *``, or ``If-Match`` on the
        takeover marker its own lease grant left there) of its batch object, with no read when
        its expected seq is the stream's latest batch end this store knows (and, for a fenced
        request, its token is the level there and a lease this store holds, see ``s3_fencing``);
        otherwise the newest batch header is read first (two requests), a stale ``fence`` is a
        ``FencedError`` and a mismatching expected seq a ``ConflictError``, without any write. A new stream's index entry is written before its first batch. Requests of
        different streams run concurrently (at most ``concurrency`` requests in flight), those
        of one stream in order (see "Batching" in the module docstring). A PUT whose outcome is
        unknown is resolved by reading the key back before anything is reported. Successful
        requests are durable when this returns: S3 acknowledged their PUTs.

        Args:
            requests: The appends, in order; a repeated stream's later request sees the
                earlier one's records.

        Returns:
            One entry per request, in order: the stream's new last seq, a ``FencedError``
                (returned, not raised) when its ``fence`` is not the stream's latest lease grant
                or a purge ended that lease, or a ``ConflictError`` (returned) when its expected
                seq was stale or another writer created the batch first.

        Raises:
            InvalidRequestError: For a malformed request (``check_append``) or one whose seqs
                would pass ``s3_keys.MAX_SEQ``, before any I/O.
            StoreUnavailableError: When any request's outcome stays unknown; the other requests'
                results are then not reported either: re-read before retrying. Another error of
                a request (a ``CorruptRecordError``) is raised as it is.
        """
        self._check_open()
        keys: list[StreamKeys] = []
        for request in requests:
            check_append(request)
            if request.expected_seq + len(request.records) > MAX_SEQ:
                raise InvalidRequestError(f"seq would exceed {MAX_SEQ}")
            keys.append(self._keys(request.stream))
        by_stream: dict[StreamId, list[int]] = {}
        for index, request in enumerate(requests):
            by_stream.setdefault(request.stream, []).append(index)
        results: list[int | Exception | None] = [None] * len(requests)

        async def append_in_order(indices: list[int]) -> None:
            for position, index in enumerate(indices):
                try:
                    results[index] = await self._append_one(requests[index], keys[index])
                except ConflictError as exc:
                    results[index] = exc
                except Exception as exc:  # unknown outcome: later requests of the stream depend on it
                    for later in indices[position:]:
                        results[later] = exc
                    return

        self._appending += 1
        if self._appending == 1:
            self._drained = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                for indices in by_stream.values():
                    group.start_soon(append_in_order, indices)
        finally:
            self._appending -= 1
            if self._appending == 0 and self._drained is not None:
                self._drained.set()
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, ConflictError)]
        if failures:
            if isinstance(failures[0], StoreUnavailableError):
                raise StoreUnavailableError(
                    f"{len(failures)} of {len(requests)} appends have an unknown outcome; re-read before retrying"
                ) from failures[0]
            raise failures[0]
        return results  # type: ignore[return-value]  # no None left: each request got its result or error above

    async def _append_one(self, request: AppendRequest, keys: StreamKeys) -> int:
        stream, expected, fence = request.stream, request.expected_seq, request.fence
        known = self._known.get(stream)
        at_known_end = known is not None and known.end == expected
        if fence is None:
            fast = expected == 0 or at_known_end
        else:
            fast = at_known_end and known is not None and known.level == fence and self._held.holds(stream, fence)
        if fast:
            head = known if at_known_end and known is not None else Head(expected)
        else:
            head = await self._head(stream, keys)
            if fence is not None:
                await self._check_fence(stream, expected, head, fence)
            if head.end != expected:
                raise ConflictError(stream, expected, head.end)
        if expected == 0:
            # Listable before its first record exists, never the other way round.
            await self._s3.call(
                "put_object",
                Key=keys.index,
                Body=json.dumps({"namespace": stream.namespace, "agent_id": stream.agent_id}).encode(),
            )
        first, last = expected + 1, expected + len(request.records)
        level, replacing = (fence if fence is not None else head.level), head.marker
        for _ in range(_HOPS):
            token = secrets.token_bytes(TOKEN_SIZE)
            body = Batch(first, last, first, token, tuple(request.records), level).encode()
            # One PUT, no read: compaction never frees a key (see "Fencing after compaction").
            try:
                await self._put_batch(keys.batch(first), body, token, replacing)
            except BatchTaken as taken:
                found = taken.header
                if found is None or not found.is_marker:
                    if fence is not None and found is not None and found.level > fence:
                        actual = await self._last_seq_or_none(stream, keys)
                        raise FencedError(stream, expected, actual, fence=fence) from None
                    raise ConflictError(stream, expected, await self._last_seq_or_none(stream, keys)) from None
                # A takeover marker holds the key: the stream still ends at `expected`.
                if fence is None:
                    level = max(level, found.level)  # an unfenced append goes after it, at its level
                elif found.level > fence:
                    raise FencedError(stream, expected, expected, fence=fence) from None
                elif found.level < fence:
                    await self._check_fence(stream, expected, Head(expected, found.level), fence)
                replacing = taken.etag
                continue
            self._known.remember(stream, Head(last, level))
            return last
        raise StoreUnavailableError(f"the end of {stream} kept moving under other writers")

    async def _put_batch(self, key: str, body: bytes, token: bytes, replacing: str | None) -> str:
        """Write one append's batch object exactly once (``s3_put_batch.put_batch``); returns its ETag."""
        return await put_batch(self._s3, key, body, token, replacing=replacing)

    async def _check_fence(self, stream: StreamId, expected: int, head: Head, fence: int) -> None:
        """Raise ``FencedError`` unless ``fence`` may append after ``head`` (see "Checked reads" in ``s3_fencing``)."""
        if head.level > fence or (head.level < fence and not await self._leases.grants(stream, fence)):
            raise FencedError(stream, expected, head.end, fence=fence)

    async def _place_marker(self, stream: StreamId, keys: StreamKeys, level: int) -> None:
        """Take the key of the stream's next append with a takeover marker of ``level`` (a new lease token).

        Follows the end past batches that land first; stops when a marker or
        batch of ``level`` or higher is already there (a retry of ours, or a
        newer grant that supersedes this one). Raises ``StoreUnavailableError``
        when the end keeps moving or S3 stays unreachable.
        """
        head = await self._head(stream, keys)
        for _ in range(_HOPS):
            if head.level >= level:
                return
            token = secrets.token_bytes(TOKEN_SIZE)
            body = Batch.marker(head.end + 1, level, token).encode()
            try:
                etag = await put_batch(self._s3, keys.batch(head.end + 1), body, token, replacing=head.marker)
            except BatchTaken as taken:
                found = taken.header
                if found is None:
                    head = await self._head(stream, keys)
                else:  # another writer's batch (follow it) or marker (replace it unless it is newer)
                    head = Head(found.last_seq, found.level, taken.etag if found.is_marker else None)
                continue
            self._known.remember(stream, Head(head.end, level, etag))
            return
        raise StoreUnavailableError(f"the end of {stream} kept moving while a lease takeover marked it")

    # ---------------------------------------------------------------- reading

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to ``stream``: one list call and one 56-byte ranged GET.

        The newest batch object, listed first thanks to descending names, holds it in its
        header. Compaction never deletes that object, so the value never decreases.

        Args:
            stream: The stream to look up.

        Returns:
            The last seq; 0 for an unknown stream.
        """
        self._check_open()
        return await self._last_seq(stream, self._keys(stream))

    async def _last_seq(self, stream: StreamId, keys: StreamKeys) -> int:
        return (await self._head(stream, keys)).end

    async def _head(self, stream: StreamId, keys: StreamKeys) -> Head:
        """The stream's end, level and marker from its newest batch header (one list call, one ranged GET)."""
        for _ in range(3):  # the newest batch only vanishes under a concurrent purge
            names, _token = await self._s3.list_page(keys.batches, max_keys=1)
            if not names:
                return Head(0)
            found = await read_header(self._s3, names[0])
            if found is not None:
                header, etag = found
                head = Head(header.last_seq, header.level, etag if header.is_marker else None)
                self._known.remember(stream, head)
                return head
        raise StoreUnavailableError(f"the newest batch of {stream} kept vanishing (purge in progress?)")

    async def _last_seq_or_none(self, stream: StreamId, keys: StreamKeys) -> int | None:
        try:
            return await self._last_seq(stream, keys)
        except StoreUnavailableError:
            return None

    async def read(
        self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512
    ) -> AsyncGenerator[StoredRecord, None]:
        """Yield the records of ``stream`` with seq > ``after_seq``, in seq order.

        A page is a window of ``page_size`` seqs: one list call, then its batches fetched
        concurrently ("Restore" in the module docstring); a read whose tail fits one window
        costs two list calls. A read that starts below the compaction mark restarts at it.
        Records deleted by compaction are not yielded; an unknown stream yields nothing.

        Args:
            stream: The stream to read.
            after_seq: Yield the records after this seq, >= 0; 0 reads from the start.
            page_size: Seqs per window, >= 1.

        Yields:
            Each ``StoredRecord`` (seq and frame), in seq order.

        Raises:
            InvalidRequestError: When ``after_seq`` < 0 or ``page_size`` < 1.
            StoreUnavailableError: When S3 stays unreachable, or listed batches vanished before
                they could be read more than three times (a concurrent compaction or purge).
            CorruptRecordError: When a batch object is damaged or the batches do not continue
                each other.
        """
        self._check_open()
        if after_seq < 0 or page_size < 1:
            raise InvalidRequestError("after_seq must be >= 0 and page_size >= 1")
        keys = self._keys(stream)
        position, first, vanished, level = after_seq, True, 0, 0
        while True:
            window = await read_window(self._s3, self._compaction, keys, stream, position, page_size, first)
            if window.restart_at is not None:
                vanished += window.vanished
                if vanished > 3:
                    raise StoreUnavailableError(f"batches of {stream} keep vanishing while read")
                position, first = window.restart_at, True
                continue
            for batch in window.batches:
                for seq, data in zip(batch.seqs(), batch.records, strict=False):
                    if seq > position:
                        yield StoredRecord(seq, data)
                position, level = max(position, batch.last_seq), batch.level
            first = False
            if window.complete:
                break
        if position > after_seq:
            self._known.remember(stream, Head(position, level))
