"""The S3 adapter's journal: ``append_batch`` (one conditional PUT per request), ``last_seq`` and ``read``.

``S3Journal`` gives ``S3Store`` its appends and the journal reads. The key
layout they rely on, "Batching", "Restore" and "Faults": the module docstring of
``durably.adapters.s3._store`` (the adapter's overview), which "the module
docstring" in these methods' docstrings means. The requests themselves are in
``s3_put_batch`` (creating a batch object exactly once) and ``s3_window`` (read
windows).
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

import anyio

from durably.storage._errors import ConflictError, InvalidRequestError, StoreUnavailableError
from durably.storage._spi import AppendRequest, StoredRecord, StreamId, check_append

from ._batch import HEADER_SIZE, TOKEN_SIZE, Batch, BatchHeader
from ._keys import MAX_SEQ, StreamKeys
from ._put_batch import BatchTaken, put_new_batch
from ._window import read_window

if TYPE_CHECKING:
    from ._compaction import S3Compaction
    from ._requests import S3Requests


class S3Journal:
    """Mixin giving ``S3Store`` the journal methods: ``append_batch``, ``last_seq`` and ``read``.

    Relies on the host's ``_check_open()``, ``_keys(stream)``, its requests
    (``_s3``) and compaction (``_compaction``, whose mark a read restarts at), the
    latest batch ends it knows (``_known_ends``, kept by ``_remember_end``), and the
    count of appends in flight (``_appending``, with ``_drained`` set when it
    falls to 0: ``close`` waits for it).
    """

    if TYPE_CHECKING:  # the host's (S3Store, StoreBase), declared for the type checker
        _s3: S3Requests
        _compaction: S3Compaction
        _known_ends: OrderedDict[StreamId, int]
        _appending: int
        _drained: anyio.Event | None

        def _check_open(self) -> None: ...

        def _keys(self, stream: StreamId) -> StreamKeys: ...

        def _remember_end(self, stream: StreamId, end: int) -> None: ...

    # ---------------------------------------------------------------- appends

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches concurrently: a group commit; see ``Store.append_batch``.

        Each request is one conditional PUT (``If-None-Match: *``) of its batch object, with no
        read when its expected seq is the stream's latest batch end this store knows; otherwise
        ``last_seq`` is read first (two requests) and a mismatch is a ``ConflictError`` without
        any write. A new stream's index entry is written before its first batch. Requests of
        different streams run concurrently (at most ``concurrency`` requests in flight), those
        of one stream in order (see "Batching" in the module docstring). A PUT whose outcome is
        unknown is resolved by reading the key back before anything is reported. Successful
        requests are durable when this returns: S3 acknowledged their PUTs.

        Args:
            requests: The appends, in order; a repeated stream's later request sees the
                earlier one's records.

        Returns:
            One entry per request, in order: the stream's new last seq, or a ``ConflictError``
                (returned, not raised) when its expected seq was stale or another writer created
                the batch first.

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
        stream, expected = request.stream, request.expected_seq
        first, last = expected + 1, expected + len(request.records)
        if expected and self._known_ends.get(stream) != expected:
            actual = await self._last_seq(stream, keys)
            if actual != expected:
                raise ConflictError(stream, expected, actual)
        if expected == 0:
            # Listable before its first record exists, never the other way round.
            await self._s3.call(
                "put_object",
                Key=keys.index,
                Body=json.dumps({"namespace": stream.namespace, "agent_id": stream.agent_id}).encode(),
            )
        token = secrets.token_bytes(TOKEN_SIZE)
        body = Batch(first, last, first, token, tuple(request.records)).encode()
        # One PUT, no read: compaction never frees a key (see "Fencing after compaction").
        await self._put_new_batch(stream, keys, expected, first, body, token)
        self._remember_end(stream, last)
        return last

    async def _put_new_batch(
        self, stream: StreamId, keys: StreamKeys, expected: int, first: int, body: bytes, token: bytes
    ) -> None:
        """Create the batch object of ``first`` exactly once (``s3_put_batch``).

        Returns when the object at the key is ours. Raises ``ConflictError``
        when it is another writer's, ``StoreUnavailableError`` when retries run out.
        """
        try:
            await put_new_batch(self._s3, keys.batch(first), body, token)
        except BatchTaken:
            raise ConflictError(stream, expected, await self._last_seq_or_none(stream, keys)) from None

    # ---------------------------------------------------------------- reading

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to ``stream``: one list call and one 48-byte ranged GET.

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
        for _ in range(3):  # the newest batch only vanishes under a concurrent purge
            names, _token = await self._s3.list_page(keys.batches, max_keys=1)
            if not names:
                return 0
            found = await self._s3.get(names[0], byte_range=f"bytes=0-{HEADER_SIZE - 1}")
            if found is not None:
                end = BatchHeader.decode(found[0]).last_seq
                self._remember_end(stream, end)
                return end
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
        position, first, vanished = after_seq, True, 0
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
                position = max(position, batch.last_seq)
            first = False
            if window.complete:
                break
        if position > after_seq:
            self._remember_end(stream, position)
