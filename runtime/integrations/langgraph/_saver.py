"""``DurablySaver``: a LangGraph checkpointer on any durably store.

``graph.compile(checkpointer=DurablySaver.from_url("sqlite:///agents.db"))``
is the whole change for a LangGraph app. Each thread is a durably stream
(``thread.py``); checkpoints and ``put_writes`` batches are records appended
through group commit; channel values are stored per ``(ns, channel,
version)`` only when LangGraph gives them a new version, and a list that
extends the one stored before is stored as the new items plus a reference
(``values.py``), so a 1,000-step conversation costs O(N) bytes. The store,
encryption (bound to each record's place), redaction and TTL are durably's.

The async methods are native; the sync ones run them on the saver's event
loop from another thread (``sync.py``) and fail fast on the loop's own thread.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from typing import Any, cast

import cbor2
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)

from durably._journal.redaction_policy import RedactionPolicy
from durably.errors import CheckpointValueError, InvalidArgumentError, InvalidPruneStrategyError
from durably.integrations._langgraph_threads import DELTA, EMPTY, StoredCheckpoint, ThreadState
from durably.storage._codec import Codec, FrameCipher
from durably.storage._errors import CodecError
from durably.storage._registry import open_store
from durably.storage._spi import Store

from ._redact import ValueRedactor
from ._sync import LoopBridge, SyncInterface
from ._thread_journal import Thread, ThreadJournal
from ._values import (
    PrefixIndex,
    StrictSerde,
    build_entry,
    default_serde,
    lend,
    load_entry,
    paused_gc,
    private_copy,
)

_log = logging.getLogger("durably.integrations.langgraph")
_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    """True when CBOR gives ``value`` back exactly (no tuples, enums, bytes subclasses...)."""
    kind = type(value)
    if kind in _SCALARS:
        return kind is not int or -(2**63) <= value < 2**64
    if depth > 32:
        return False
    if kind is list:
        return all(_plain(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


def _copy(value: Any) -> Any:
    """A copy of plain data's containers, so a caller's edits never reach the fold."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


class DurablySaver(SyncInterface, BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` whose threads are durably streams.

    A drop-in checkpointer, like LangGraph's ``AsyncSqliteSaver``: its methods
    implement ``BaseCheckpointSaver``'s, async natively and sync through the
    saver's event loop (``SyncInterface``). Building it does no I/O; the store
    is opened on first use, on the first event loop that awaits the saver.

    Its methods raise ``CheckpointValueError`` (a stored value that cannot be
    rebuilt, naming its thread, namespace, checkpoint and channel),
    ``InvalidThreadIdError`` (a config without ``configurable.thread_id``, or
    one that cannot be a stream id), ``SyncCallOnLoopError`` (a sync method
    called on the saver's loop), ``ForeignLoopError`` (used from a second event
    loop while the first still runs; once it has ended the saver moves) and the store's errors (``StoreUnavailableError``...).

    Args:
        store: A durably ``Store`` (opened by the saver on first use) or a store
            URL (``sqlite:///agents.db``, ``s3://bucket/prefix?...``, ``memory://name``).
        namespace: The durably namespace holding the threads (one stream each).
        serde: LangGraph serializer for values (None: ``JsonPlusSerializer`` in
            strict mode: stored values are untrusted, so reading one builds
            only LangGraph's safe types and ``allowed_types``, and imports
            nothing else; see ``with_allowlist``). A serializer of your own,
            or ``JsonPlusSerializer(allowed_msgpack_modules=True)``, builds
            whatever class a stored value names: anyone who can write the
            store's rows can then run code in every reader.
        allowed_types: Classes (or ``(module, name)`` pairs) of the graph's own
            state the default serializer may build: a pydantic model or a
            dataclass held in a channel. Only with ``serde=None``.
        cipher: A ``FrameCipher`` (``durably.AESGCMCipher``): every record and
            snapshot is encrypted with its stream and seq as associated data
            (None: stored unencrypted).
        redaction: A ``RedactionPolicy``: secret-named fields and credential
            tokens in channel values, writes and metadata are redacted before
            they are stored (the live graph keeps the originals).
        ttl: Seconds of inactivity (since the thread's last record was written)
            after which a thread is purged, on its next access or by ``asweep``;
            a thread waiting at an ``interrupt()`` is kept until it is resumed.
            None keeps threads forever.
        snapshot_min_bytes: Record bytes after which the first snapshot is written.
        cache_threads: How many threads' folds this process keeps in memory.

    Raises:
        InvalidArgumentError: ``ttl`` is not None and not > 0, or
            ``allowed_types`` given with a ``serde``.
    """

    def __init__(
        self,
        store: Store | str,
        *,
        namespace: str = "langgraph",
        serde: Any = None,
        allowed_types: Iterable[type | tuple[str, ...]] = (),
        cipher: FrameCipher | None = None,
        redaction: RedactionPolicy | None = None,
        ttl: float | None = None,
        snapshot_min_bytes: int = 256 * 1024,
        cache_threads: int = 256,
    ) -> None:
        allowed = tuple(allowed_types)
        if serde is not None and allowed:
            raise InvalidArgumentError("allowed_types applies to the default serializer: pass serde or allowed_types")
        super().__init__(serde=serde if serde is not None else default_serde(allowed))
        if ttl is not None and ttl <= 0:
            raise InvalidArgumentError(f"ttl must be > 0 seconds or None, got {ttl!r}")
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self.namespace = namespace
        self.values = StrictSerde(self.serde)
        self._plain = Codec()  # plain CBOR skeletons, decoded by a frame's rules
        self._redact = ValueRedactor(redaction) if redaction is not None and redaction.active else None
        self._bridge = LoopBridge(self._open, self._close, self._reopen)
        self._journal = ThreadJournal(
            self.store,
            Codec(cipher=cipher),
            cipher,
            namespace,
            self._versions_of,
            ttl=ttl,
            snapshot_min_bytes=snapshot_min_bytes,
            cache_threads=cache_threads,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> DurablySaver:
        """Build a saver on the store at ``url``; no I/O until first use.

        Args:
            url: A durably store URL (``sqlite:///agents.db``, ``memory://name``...).
            **options: The constructor's keyword arguments (``namespace``,
                ``cipher``, ``ttl``...).

        Returns:
            The saver.

        Raises:
            InvalidStoreURLError: The store rejects ``url``.
            InvalidArgumentError: As the constructor (a ``ttl`` <= 0).
        """
        return cls(url, **options)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> DurablySaver:
        """A shallow copy whose serializer also builds ``extra_allowlist``.

        LangGraph calls it when it compiles a graph with
        ``LANGGRAPH_STRICT_MSGPACK=true``, with the types of the graph's state
        schema; the copy shares this saver's store and caches.

        Args:
            extra_allowlist: ``(module, name)`` pairs.

        Returns:
            The copy (this saver when nothing is added).
        """
        clone = cast(DurablySaver, super().with_allowlist(extra_allowlist))
        if clone is self:
            return self
        clone.values = StrictSerde(clone.serde)
        return clone

    # -- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        await self.store.open()

    async def _close(self) -> None:
        await self.store.close()

    async def _reopen(self) -> None:
        """Before opening on a new loop: release what the old loop's connections hold
        (they cannot be used from here), and forget the threads (their locks were the old loop's)."""
        try:
            await self.store.close()
        except Exception as exc:  # a connection of a closed loop may fail to close; it is dropped either way
            _log.debug("closing the store of an ended event loop: %s", exc)
        self._journal.reset()

    async def __aenter__(self) -> DurablySaver:
        await self._bridge.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> DurablySaver:
        self._bridge.run(self._bridge.enter())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """Close the store (idempotent). Everything acknowledged is already durable."""
        await self._bridge.aclose()

    def close(self) -> None:
        """``aclose`` from a thread that is not the saver's loop; stops a loop the saver started."""
        self._bridge.close()

    # -- reading ---------------------------------------------------------------------------

    def _versions_of(self, stored: StoredCheckpoint, thread_id: str) -> dict[str, Any]:
        if stored.versions is None:
            wire = stored.wire
            skeleton = self._skeleton(
                wire, lambda r: CheckpointValueError(thread_id, wire["ns"], wire["id"], "(checkpoint)", r)
            )
            stored.versions = dict(skeleton.get("channel_versions", {}))
        return stored.versions

    def _skeleton(self, wire: dict[str, Any], where: Callable[[str], CheckpointValueError]) -> dict[str, Any]:
        """The stored checkpoint without its values: CBOR bytes (decoded only when
        read, so restoring a long thread does not decode every checkpoint), or
        LangGraph's serde for one holding non-plain data."""
        if wire.get("ck") is not None:
            try:
                decoded: dict[str, Any] = self._plain.loads(wire["ck"])
                return decoded
            except (CodecError, ValueError) as exc:
                raise where(f"checkpoint does not decode: {exc}") from exc
        type_, data = wire["ckt"]
        skeleton: dict[str, Any] = self.values.loads(type_, data, where)
        return skeleton

    def _tuple(
        self, thread_id: str, thread: Thread, stored: StoredCheckpoint, lent: dict[int, tuple[list[Any], list[Any]]]
    ) -> CheckpointTuple:
        """The tuple of ``stored``. Lists come from the thread's ``PrefixIndex``, whose items
        stay private (the next delta is checked against them): the caller gets copies,
        made once per ``lent`` (one read) and shared by the tuples of that read."""
        wire, state = stored.wire, thread.state
        ns, checkpoint_id = wire["ns"], wire["id"]

        def where(channel: str) -> Callable[[str], CheckpointValueError]:
            return lambda reason: CheckpointValueError(thread_id, ns, checkpoint_id, channel, reason)

        checkpoint = self._skeleton(wire, where("(checkpoint)"))
        stored.versions = dict(checkpoint.get("channel_versions", {}))
        values: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            key = (ns, channel, version)
            if key not in state.blobs:
                continue  # never given a value (as LangGraph's own savers: absent, not None)
            index = thread.prefixes.get((ns, channel))
            if index is None:
                index = thread.prefixes[(ns, channel)] = PrefixIndex()
            value = load_entry(self.values, state.blobs, key, index, where(channel))
            if value is EMPTY:
                continue
            if type(value) is list:
                thread.values[(ns, channel)] = (version, list(value))  # the next delta's base
                value = lend(index, lent)[: len(value)]
            values[channel] = value
        checkpoint["channel_values"] = values
        metadata = (
            _copy(wire["m"])
            if wire.get("m") is not None
            else self.values.loads(wire["mt"][0], wire["mt"][1], where("(metadata)"))
        )
        stored_writes = state.writes.get((ns, checkpoint_id), {})
        order = sorted(stored_writes, key=lambda k: writes_sort_key(stored_writes[k][3], *k))
        pending = [
            (
                task,
                stored_writes[(task, idx)][0],
                self.values.loads(
                    stored_writes[(task, idx)][1], stored_writes[(task, idx)][2], where(stored_writes[(task, idx)][0])
                ),
            )
            for task, idx in order
        ]
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        }
        parent = wire.get("p")
        parent_config: RunnableConfig | None = (
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None
        )
        # The skeleton is a stored Checkpoint (a TypedDict LangGraph wrote) with its values put back.
        return CheckpointTuple(config, cast(Checkpoint, checkpoint), metadata, parent_config, pending)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Fetch one checkpoint tuple (``BaseCheckpointSaver.aget_tuple``).

        The thread is restored from the store, or caught up with what other
        processes appended, first.

        Args:
            config: Names the thread (``thread_id``), ``checkpoint_ns`` ("" by
                default) and optionally a ``checkpoint_id`` (none: the latest).

        Returns:
            The checkpoint with its metadata, parent config and pending writes
                in ``writes_sort_key`` order; None when there is no such checkpoint.

        Raises:
            CheckpointValueError: A stored value cannot be rebuilt.
            InvalidThreadIdError: ``config`` has no usable ``thread_id``.
        """
        await self._bridge.enter()
        conf = config["configurable"]
        thread_id, ns = conf.get("thread_id"), conf.get("checkpoint_ns", "")
        async with self._journal.locked(thread_id) as thread:
            checkpoint_id = get_checkpoint_id(config) or thread.state.latest_id(ns)
            stored = thread.state.checkpoints.get(ns, {}).get(checkpoint_id) if checkpoint_id else None
            if stored is None:
                return None
            with paused_gc():
                return self._tuple(str(thread_id), thread, stored, {})

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """List checkpoints, newest first (``BaseCheckpointSaver.alist``).

        Ordered by checkpoint id (they sort by time) across namespaces and
        threads, as LangGraph's own savers: ``limit=1`` on a thread gives its
        newest checkpoint, a subgraph's included. One read of each thread's
        new records, whatever the number of checkpoints. A checkpoint holding
        a value that cannot be rebuilt (a class this process cannot import) is
        left out with a warning logged; loading it (``aget_tuple``) raises.

        Args:
            config: Names the thread; its ``checkpoint_ns`` / ``checkpoint_id``
                narrow the listing. None (or no ``thread_id``): every thread of
                the namespace.
            filter: Metadata keys whose values must be equal.
            before: Only checkpoints whose id is below its ``checkpoint_id``.
            limit: At most that many tuples (None: all).

        Yields:
            A ``CheckpointTuple`` per matching checkpoint, as ``aget_tuple`` gives it.

        Raises:
            InvalidThreadIdError: ``config``'s ``thread_id`` cannot be a stream id.
        """
        await self._bridge.enter()
        conf = (config or {}).get("configurable", {})
        thread_ids = (
            [conf["thread_id"]] if config and conf.get("thread_id") is not None else await self._journal.thread_ids()
        )
        want_ns, want_id = conf.get("checkpoint_ns"), conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        # First the ids that match, newest first across namespaces and threads (as LangGraph's
        # own savers order by checkpoint id); then the tuples of the ones within ``limit``.
        chosen: list[tuple[str, str, str]] = []  # (checkpoint id, thread id, ns)
        for thread_id in thread_ids:
            async with self._journal.locked(thread_id) as thread:
                for ns, by_id in thread.state.checkpoints.items():
                    if want_ns is not None and ns != want_ns:
                        continue
                    for checkpoint_id, stored in by_id.items():
                        if (want_id and checkpoint_id != want_id) or (before_id and checkpoint_id >= before_id):
                            continue
                        if filter and not self._matches(str(thread_id), stored, filter):
                            continue
                        chosen.append((checkpoint_id, str(thread_id), ns))
        chosen.sort(reverse=True)
        lent: dict[int, tuple[list[Any], list[Any]]] = {}
        if limit is not None:
            chosen = chosen[: max(limit, 0)]
        for checkpoint_id, thread_id, ns in chosen:
            async with self._journal.locked(thread_id) as thread:
                found = thread.state.checkpoints.get(ns, {}).get(checkpoint_id)
                if found is None:
                    continue  # deleted meanwhile
                try:
                    item = self._tuple(thread_id, thread, found, lent)
                except CheckpointValueError as exc:
                    # As LangGraph's savers: a listing names every checkpoint it can; this one
                    # fails with the typed error when it is loaded (aget_tuple).
                    _log.warning("listing skips checkpoint %s of thread %r: %s", checkpoint_id, thread_id, exc)
                    continue
            yield item

    def _matches(self, thread_id: str, stored: StoredCheckpoint, filter: dict[str, Any]) -> bool:
        wire = stored.wire
        metadata = (
            wire["m"]
            if wire.get("m") is not None
            else self.values.loads(
                wire["mt"][0],
                wire["mt"][1],
                lambda r: CheckpointValueError(thread_id, wire["ns"], wire["id"], "(metadata)", r),
            )
        )
        return all(metadata.get(k) == v for k, v in filter.items())

    # -- writing ---------------------------------------------------------------------------

    def _stored_form(self, value: Any, typed_key: str, plain_key: str) -> dict[str, Any]:
        if _plain(value):
            return {plain_key: value, typed_key: None}
        return {plain_key: None, typed_key: list(self.values.dumps(value))}

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Journal ``checkpoint`` with the values of the channels in ``new_versions`` (``BaseCheckpointSaver.aput``).

        Values are serialized at once, as LangGraph's own savers do. A value is
        stored once per ``(ns, channel, version)`` (the first stored wins); a
        list extending the one stored before is stored as the new items plus a
        reference. Saves submitted in the same event-loop turn share one
        append. Durable when it returns.

        Args:
            config: Names the thread, ``checkpoint_ns`` and, as
                ``checkpoint_id``, the parent checkpoint (none: a first one).
            checkpoint: The checkpoint to store.
            metadata: Its metadata, completed from the config's as LangGraph's
                ``get_serializable_checkpoint_metadata`` does (redacted when the
                saver redacts).
            new_versions: The channels given a new version by this checkpoint:
                only their values are stored.

        Returns:
            The config naming the stored checkpoint (thread, ns, its id).

        Raises:
            TypeError: ``serde`` cannot serialize a value (nothing written).
            UnencodableValueError: A ``TypeError`` too: the record cannot be
                encoded (a string that is not valid Unicode, a record over the
                codec's size limit); nothing written.
            InvalidThreadIdError: ``config`` has no usable ``thread_id``.
            ConflictError: Other writers kept winning the thread's appends.
            StoreUnavailableError: The store failed (the outcome is unknown; the
                next operation restores the thread).
        """
        await self._bridge.enter()
        conf = config["configurable"]
        thread_id, ns = conf.get("thread_id"), conf.get("checkpoint_ns", "")
        meta = get_serializable_checkpoint_metadata(config, metadata)
        if self._redact is not None:
            meta = self._redact(meta)
        skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values = checkpoint["channel_values"]
        run_id = meta.get("run_id")
        head = {
            "k": "c",
            "ns": ns,
            "id": checkpoint["id"],
            "p": conf.get("checkpoint_id"),
            "run": run_id if isinstance(run_id, str) else None,
            "ck": cbor2.dumps(skeleton) if _plain(skeleton) else None,
            "ckt": None if _plain(skeleton) else list(self.values.dumps(skeleton)),
            **self._stored_form(meta, "mt", "m"),
        }
        # Serialized now, as LangGraph's own savers do: the graph may change its objects once this returns.
        thread = self._journal.thread(thread_id)
        prepared, bases = [], {}
        for channel, version in new_versions.items():
            if (ns, channel, version) in thread.state.blobs:
                continue
            if channel not in values:
                prepared.append((channel, version, ["e"], None))
                continue
            value = values[channel]
            prepared.append(
                (
                    channel,
                    version,
                    build_entry(self.values, value, thread.values.get((ns, channel)), self._redact),
                    value,
                )
            )
            if type(value) is list:
                # The base of the next delta: copies, so an in-place edit the graph makes
                # later to an item stored now is seen as a change, not as the same item.
                base = thread.values.get((ns, channel))
                reused = prepared[-1][2][0] == DELTA and base is not None
                added = private_copy(value[len(base[1]) :] if reused and base else value)
                if added is not None:
                    bases[channel] = (version, base[1] + added if reused and base else added)

        def build(state: ThreadState) -> list[dict[str, Any]]:
            blobs = []
            for channel, version, entry, value in prepared:
                if (ns, channel, version) in state.blobs:
                    continue  # first wins, as in LangGraph's blob tables
                if entry[0] == DELTA and (ns, channel, entry[1]) not in state.blobs:
                    entry = build_entry(self.values, value, None, self._redact)  # its base was compacted away
                blobs.append([channel, version, entry])
            return [{**head, "b": blobs, "t": time.time()}]

        def after(thread: Thread) -> None:
            for channel, base in bases.items():
                thread.values[(ns, channel)] = base

        await self._journal.append(thread_id, build, after)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Journal a task's ``writes`` against the checkpoint in ``config`` (``BaseCheckpointSaver.aput_writes``).

        Regular writes already stored for ``(task_id, index)`` are kept (a
        retried task), special ones (error, interrupt, resume, scheduled)
        replace; a call that adds nothing appends nothing. Durable when it returns.

        Args:
            config: Names the thread, ``checkpoint_ns`` and the ``checkpoint_id`` the writes belong to.
            writes: ``(channel, value)`` pairs, in the task's order.
            task_id: The task that made them.
            task_path: The task's path (orders writes of different tasks).

        Raises:
            TypeError: ``serde`` cannot serialize a value (nothing written).
            UnencodableValueError: A ``TypeError`` too: the record cannot be
                encoded (over the codec's size limit...); nothing written.
            InvalidThreadIdError: ``config`` has no usable ``thread_id``.
            StoreUnavailableError: The store failed (the outcome is unknown).
        """
        await self._bridge.enter()
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = conf.get("thread_id"), conf.get("checkpoint_ns", ""), conf["checkpoint_id"]

        serialized: list[list[Any]] = []
        for idx, (channel, value) in enumerate(writes):  # now: the graph may change its objects later
            typed = self.values.dumps(self._redact(value) if self._redact is not None else value)
            serialized.append([WRITES_IDX_MAP.get(channel, idx), channel, *typed])

        def build(state: ThreadState) -> list[dict[str, Any]]:
            rows = [row for row in serialized if row[0] < 0 or not state.has_write(ns, checkpoint_id, task_id, row[0])]
            if not rows:
                return []
            return [
                {
                    "k": "w",
                    "ns": ns,
                    "id": checkpoint_id,
                    "task": task_id,
                    "path": task_path,
                    "w": rows,
                    "t": time.time(),
                }
            ]

        await self._journal.append(thread_id, build)

    # -- deleting and copying -------------------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        """Purge the thread's stream: every checkpoint, write and snapshot (``BaseCheckpointSaver.adelete_thread``).

        Args:
            thread_id: The thread to delete (unknown: no-op).

        Raises:
            InvalidThreadIdError: ``thread_id`` cannot be a stream id.
        """
        await self._bridge.enter()
        async with self._journal.locked(thread_id):
            await self._journal.purge(thread_id)

    async def _delete(self, thread_id: str, thread: Thread, doomed: list[list[str]]) -> None:
        """Tombstone ``doomed`` ([ns, id] pairs), then compact; the caller holds the thread's lock."""
        if doomed:
            await self._journal.commit(thread, lambda state: [{"k": "x", "c": doomed, "t": time.time()}])
            await self._journal.snapshot(thread)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints of the given runs and their writes (``BaseCheckpointSaver.adelete_for_runs``).

        Looks in every thread of the namespace. Deleted checkpoints are
        tombstoned, then the thread is snapshotted and compacted, so their
        bytes leave the store.

        Args:
            run_ids: The ``run_id`` values (from checkpoint metadata) to delete;
                empty: no-op.
        """
        await self._bridge.enter()
        wanted = set(run_ids)
        if not wanted:
            return
        for thread_id in await self._journal.thread_ids():
            async with self._journal.locked(thread_id) as thread:
                doomed = [
                    [ns, cid]
                    for ns, by_id in thread.state.checkpoints.items()
                    for cid, stored in by_id.items()
                    if stored.wire.get("run") in wanted
                ]
                await self._delete(thread_id, thread, doomed)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread into another (``BaseCheckpointSaver.acopy_thread``).

        The copy is one record appended to the target; a source without
        checkpoints copies nothing.

        Args:
            source_thread_id: The thread to copy from.
            target_thread_id: The thread to copy into (what it holds stays).

        Raises:
            InvalidThreadIdError: A thread id cannot be a stream id.
        """
        await self._bridge.enter()
        async with self._journal.locked(source_thread_id) as source:
            if not any(source.state.checkpoints.values()):
                return
            body = source.state.body(lambda stored: self._versions_of(stored, str(source_thread_id)))
        await self._journal.append(target_thread_id, lambda state: [{"k": "i", **body, "t": time.time()}])

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune checkpoints of the given threads (``BaseCheckpointSaver.aprune``).

        Args:
            thread_ids: The threads to prune.
            strategy: ``keep_latest``: keep only each checkpoint namespace's
                newest checkpoint (and its writes), then compact the store;
                ``delete``: purge the threads.

        Raises:
            InvalidPruneStrategyError: ``strategy`` is neither of those.
        """
        await self._bridge.enter()
        if strategy not in ("keep_latest", "delete"):
            raise InvalidPruneStrategyError(f"unknown prune strategy {strategy!r} (use 'keep_latest' or 'delete')")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            async with self._journal.locked(thread_id) as thread:
                doomed = [
                    [ns, cid] for ns, by_id in thread.state.checkpoints.items() for cid in by_id if cid != max(by_id)
                ]
                await self._delete(thread_id, thread, doomed)

    async def asweep(self) -> list[str]:
        """Purge every thread of the namespace idle for longer than ``ttl``.

        A durably addition (not in ``BaseCheckpointSaver``): expired threads
        are otherwise purged only when next accessed. Reads each thread once.

        Returns:
            The ids of the threads found purged, sorted; [] when the saver has no ``ttl``.
        """
        await self._bridge.enter()
        if self._journal.ttl is None:
            return []
        purged = []
        for thread_id in await self._journal.thread_ids():
            async with self._journal.locked(thread_id) as thread:
                if thread.state.seq == 0:
                    purged.append(thread_id)
        return purged

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """The channel version after ``current`` (``BaseCheckpointSaver.get_next_version``).

        As LangGraph's own savers: a zero-padded counter and a random fraction,
        so two forks of one thread never give different values one version.

        Args:
            current: The channel's version now (None: the channel has none yet).
            channel: Unused, as in LangGraph.

        Returns:
            ``"<32-digit counter>.<random fraction>"``, greater than ``current``.
        """
        number = 0 if current is None else current if isinstance(current, int) else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"
