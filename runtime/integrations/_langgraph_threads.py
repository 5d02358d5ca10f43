"""One LangGraph thread as a durably stream: its records, their fold, its snapshot.

The format of ``durably.integrations.langgraph``'s threads, kept apart from
that package (and from LangGraph) so durably's own readers (``verify``,
``show``, ``sweep``, ``reencrypt``, the console) understand threads on a host
without the ``langgraph`` extra. Channel values stay serializer bytes here.

A thread is the stream ``(namespace, thread_id)``. Every record is a frame of
schema ``durably.langgraph`` (frame schema id 16, version 1) holding a CBOR map:

* ``{"k": "c", ...}`` a checkpoint: ``ns``, ``id``, ``p`` (parent id or
  None), ``run`` (the metadata's run_id), the checkpoint without its values
  (``ck``: its CBOR as bytes, decoded when read, or ``ckt``: ``[type, bytes]`` from LangGraph's serde
  when it holds non-plain data), the metadata likewise (``m``/``mt``), and
  ``b``: the channel values given a new version, ``[[channel, version, entry]]``
  (entries: ``values.py``);
* ``{"k": "w", ...}`` one ``put_writes`` batch: ``ns``, ``id`` (the
  checkpoint), ``task``, ``path``, ``w``: ``[[idx, channel, type, bytes]]``;
* ``{"k": "x", "c": [[ns, id]]}`` checkpoints deleted (with their writes);
* ``{"k": "i", ...}`` a whole thread copied in (``copy_thread``, imports):
  the snapshot body below.

Every record carries ``t``, unix seconds (the thread's last activity, for TTL).
The fold keeps everything live in memory; a snapshot (schema id 17) is that
fold at a seq, ``{"t", "c": [checkpoints], "b": [[ns, channel, version, entry]],
"w": [[ns, id, task, idx, channel, type, bytes, path]]}``, so restore reads the
latest snapshot and the records after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durably.storage._codec import Codec
from durably.storage._errors import CorruptRecordError, UnknownSchemaVersionError
from durably.storage._spi import StreamId

RECORD_SCHEMA = 16
SNAPSHOT_SCHEMA = 17
VERSION = 1
SCHEMA_NAMES = {RECORD_SCHEMA: "durably.langgraph", SNAPSHOT_SCHEMA: "durably.langgraph-snapshot"}

#: The kinds of a stored channel value (``langgraph/_values.py``): whole, empty, a list delta.
FULL, EMPTY, DELTA = "f", "e", "d"
#: LangGraph's channel for an ``interrupt()`` (``langgraph.checkpoint.base.INTERRUPT``), as it is stored.
INTERRUPT = "__interrupt__"
#: LangGraph's channel for a task's error (``langgraph.checkpoint.base.ERROR``).
ERROR = "__error__"

BlobKey = tuple[str, str, Any]  # (checkpoint_ns, channel, version)


def decode_frame(codec: Codec, data: bytes, stream: StreamId, seq: int, schema: int) -> dict[str, Any]:
    """The map a thread frame holds, checked: ``schema`` (``RECORD_SCHEMA`` or
    ``SNAPSHOT_SCHEMA``), its version, a map. Raises ``CodecError`` subclasses:
    ``CorruptRecordError`` (bad bytes, another schema, not a map),
    ``UnknownSchemaVersionError``, the cipher's errors."""
    frame = codec.decode(data, stream=stream, seq=seq)
    if frame.schema_id != schema:
        raise CorruptRecordError(
            f"frame holds schema {frame.schema_id}, expected {SCHEMA_NAMES[schema]}", stream=stream, seq=seq
        )
    if frame.schema_version != VERSION:
        raise UnknownSchemaVersionError(SCHEMA_NAMES[schema], frame.schema_version, VERSION, stream=stream, seq=seq)
    if not isinstance(frame.value, dict):
        raise CorruptRecordError(f"{SCHEMA_NAMES[schema]} frame is not a map", stream=stream, seq=seq)
    return frame.value


@dataclass(slots=True)
class StoredCheckpoint:
    """A checkpoint as stored: its record map minus ``b`` (``ns``, ``id``, ``p``,
    ``run``, ``ck``/``ckt``, ``m``/``mt``), plus ``versions`` (channel -> version)
    once known."""

    wire: dict[str, Any]
    versions: dict[str, Any] | None = None


@dataclass
class ThreadState:
    """The fold of one thread's records: ``checkpoints[ns][id]``, ``blobs[(ns,
    channel, version)]``, ``writes[(ns, id)][(task, idx)] = [channel, type, bytes,
    path]``, ``seq`` (last record folded), ``at`` (unix seconds of the last record)."""

    checkpoints: dict[str, dict[str, StoredCheckpoint]] = field(default_factory=dict)
    blobs: dict[BlobKey, list[Any]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], list[Any]]] = field(default_factory=dict)
    seq: int = 0
    at: float = 0.0

    def apply(self, value: Any, seq: int) -> None:
        """Fold one decoded record. Raises ``CorruptRecordError`` for a shape it does not know."""
        try:
            kind = value["k"]
            if kind == "c":
                self._checkpoint(value)
            elif kind == "w":
                self._writes(value["ns"], value["id"], value["task"], value["path"], value["w"])
            elif kind == "x":
                for ns, checkpoint_id in value["c"]:
                    self.checkpoints.get(ns, {}).pop(checkpoint_id, None)
                    self.writes.pop((ns, checkpoint_id), None)
            elif kind == "i":
                self.merge(value)
            else:
                raise KeyError(f"kind {kind!r}")
            self.at = float(value["t"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptRecordError(f"not a LangGraph thread record: {exc}", seq=seq) from exc
        self.seq = seq

    def _checkpoint(self, value: dict[str, Any]) -> None:
        ns = value["ns"]
        for channel, version, entry in value["b"]:
            self.blobs.setdefault((ns, channel, version), entry)  # first wins, as LangGraph's blob tables
        wire = {k: v for k, v in value.items() if k not in ("b", "k", "t")}
        self.checkpoints.setdefault(ns, {})[value["id"]] = StoredCheckpoint(wire)

    def _writes(self, ns: str, checkpoint_id: str, task: str, path: str, writes: list[list[Any]]) -> None:
        stored = self.writes.setdefault((ns, checkpoint_id), {})
        for idx, channel, type_, data in writes:
            key = (task, idx)
            if idx >= 0 and key in stored:
                continue  # a retried task's regular writes: the first ones stand
            stored[key] = [channel, type_, data, path]  # special writes (error, interrupt...) replace

    def has_write(self, ns: str, checkpoint_id: str, task: str, idx: int) -> bool:
        """True when a regular write ``(task, idx)`` of that checkpoint is stored."""
        return (task, idx) in self.writes.get((ns, checkpoint_id), {})

    def interrupted(self) -> bool:
        """True when the newest checkpoint of some namespace has an ``interrupt()``
        among its writes: the thread waits for a ``Command(resume=...)``."""
        for ns, by_id in self.checkpoints.items():
            if by_id and any(write[0] == INTERRUPT for write in self.writes.get((ns, max(by_id)), {}).values()):
                return True
        return False

    def latest_id(self, ns: str) -> str | None:
        """The newest checkpoint id of ``ns`` (ids sort by time: uuid6), or None."""
        ids = self.checkpoints.get(ns)
        return max(ids) if ids else None

    def live_blobs(self, versions_of: Callable[[StoredCheckpoint], dict[str, Any]]) -> dict[BlobKey, list[Any]]:
        """The blobs some live checkpoint reads, with the bases their deltas need.

        ``versions_of(stored_checkpoint)`` returns its channel versions."""
        keep: dict[BlobKey, list[Any]] = {}
        for ns, by_id in self.checkpoints.items():
            for stored in by_id.values():
                for channel, version in versions_of(stored).items():
                    key = (ns, channel, version)
                    while key not in keep and key in self.blobs:
                        entry = keep[key] = self.blobs[key]
                        if entry[0] != DELTA:
                            break
                        key = (ns, channel, entry[1])
        return keep

    def body(self, versions_of: Callable[[StoredCheckpoint], dict[str, Any]]) -> dict[str, Any]:
        """The live part of the thread as a snapshot / copy body (see the module docstring)."""
        return {
            "t": self.at,
            "c": [stored.wire for by_id in self.checkpoints.values() for stored in by_id.values()],
            "b": [[ns, ch, ver, entry] for (ns, ch, ver), entry in self.live_blobs(versions_of).items()],
            "w": [
                [ns, cid, task, idx, *write]
                for (ns, cid), by_key in self.writes.items()
                if cid in self.checkpoints.get(ns, {})
                for (task, idx), write in by_key.items()
            ],
        }

    def merge(self, body: dict[str, Any]) -> None:
        """Fold a snapshot / copy body in."""
        for ns, channel, version, entry in body["b"]:
            self.blobs.setdefault((ns, channel, version), entry)
        for wire in body["c"]:
            self.checkpoints.setdefault(wire["ns"], {})[wire["id"]] = StoredCheckpoint(dict(wire))
        for ns, cid, task, idx, channel, type_, data, path in body["w"]:
            self._writes(ns, cid, task, path, [[idx, channel, type_, data]])
        self.at = max(self.at, float(body["t"]))

    @classmethod
    def from_snapshot(cls, seq: int, body: dict[str, Any]) -> ThreadState:
        """The state a snapshot at ``seq`` holds. Raises ``CorruptRecordError``."""
        state = cls()
        try:
            state.merge(body)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptRecordError(f"not a LangGraph thread snapshot: {exc}", seq=seq) from exc
        state.seq = seq
        return state
