"""LangGraph threads among a namespace's streams, as durably's readers see them.

A stream written by ``durably.integrations.langgraph.DurablySaver`` holds
frames of schema ``durably.langgraph`` (id 16; its snapshots 17), not agent
records (``durably.integrations._langgraph_threads`` gives the format). The
readers (``verify``, ``agents``, ``show``, ``history``, ``state``, ``sweep``,
the console) recognise such a stream by its frames and read it here: the
frames are checked and folded without LangGraph, channel values stay
serializer bytes (``durably state`` decodes the latest ones when the
``langgraph`` extra is installed).

A thread's status, in durably's words: ``waiting_approval`` while its newest
checkpoint holds an ``interrupt()`` (a ``Command(resume=...)`` continues it),
``failed`` while its newest root checkpoint holds a task's error, else
``finished`` (idle: the next invoke continues the conversation). Retention
(``durably sweep``) applies the TTL of that status from the thread's last record.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from durably._loop.state import FAILED, FINISHED, WAITING_APPROVAL, AgentState
from durably.integrations._langgraph_threads import (
    ERROR,
    RECORD_SCHEMA,
    SNAPSHOT_SCHEMA,
    VERSION,
    ThreadState,
    decode_frame,
)
from durably.storage._codec import HEADER_SIZE, MAGIC, Codec, FrameCipher
from durably.storage._errors import CodecError, CorruptRecordError
from durably.storage._spi import Store, StoredRecord, StoredSnapshot, StreamId

#: The frame header's byte that holds the schema id (after magic, format and flags).
_SCHEMA_BYTE = 4
#: A thread's records as ``history`` names them.
THREAD_KINDS = {"c": "checkpoint", "w": "writes", "x": "deleted", "i": "copied_in"}


def frame_schema(data: bytes | bytearray | memoryview) -> int | None:
    """The schema id a frame's header names, without decoding it (None: not a frame).

    Only a hint for choosing the decoder: the decode that follows checks the
    header's checksum (and, encrypted, its associated data) as always."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < HEADER_SIZE or bytes(data[:2]) != MAGIC:
        return None
    return int(data[_SCHEMA_BYTE])


def is_thread_frame(data: bytes | bytearray | memoryview) -> bool:
    """True when ``data`` is a frame of a LangGraph thread (record or snapshot)."""
    return frame_schema(data) in (RECORD_SCHEMA, SNAPSHOT_SCHEMA)


async def is_thread(store: Store, stream: StreamId) -> bool:
    """True when ``stream`` is a LangGraph thread: its first stored record, or with none
    left (compacted into its snapshot) its newest snapshot, is a thread frame. One
    one-record read for an agent's stream. Raises ``StoreUnavailableError``."""
    async with aclosing(store.read(stream, 0, page_size=1)) as records:
        async for stored in records:
            return is_thread_frame(stored.data)
    snapshot = await store.get_snapshot(stream)
    return snapshot is not None and is_thread_frame(snapshot.data)


def fold_record(state: ThreadState, codec: Codec, stored: StoredRecord, stream: StreamId) -> dict[str, Any]:
    """Decode one thread record, fold it into ``state`` and return its map. Raises as ``decode_frame``,
    and ``CorruptRecordError`` for a map that is not a thread record."""
    value = decode_frame(codec, stored.data, stream, stored.seq, RECORD_SCHEMA)
    try:
        state.apply(value, stored.seq)
    except CorruptRecordError as exc:
        raise CorruptRecordError(str(exc), stream=stream, seq=stored.seq) from exc
    return value


def snapshot_state(codec: Codec, stored: StoredSnapshot, stream: StreamId) -> ThreadState:
    """The fold a thread snapshot holds. Raises as ``decode_frame``."""
    body = decode_frame(codec, stored.data, stream, stored.seq, SNAPSHOT_SCHEMA)
    try:
        return ThreadState.from_snapshot(stored.seq, body)
    except CorruptRecordError as exc:
        raise CorruptRecordError(str(exc), stream=stream, seq=stored.seq) from exc


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """What the readers say about one thread.

    Attributes:
        stream: The thread's stream (``agent_id`` is the ``thread_id``).
        seq: The last record folded.
        status: ``waiting_approval``, ``failed`` or ``finished`` (module docstring).
        reason: Why, for people.
        checkpoints: Live checkpoints, all namespaces.
        writes: Pending writes stored.
        namespaces: The checkpoint namespaces ("" is the root graph), sorted.
        latest: Per namespace, the newest checkpoint id.
        step: The ``step`` of the newest root checkpoint's metadata (None: unknown).
        run_id: The ``run_id`` of the newest root checkpoint (None: none).
        created_at: Unix seconds of the first record, when it is still stored.
        last_activity_at: Unix seconds of the last record (None: no record yet).
        channels: The channels of the newest root checkpoint's values, each
            ``{"channel", "version", "form"}`` (``form``: ``whole``, ``delta``, ``empty``).
        state: The fold (channel values are serializer bytes).
    """

    stream: StreamId
    seq: int
    status: str
    reason: str
    checkpoints: int
    writes: int
    namespaces: list[str]
    latest: dict[str, str]
    step: int | None
    run_id: str | None
    created_at: float | None
    last_activity_at: float | None
    channels: list[dict[str, Any]]
    state: ThreadState

    def to_json(self) -> dict[str, Any]:
        """A plain dict for ``--json`` and the console: every field but ``state``, the stream as names."""
        return {
            "namespace": self.stream.namespace,
            "thread_id": self.stream.agent_id,
            "kind": "langgraph_thread",
            "seq": self.seq,
            "status": self.status,
            "reason": self.reason,
            "checkpoints": self.checkpoints,
            "writes": self.writes,
            "checkpoint_namespaces": self.namespaces,
            "latest": self.latest,
            "step": self.step,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "last_activity_at": self.last_activity_at,
            "channels": self.channels,
        }


async def load_thread(store: Store, codec: Codec, stream: StreamId) -> tuple[ThreadState, float | None]:
    """The thread's fold (latest snapshot plus the records after it) and the time of its
    first record when that record is still stored (else None).

    Raises ``CodecError`` subclasses for a frame that does not read, and
    ``StoreUnavailableError``."""
    stored = await store.get_snapshot(stream)
    state = ThreadState() if stored is None else snapshot_state(codec, stored, stream)
    created = None
    async for record in store.read(stream, state.seq):
        value = fold_record(state, codec, record, stream)
        if record.seq == 1:
            created = float(value.get("t", 0.0)) or None
    return state, created


def summarize(stream: StreamId, state: ThreadState, created_at: float | None) -> ThreadSummary:
    """The ``ThreadSummary`` of a fold."""
    latest = {ns: max(by_id) for ns, by_id in state.checkpoints.items() if by_id}
    root = state.checkpoints.get("", {}).get(latest.get("", ""))
    status, reason = FINISHED, "LangGraph thread, idle: the next invoke continues it"
    if state.interrupted():
        status, reason = (
            WAITING_APPROVAL,
            "LangGraph thread waiting at an interrupt(): Command(resume=...) continues it",
        )
    elif root is not None and any(w[0] == ERROR for w in state.writes.get(("", root.wire["id"]), {}).values()):
        status, reason = FAILED, "LangGraph thread: a task failed at the newest checkpoint"
    metadata = root.wire.get("m") if root is not None else None
    step = metadata.get("step") if isinstance(metadata, dict) else None
    channels = []
    if root is not None:
        for channel, version, entry in _root_channels(state, root.wire["id"]):
            form = {"f": "whole", "d": "delta", "e": "empty"}.get(entry[0], str(entry[0]))
            channels.append({"channel": channel, "version": version, "form": form})
    return ThreadSummary(
        stream=stream,
        seq=state.seq,
        status=status,
        reason=reason,
        checkpoints=sum(len(by_id) for by_id in state.checkpoints.values()),
        writes=sum(len(by_key) for by_key in state.writes.values()),
        namespaces=sorted(ns for ns, by_id in state.checkpoints.items() if by_id),
        latest=latest,
        step=step if isinstance(step, int) else None,
        run_id=root.wire.get("run") if root is not None else None,
        created_at=created_at,
        last_activity_at=state.at or None,
        channels=channels,
        state=state,
    )


def _root_channels(state: ThreadState, checkpoint_id: str) -> list[tuple[str, Any, list[Any]]]:
    """(channel, version, stored entry) of the root checkpoint's values, by the channel
    versions its skeleton names (a skeleton LangGraph's serializer wrote needs LangGraph:
    then the newest stored version of each root channel stands for it)."""
    wire = state.checkpoints[""][checkpoint_id].wire
    versions: dict[str, Any] | None = None
    if isinstance(wire.get("ck"), bytes):
        try:
            skeleton = Codec().loads(wire["ck"])
            versions = dict(skeleton.get("channel_versions", {}))
        except (CodecError, ValueError, TypeError, AttributeError):
            versions = None
    if versions is None:
        versions = {}
        for ns, channel, version in state.blobs:
            if ns == "" and (channel not in versions or str(version) > str(versions[channel])):
                versions[channel] = version
    return [
        (channel, version, state.blobs[("", channel, version)])
        for channel, version in sorted(versions.items())
        if ("", channel, version) in state.blobs
    ]


async def read_summary(store: Store, codec: Codec, stream: StreamId) -> ThreadSummary:
    """``load_thread`` then ``summarize``. Raises as ``load_thread``."""
    state, created = await load_thread(store, codec, stream)
    return summarize(stream, state, created)


async def summary_if_thread(store: Store, codec: Codec, namespace: str, agent_id: str) -> ThreadSummary | None:
    """``read_summary`` of ``agent_id`` when its stream is a LangGraph thread, else None (an
    agent, no stream, or an id that cannot be a stream: the agent readers answer those).
    Raises as ``load_thread``."""
    try:
        stream = StreamId(namespace, agent_id)
    except ValueError:
        return None
    if not await is_thread(store, stream):
        return None
    return await read_summary(store, codec, stream)


async def newest_values(
    store: Store, namespace: str, thread_id: str, cipher: FrameCipher | None
) -> dict[str, str] | str:
    """The thread's newest root values, one line per channel, through the saver's decoder;
    or why they cannot be shown (the ``langgraph`` extra missing, a value that cannot be
    rebuilt here). ``store`` is open and stays open. Raises ``StoreUnavailableError``."""
    try:
        from durably.integrations.langgraph._latest import latest_values
    except ImportError as exc:  # ExtraNotInstalledError is one
        return f"values need the langgraph extra: {exc}"
    return await latest_values(store, namespace, thread_id, cipher)


def thread_agent_state(summary: ThreadSummary) -> AgentState:
    """An ``AgentState`` standing for the thread where the readers list agents (status,
    reason, seq; definition ``langgraph``)."""
    return AgentState(
        namespace=summary.stream.namespace,
        agent_id=summary.stream.agent_id,
        run_id=summary.run_id or "",
        definition={"name": "langgraph", "version": "", "digest": ""},
        status=summary.status,
        reason=summary.reason,
        last_seq=summary.seq,
    )


def thread_entry(codec: Codec, stored: StoredRecord, stream: StreamId) -> tuple[str, float, str, dict[str, Any]]:
    """One thread record as ``history`` shows it: ``(kind, at, summary, payload)``, ``kind``
    one of ``THREAD_KINDS``' values; the payload names what the record holds (values as
    their size in bytes). Raises as ``decode_frame``."""
    value = decode_frame(codec, stored.data, stream, stored.seq, RECORD_SCHEMA)
    summary, payload = _describe(value)
    kind = str(value.get("k"))
    return THREAD_KINDS.get(kind, kind), float(value.get("t", 0.0)), summary, payload


def _describe(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind, ns = value.get("k"), value.get("ns", "")
    where = f" in {ns!r}" if ns else ""
    if kind == "c":
        channels = [[c, v, e[0], sum(len(p) for p in e if isinstance(p, bytes))] for c, v, e in value.get("b", [])]
        stored_metadata = value.get("m")
        metadata: dict[str, Any] = stored_metadata if isinstance(stored_metadata, dict) else {}
        payload = {"checkpoint_ns": ns, "checkpoint_id": value.get("id"), "parent_id": value.get("p")}
        payload |= {"run_id": value.get("run"), "metadata": metadata, "channels": channels}
        step = f" step {metadata['step']}" if "step" in metadata else ""
        source = f" ({metadata['source']})" if "source" in metadata else ""
        names = ", ".join(str(c[0]) for c in channels) or "no channel"
        return f"checkpoint {value.get('id')}{where}{step}{source}: {names}", payload
    if kind == "w":
        writes = [[w[0], w[1], len(w[3]) if isinstance(w[3], bytes) else 0] for w in value.get("w", [])]
        payload = {"checkpoint_ns": ns, "checkpoint_id": value.get("id"), "task": value.get("task"), "writes": writes}
        names = ", ".join(str(w[1]) for w in writes)
        return f"task {value.get('task')} wrote {names} at checkpoint {value.get('id')}{where}", payload
    if kind == "x":
        return f"{len(value.get('c', []))} checkpoints deleted", {"deleted": value.get("c", [])}
    copied = len(value.get("c", []))
    return f"{copied} checkpoints copied in", {"checkpoints": copied}


def encode_record(codec: Codec, value: dict[str, Any], stream: StreamId, seq: int) -> bytes:
    """A thread record's frame for ``stream`` at ``seq``, under ``codec``'s current key."""
    return codec.encode(RECORD_SCHEMA, VERSION, value, path="langgraph", check=False, stream=stream, seq=seq)


def encode_snapshot(codec: Codec, state: ThreadState, stream: StreamId) -> bytes:
    """A snapshot frame of the whole fold at ``state.seq`` (every stored value kept, so
    no decoder of LangGraph's is needed), under ``codec``'s current key."""
    body = {
        "t": state.at,
        "c": [stored.wire for by_id in state.checkpoints.values() for stored in by_id.values()],
        "b": [[ns, channel, version, entry] for (ns, channel, version), entry in state.blobs.items()],
        "w": [
            [ns, cid, task, idx, *write]
            for (ns, cid), by_key in state.writes.items()
            if cid in state.checkpoints.get(ns, {})
            for (task, idx), write in by_key.items()
        ],
    }
    return codec.encode(SNAPSHOT_SCHEMA, VERSION, body, path="langgraph", check=False, stream=stream, seq=state.seq)


def marker(at: float) -> dict[str, Any]:
    """A thread record that changes nothing but carries ``at`` as its time: the record a
    rewrite (``durably reencrypt``) leaves, so the thread stays dated by its last activity."""
    return {"k": "i", "c": [], "b": [], "w": [], "t": at}
