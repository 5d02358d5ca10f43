"""``DurablySession``: the OpenAI Agents SDK's ``Session`` protocol on a durably stream.

A session is the stream ``(namespace, session_id)``. Every change is one record,
a frame of schema ``durably.openai-agents-session`` (frame schema id 24,
version 1) holding a CBOR map with ``t`` (unix seconds) and ``k``:

* ``{"k": "a", "i": [item, ...]}`` items added (the SDK's input items, as dicts);
* ``{"k": "p"}`` the newest item popped.

A snapshot (schema id 25) is ``{"t", "i": [items]}`` at a seq; once the records
after the last snapshot outnumber ``SNAPSHOT_EVERY`` a new one is written and the
records it covers deleted, so a session holds one snapshot and a short tail.
``clear_session`` purges the stream (``Store.delete_stream``): cleared items are
gone from the store, not hidden.

Every write appends with the expected seq this object last saw: another process
that wrote in between makes it re-read and try again (a ``ConflictError`` is
never lost work). Frames go through durably's codec, so a ``Runtime``'s
encryption seals them, bound to their place.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.storage._codec import Codec, FrameCipher
from durably.storage._errors import ConflictError, CorruptRecordError
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

RECORD_SCHEMA = 24
SNAPSHOT_SCHEMA = 25
VERSION = 1
#: A snapshot is written once this many records follow the last one.
SNAPSHOT_EVERY = 64
#: The namespace sessions go to unless told otherwise.
DEFAULT_NAMESPACE = "openai-agents-sessions"
_WRITE_ATTEMPTS = 32


class DurablySession:
    """The SDK's ``Session`` (``get_items``/``add_items``/``pop_item``/``clear_session``) on a durably stream.

    ``DurablySession("user-42", rt)`` keeps the session in the store of the
    ``durably.Runtime`` ``rt`` (opened by ``async with rt``), sealed with its
    encryption; or pass an open ``Store`` and, optionally, ``encryption``
    (a ``FrameCipher``). Pass it as ``Runner.run(agent, input, session=...)``.

    Args:
        session_id: The session's id: the stream's agent id (any non-empty str up to 200 chars).
        store: A ``durably.Runtime`` or an open ``Store``.
        encryption: A ``FrameCipher`` for a bare store (a Runtime brings its own).
        namespace: The stream's namespace (default ``openai-agents-sessions``).
        ttl: Seconds of inactivity after which the session is purged when next
            touched (None: kept until cleared). Counted from its last write.
        session_settings: The SDK's ``SessionSettings`` (its default ``limit``).

    Raises:
        InvalidArgumentError: A session id or namespace a stream cannot have, or a negative ``ttl``.
        ArgumentTypeError: ``store`` neither a Runtime nor a Store.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Any,
        *,
        encryption: FrameCipher | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        ttl: float | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(store, Store) and not (hasattr(store, "encryption") and hasattr(store, "namespace")):
            raise ArgumentTypeError(f"DurablySession needs a durably Runtime or Store, got {type(store).__name__}")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0):
            raise InvalidArgumentError(f"DurablySession: ttl must be None or seconds >= 0, got {ttl!r}")
        self.session_id = session_id
        self.session_settings = session_settings
        self.stream = StreamId(namespace, session_id)
        self._owner = store
        self._cipher = encryption
        self._ttl = ttl
        self._codec: Codec | None = None
        self._lock = asyncio.Lock()
        self._items: list[Any] = []
        self._seq = 0  # the last seq folded into _items
        self._snapshot_seq = 0
        self._at = 0.0  # unix seconds of the last record folded

    def _store(self) -> Store:
        owner = self._owner
        if isinstance(owner, Store):
            return owner
        store: Store = owner.store  # a Runtime: its store exists once it is started
        return store

    def _frames(self) -> Codec:
        if self._codec is None:
            cipher = self._cipher if isinstance(self._owner, Store) else self._owner.encryption
            self._codec = Codec(cipher=cipher)
        return self._codec

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` only the newest ``limit`` of them.

        Args:
            limit: How many of the newest items (None: the session's ``session_settings.limit``, else all).

        Returns:
            The items (the SDK's input items, as dicts).

        Raises:
            CorruptRecordError: A stored frame that is not this session's (or fails its checks).
            StoreUnavailableError: The store cannot be reached.
        """
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        async with self._lock:
            await self._sync()
            items = self._items if limit is None else self._items[-limit:] if limit > 0 else []
            return list(items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` after the current ones.

        Args:
            items: The SDK's input items (dicts of plain data).

        Raises:
            UnencodableValueError: An item holding a value CBOR cannot store (nothing written).
            StoreUnavailableError: The store cannot be reached.
        """
        if not items:
            return
        async with self._lock:
            await self._write({"k": "a", "i": [dict(item) for item in items]})

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it.

        Returns:
            The item removed; None (and nothing written) for an empty session.

        Raises:
            ConflictError: Other writers got there first, again and again (32 times in a row).
            StoreUnavailableError: The store cannot be reached.
        """
        async with self._lock:
            for _ in range(_WRITE_ATTEMPTS):
                await self._sync()
                if not self._items:
                    return None
                item: TResponseInputItem = self._items[-1]
                if await self._try_append({"k": "p"}):
                    return item
            raise ConflictError(self.stream, self._seq, None)

    async def clear_session(self) -> None:
        """Purge the session's stream: its items are deleted from the store.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """
        async with self._lock:
            await self._store().delete_stream(self.stream)
            self._reset()

    def _reset(self) -> None:
        self._items, self._seq, self._snapshot_seq, self._at = [], 0, 0, 0.0

    async def _write(self, value: dict[str, Any]) -> None:
        for _ in range(_WRITE_ATTEMPTS):
            await self._sync()
            if await self._try_append(value):
                return
        raise ConflictError(self.stream, self._seq, None)

    async def _try_append(self, value: dict[str, Any]) -> bool:
        """Append one record after ``_seq``; False when another writer was first (then re-read)."""
        value = {**value, "t": time.time()}
        seq = self._seq + 1
        frame = self._frames().encode(
            RECORD_SCHEMA, VERSION, value, path="session item", stream=self.stream, seq=seq, small=True
        )
        try:
            await self._store().append(self.stream, self._seq, [frame])
        except ConflictError:
            return False
        self._fold(value)
        self._seq = seq
        if self._seq - self._snapshot_seq >= SNAPSHOT_EVERY:
            await self._snapshot()
        return True

    async def _snapshot(self) -> None:
        store, seq = self._store(), self._seq
        data = self._frames().encode(
            SNAPSHOT_SCHEMA, VERSION, {"t": self._at, "i": self._items}, path="session", stream=self.stream, seq=seq
        )
        await store.put_snapshot(self.stream, seq, data)
        await store.delete_records(self.stream, seq)
        await store.delete_snapshots(self.stream, seq)
        self._snapshot_seq = seq

    async def _sync(self) -> None:
        """Bring ``_items`` up to the stream's last seq, restoring from its snapshot
        when records this object has not folded were compacted away or the stream
        was purged; purge it first when its ``ttl`` ran out."""
        store = self._store()
        last = await store.last_seq(self.stream)
        if last < self._seq:  # purged (cleared) by another writer, maybe started again
            self._reset()
        if last > self._seq:
            # A gap, or nothing left to read up to ``last``: those records were
            # compacted behind a snapshot by another writer.
            if not await self._read_after(self._seq) or self._seq < last:
                await self._restore()
        if self._ttl is not None and self._seq and time.time() - self._at > self._ttl:
            await store.delete_stream(self.stream)
            self._reset()

    async def _read_after(self, after: int) -> bool:
        """Fold the records after ``after``; False when the next one is gone (compacted)."""
        expected = after + 1
        async for stored in self._store().read(self.stream, after):
            if stored.seq != expected:
                return False
            self._fold(self._decoded(stored.data, stored.seq, RECORD_SCHEMA))
            self._seq = expected
            expected += 1
        return True

    async def _restore(self) -> None:
        self._reset()
        snapshot = await self._store().get_snapshot(self.stream)
        if snapshot is not None:
            value = self._decoded(snapshot.data, snapshot.seq, SNAPSHOT_SCHEMA)
            self._items, self._at = list(value["i"]), float(value["t"])
            self._seq = self._snapshot_seq = snapshot.seq
        if not await self._read_after(self._seq):
            raise CorruptRecordError(f"session {self.stream}: records after seq {self._seq} are missing")

    def _decoded(self, data: bytes, seq: int, schema: int) -> dict[str, Any]:
        frame = self._frames().decode(data, stream=self.stream, seq=seq)
        names = {
            RECORD_SCHEMA: "durably.openai-agents-session",
            SNAPSHOT_SCHEMA: "durably.openai-agents-session-snapshot",
        }
        if frame.schema_id != schema or frame.schema_version != VERSION or not isinstance(frame.value, dict):
            raise CorruptRecordError(
                f"session {self.stream} seq {seq}: frame holds schema {frame.schema_id} v{frame.schema_version}, "
                f"expected {names[schema]} v{VERSION}"
            )
        return frame.value

    def _fold(self, value: dict[str, Any]) -> None:
        kind = value.get("k")
        if kind == "a":
            self._items.extend(value["i"])
        elif kind == "p":
            if self._items:
                self._items.pop()
        else:
            raise CorruptRecordError(f"session {self.stream}: unknown record kind {kind!r}")
        self._at = float(value["t"])
