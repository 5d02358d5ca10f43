"""The store side of the LangGraph bridge: thread streams restored, kept current, appended to.

Appends go through durably's ``GroupCommitter`` with the expected seq this
process last saw, so many threads' checkpoints share one commit, and a writer
whose view is stale (another process appended) gets a ``ConflictError``: it
folds the records it missed and rebuilds its batch, as the runtime's journal
rebases. Before every operation the thread reads the records after its seq (one
query); a gap (records compacted away by another process) or a stream that went
back (deleted) makes it restore again from the latest snapshot.

Snapshots follow a geometric policy: one is written when the records since
the last one hold an eighth of its bytes (and ``snapshot_min_bytes``), so the
replay after a snapshot is at most an eighth of it, and all snapshots ever
written sum to at most nine times the last one: O(N) bytes written in all.
Each snapshot compacts the stream (the records it covers are deleted), so the
store holds one snapshot plus a short tail.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from durably.errors import InvalidThreadIdError
from durably.integrations._langgraph_threads import RECORD_SCHEMA, SNAPSHOT_SCHEMA, VERSION, ThreadState, decode_frame
from durably.storage._codec import Codec, FrameCipher
from durably.storage._errors import ConflictError, CorruptRecordError
from durably.storage._group_commit import GroupCommitter
from durably.storage._spi import Store, StreamId

from ._values import PrefixIndex, paused_gc

_REBASE_ATTEMPTS = 16
#: A snapshot is due when the records since the last one hold 1/8 of its bytes:
#: restore replays at most that much, and all snapshots ever written sum to 9x
#: the last one (a geometric series), so writing stays O(N).
SNAPSHOT_TAIL_RATIO = 8


@dataclass
class Thread:
    """A thread's fold in this process, with its lock and snapshot accounting.

    ``values``: per ``(ns, channel)`` the ``(version, list)`` last stored or
    rebuilt here: the base of the next delta. ``prefixes``: per ``(ns, channel)``
    the ``PrefixIndex`` of the values read (``values.py``)."""

    stream: StreamId
    state: ThreadState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    bytes_since: int = 0
    snapshot_bytes: int = 0
    values: dict[tuple[str, str], tuple[Any, list[Any]]] = field(default_factory=dict)
    prefixes: dict[tuple[str, str], PrefixIndex] = field(default_factory=dict)
    pending: list[_Pending] = field(default_factory=list)
    loaded: bool = False


@dataclass(slots=True)
class _Pending:
    """One save waiting for its thread's next commit."""

    build: Callable[[ThreadState], list[dict[str, Any]]]
    after: Callable[[Thread], None] | None
    done: bool = False
    error: BaseException | None = None


class ThreadJournal:
    """Restores, syncs and appends to the thread streams of ``namespace`` in ``store``.

    In: an open ``store``, a ``codec`` (``Codec``, maybe encrypting),
    ``cipher`` (for the snapshot codec, which runs in a worker thread),
    ``versions_of`` ((stored checkpoint, thread id) -> its channel versions, for snapshots),
    ``ttl`` (seconds of inactivity after which a thread is purged, or None).
    """

    def __init__(
        self,
        store: Store,
        codec: Codec,
        cipher: FrameCipher | None,
        namespace: str,
        versions_of: Callable[[Any, str], dict[str, Any]],
        *,
        ttl: float | None,
        snapshot_min_bytes: int,
        cache_threads: int,
    ) -> None:
        self.store = store
        self.codec = codec
        self.cipher = cipher
        self.namespace = namespace
        self.committer = GroupCommitter(store)
        self.versions_of = versions_of
        self.ttl = ttl
        self.snapshot_min_bytes = snapshot_min_bytes
        self.cache_threads = cache_threads
        self._threads: OrderedDict[str, Thread] = OrderedDict()

    def reset(self) -> None:
        """Forget every thread and start a new group committer: for a new event loop
        (locks and pending commits belong to the loop that made them)."""
        self.committer = GroupCommitter(self.store)
        self._threads.clear()

    def stream(self, thread_id: Any) -> StreamId:
        """The stream of ``thread_id``. Raises ``InvalidThreadIdError``."""
        if thread_id is None:
            raise InvalidThreadIdError("the config has no configurable.thread_id")
        try:
            return StreamId(self.namespace, str(thread_id))
        except ValueError as exc:
            raise InvalidThreadIdError(f"thread_id {thread_id!r} cannot be stored: {exc}") from None

    def thread(self, thread_id: Any) -> Thread:
        """This process's ``Thread`` of ``thread_id`` (not loaded yet, maybe). Raises ``InvalidThreadIdError``."""
        thread = self._threads.get(str(thread_id))
        if thread is None:
            thread = Thread(self.stream(thread_id), ThreadState())
            self._threads[str(thread_id)] = thread
            self._evict()
        self._threads.move_to_end(str(thread_id))
        return thread

    @asynccontextmanager
    async def locked(self, thread_id: Any) -> AsyncIterator[Thread]:
        """The thread, restored or caught up with the store, held under its lock."""
        thread = self.thread(thread_id)
        async with thread.lock:
            await self._ensure_current(thread, catch_up=True)
            yield thread

    async def _ensure_current(self, thread: Thread, *, catch_up: bool) -> None:
        """Restore a thread not loaded yet; else read what other processes appended
        (``catch_up``; writers skip it: their expected seq finds out). Then apply the
        TTL, which spares a thread waiting at an ``interrupt()``."""
        if not thread.loaded:
            await self._restore(thread)
        elif catch_up:
            await self.catch_up(thread)
        if (
            self.ttl is not None
            and thread.state.seq
            and thread.state.at + self.ttl < time.time()
            and not thread.state.interrupted()  # a thread waiting for a human is not idle
        ):
            await self._purge(thread)

    def _evict(self) -> None:
        for key in list(self._threads):
            if len(self._threads) <= self.cache_threads:
                break
            thread = self._threads[key]
            if not thread.lock.locked() and not thread.pending:
                del self._threads[key]

    async def _restore(self, thread: Thread) -> None:
        thread.loaded = False
        stored = await self.store.get_snapshot(thread.stream)
        thread.values.clear()
        thread.prefixes.clear()
        thread.bytes_since = 0
        if stored is None:
            thread.state, thread.snapshot_bytes = ThreadState(), 0
        else:
            with paused_gc():
                frame = decode_frame(self.codec, stored.data, thread.stream, stored.seq, SNAPSHOT_SCHEMA)
                thread.state = ThreadState.from_snapshot(stored.seq, frame)
            thread.snapshot_bytes = len(stored.data)
        await self.catch_up(thread, restoring=True)
        thread.loaded = True

    async def catch_up(self, thread: Thread, *, restoring: bool = False) -> None:
        """Fold the records appended after the thread's seq; restore on a gap."""
        expected = thread.state.seq + 1
        tail = [stored async for stored in self.store.read(thread.stream, thread.state.seq)]
        with paused_gc():  # decoded and folded in one synchronous block (see paused_gc)
            for stored in tail:
                if stored.seq != expected:
                    break
                thread.state.apply(
                    decode_frame(self.codec, stored.data, thread.stream, stored.seq, RECORD_SCHEMA), stored.seq
                )
                thread.bytes_since += len(stored.data)
                expected += 1
        if tail and tail[-1].seq != thread.state.seq:  # a gap: records compacted away meanwhile
            if restoring:
                raise CorruptRecordError(
                    f"records from {expected} on are missing after the snapshot", stream=thread.stream, seq=expected
                )
            return await self._restore(thread)
        if not restoring and not tail and thread.state.seq:
            # Nothing new: still make sure the stream was not deleted or compacted meanwhile.
            last = await self.store.last_seq(thread.stream)
            if last != thread.state.seq:
                await self._restore(thread)

    async def append(
        self,
        thread_id: Any,
        build: Callable[[ThreadState], list[dict[str, Any]]],
        after: Callable[[Thread], None] | None = None,
    ) -> None:
        """Append the records ``build(state)`` returns for ``thread_id``, durably, then fold them.

        ``build`` sees the fold including every record queued before it (it is
        run again after a conflict); ``after(thread)`` runs once they are durable.
        Saves LangGraph submits together (a task's writes, then the superstep's
        checkpoint) share one commit: a thread-level group commit, with a commit
        delay of one event-loop turn. Raises ``ConflictError`` after repeated
        conflicts, ``StoreUnavailableError`` (outcome unknown: the next
        operation restores) and ``UnencodableValueError`` (nothing of the
        batch written).
        """
        thread = self.thread(thread_id)
        pending = _Pending(build, after)
        thread.pending.append(pending)
        await asyncio.sleep(0)  # the commit delay: let saves submitted in the same tick join
        async with thread.lock:
            if not pending.done:
                batch, thread.pending = thread.pending, []
                await self._ensure_current(thread, catch_up=False)
                try:
                    await self._commit(thread, batch)
                except BaseException as exc:
                    for p in batch:
                        p.done, p.error = True, exc
                else:
                    for p in batch:
                        p.done = True
        if pending.error is not None:
            raise pending.error

    async def commit(self, thread: Thread, build: Callable[[ThreadState], list[dict[str, Any]]]) -> None:
        """Append ``build(state)``'s records now, for a caller that holds the thread's lock."""
        pending = _Pending(build, None)
        await self._commit(thread, [pending])

    async def _commit(self, thread: Thread, batch: list[_Pending]) -> None:
        for _ in range(_REBASE_ATTEMPTS):
            first = thread.state.seq + 1
            payloads: list[dict[str, Any]] = []
            try:
                for p in batch:
                    for payload in p.build(thread.state):
                        thread.state.apply(payload, first + len(payloads))  # later builds see earlier ones
                        payloads.append(payload)
                if not payloads:
                    break
                frames = [
                    self.codec.encode(
                        RECORD_SCHEMA, VERSION, p, path="langgraph", check=False, stream=thread.stream, seq=first + i
                    )
                    for i, p in enumerate(payloads)
                ]
                await self.committer.append(thread.stream, first - 1, frames)
            except ConflictError:
                await self._restore(thread)  # the fold ran ahead of the store: start again from it
                continue
            except BaseException:
                self._forget(thread)  # outcome unknown, or the fold ran ahead: restore next time
                raise
            thread.bytes_since += sum(map(len, frames))
            break
        else:
            self._forget(thread)
            raise ConflictError(thread.stream, first - 1, None)
        for p in batch:
            if p.after is not None:
                p.after(thread)
        if thread.bytes_since >= max(self.snapshot_min_bytes, thread.snapshot_bytes // SNAPSHOT_TAIL_RATIO):
            await self.snapshot(thread)

    @staticmethod
    def _forget(thread: Thread) -> None:
        thread.state, thread.values, thread.bytes_since, thread.snapshot_bytes = ThreadState(), {}, 0, 0
        thread.prefixes, thread.loaded = {}, False

    async def snapshot(self, thread: Thread) -> None:
        """Store the thread's live fold as a snapshot at its seq, then compact:
        older snapshots and the records it covers go, and with them the bytes
        of deleted checkpoints. The fold is rebuilt from the snapshot, so no
        later delta refers to a value the snapshot dropped."""
        seq, stream = thread.state.seq, thread.stream
        if seq == 0:
            return
        body = thread.state.body(lambda stored: self.versions_of(stored, stream.agent_id))
        cipher = self.cipher

        def encode() -> bytes:  # CPU work off the event loop, with a codec of its own (not thread-safe)
            return Codec(cipher=cipher).encode(
                SNAPSHOT_SCHEMA, VERSION, body, path="langgraph", check=False, stream=stream, seq=seq
            )

        data = await anyio.to_thread.run_sync(encode)
        await self.store.put_snapshot(stream, seq, data)
        await self.store.delete_snapshots(stream, seq)
        await self.store.delete_records(stream, seq)
        thread.state = ThreadState.from_snapshot(seq, body)
        thread.snapshot_bytes, thread.bytes_since = len(data), 0

    async def purge(self, thread_id: Any) -> None:
        """Delete the thread's stream (records, snapshots) and forget it here."""
        stream = self.stream(thread_id)
        await self.store.delete_stream(stream)
        thread = self._threads.get(str(thread_id))
        if thread is not None:
            self._forget(thread)
            thread.loaded = True

    async def _purge(self, thread: Thread) -> None:
        await self.store.delete_stream(thread.stream)
        self._forget(thread)
        thread.loaded = True  # known empty now

    async def thread_ids(self) -> list[str]:
        """Every thread id of the namespace, sorted."""
        return [stream.agent_id async for stream in self.store.list_streams(self.namespace)]
