"""Checks of the lifecycle: open/close, closed-store errors, reopen keeps what was acknowledged, purge."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from durably.storage._errors import ConflictError, StoreClosedError
from durably.storage._spi import (
    OPTIONAL_PROTOCOLS,
    AppendRequest,
    Store,
    StreamId,
    declared_capabilities,
    supports_blob_delete,
    supports_blobs,
)

from ._harness import StoreHarness, expect_raises, list_all, numbered, payloads, read_pairs, sid

#: Methods every adapter has; the optional ones are needed only with their capability.
REQUIRED_METHODS = (
    "open", "close", "__aenter__", "__aexit__", "append_batch", "append", "last_seq", "read",
    "put_snapshot", "get_snapshot", "delete_snapshots", "delete_records", "list_streams", "delete_stream",
)  # fmt: skip


def protocol_methods(protocol: type) -> tuple[str, ...]:
    """The methods an optional protocol (``LeaseStore``...) adds to ``Store``."""
    return tuple(name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_"))


#: Each optional capability's methods, from its protocol (``durably.storage._spi.OPTIONAL_PROTOCOLS``).
OPTIONAL_METHODS = {capability: protocol_methods(protocol) for capability, protocol in OPTIONAL_PROTOCOLS.items()}


async def _dump(store: Store, namespaces: list[str]) -> dict[StreamId, tuple[object, ...]]:
    """Everything readable per stream: last seq, records, every snapshot at or before each seq."""
    out: dict[StreamId, tuple[object, ...]] = {}
    for namespace in namespaces:
        for stream in await list_all(store, namespace):
            last = await store.last_seq(stream)
            snapshots = [await store.get_snapshot(stream, seq) for seq in range(last + 1)]
            out[stream] = (last, await read_pairs(store, stream), [(s.seq, s.data) if s else None for s in snapshots])
    return out


class LifecycleChecks(StoreHarness):
    """Promises of ``open``/``close``, ``StoreClosedError``, durability across reopen, ``delete_stream``."""

    def _calls(self, store: Store) -> dict[str, Callable[[], object]]:
        stream = sid("closed")
        calls: dict[str, Callable[[], object]] = {
            "append": lambda: store.append(stream, 0, [b"x"]),
            "append_batch": lambda: store.append_batch([AppendRequest(stream, 0, [b"x"])]),
            "last_seq": lambda: store.last_seq(stream),
            "read": lambda: store.read(stream),
            "put_snapshot": lambda: store.put_snapshot(stream, 1, b"s"),
            "get_snapshot": lambda: store.get_snapshot(stream),
            "delete_snapshots": lambda: store.delete_snapshots(stream, 1),
            "delete_records": lambda: store.delete_records(stream, 1),
            "list_streams": lambda: store.list_streams(stream.namespace),
            "delete_stream": lambda: store.delete_stream(stream),
        }
        if supports_blobs(store):
            blobs = store
            calls["put_blob"] = lambda: blobs.put_blob(stream, b"blob")
            calls["get_blob"] = lambda: blobs.get_blob(stream, "0" * 64)
        if supports_blob_delete(store):
            deletes = store
            calls["delete_blobs"] = lambda: deletes.delete_blobs(stream, ["0" * 64])
        return calls

    @pytest.mark.anyio
    async def test_implements_the_store_protocol(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        # Not isinstance(store, Store): the Protocol also lists the optional methods.
        needed = [*REQUIRED_METHODS]
        for capability, methods in OPTIONAL_METHODS.items():
            if capability in store.capabilities:
                needed += methods
        missing = [name for name in needed if not callable(getattr(store, name, None))]
        assert not missing, f"methods of durably.storage._spi.Store missing for its capabilities: {missing}"
        for capability in store.capabilities & OPTIONAL_PROTOCOLS.keys():
            protocol = OPTIONAL_PROTOCOLS[capability]
            assert isinstance(store, protocol), f"a store declaring {capability!r} is a {protocol.__name__}"
        undeclared = declared_capabilities(type(store)) - store.capabilities
        assert not undeclared, (
            f"{type(store).__name__} subclasses the protocols of {sorted(undeclared)} but its capabilities "
            f"do not name them (StoreBase derives them; other adapters list them)"
        )
        assert isinstance(store.capabilities, (frozenset, set)), "capabilities is a set of names"
        assert all(isinstance(name, str) for name in store.capabilities)
        entered = await store.__aenter__()
        try:
            assert entered is store, "async with store as s: s is the store"
        finally:
            await store.__aexit__(None, None, None)

    @pytest.mark.anyio
    async def test_closed_store_errors(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        for name, call in self._calls(store).items():
            await expect_raises(StoreClosedError, call, f"{name} before open()")
        await store.open()
        await store.append(sid("kept"), 0, [b"x"])
        await store.close()
        for name, call in self._calls(store).items():
            await expect_raises(StoreClosedError, call, f"{name} after close()")

    @pytest.mark.anyio
    async def test_open_and_close_are_idempotent(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        await store.open()
        await store.open()
        assert await store.append(sid("idem"), 0, [b"x"]) == 1
        await store.close()
        await store.close()
        async with self.opened(tmp_path) as again:
            assert await again.last_seq(sid("idem")) == 1

    @pytest.mark.anyio
    async def test_reopen_keeps_everything_acknowledged(self, tmp_path: Path) -> None:
        namespaces = ["conformance", "other"]
        async with self.opened(tmp_path) as store:
            for n in range(4):
                stream = sid(f"agent-{n}")
                await store.append(stream, 0, payloads(f"s{n}", 3))
                await store.append_batch([AppendRequest(stream, 3, payloads(f"s{n}", 2, start=4))])
                await store.put_snapshot(stream, 2, f"state{n}@2".encode())
            await store.append(StreamId("other", "agent-0"), 0, [b"other"])
            await store.put_snapshot(sid("agent-1"), 5, b"state1@5")
            await store.delete_snapshots(sid("agent-1"), 5)
            last = sid("agent-3")
            assert await store.append(last, 5, [b"the very last acknowledged batch"]) == 6
            before = await _dump(store, namespaces)
        async with self.opened(tmp_path) as store:
            assert await store.last_seq(last) == 6, "the last acknowledged batch survives close and reopen"
            assert await _dump(store, namespaces) == before, "every stream, record and snapshot survives reopen"
            assert await store.append(last, 6, [b"and appends continue"]) == 7

    @pytest.mark.anyio
    async def test_delete_stream_purges_and_the_stream_starts_anew(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            doomed, bystander = sid("doomed"), sid("doomed-not")
            await store.append(doomed, 0, payloads("d", 4))
            await store.put_snapshot(doomed, 4, b"state")
            await store.delete_records(doomed, 4)
            await store.append(bystander, 0, [b"b"])
            await store.put_snapshot(bystander, 1, b"bs")
            await store.delete_stream(doomed)
            assert await store.last_seq(doomed) == 0, "after delete_stream the stream is unknown: last seq 0"
            assert await read_pairs(store, doomed) == []
            assert await store.get_snapshot(doomed) is None
            assert await list_all(store) == [bystander]
            await expect_raises(ConflictError, lambda: store.append(doomed, 4, [b"x"]), "expected_seq 4 after purge")
            assert await store.append(doomed, 0, payloads("new", 2)) == 2, "a purged stream starts again at seq 1"
            assert await read_pairs(store, doomed) == numbered(payloads("new", 2))
            assert await store.get_snapshot(doomed) is None, "no snapshot of the old stream comes back"
            assert await read_pairs(store, bystander) == [(1, b"b")], "other streams are untouched"
            assert getattr(await store.get_snapshot(bystander), "data", None) == b"bs"
            await store.delete_stream(sid("never-existed"))  # not an error
        async with self.opened(tmp_path) as store:
            assert await read_pairs(store, doomed) == numbered(payloads("new", 2)), "the purge and rebirth persist"
