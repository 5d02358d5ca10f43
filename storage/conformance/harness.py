"""The hooks an adapter author fills in, and the helpers every check shares.

The checks run each test on a fresh location (pytest's ``tmp_path``): the author
says how to build a store for a location, the kit opens, uses, closes and
reopens it. Async tests run through anyio's pytest plugin (anyio is a dependency
of durably, so the plugin is always installed); ``anyio_backend`` picks asyncio.
That works the same whether or not pytest-asyncio is installed, in either of
its modes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from durably.storage.spi import Store, StoredRecord, StoredSnapshot, StreamId

#: Namespace of the streams the checks create.
NAMESPACE = "conformance"


def sid(agent_id: str, namespace: str = NAMESPACE) -> StreamId:
    """A ``StreamId`` in the kit's namespace (or ``namespace``)."""
    return StreamId(namespace, agent_id)


def payloads(tag: str, count: int, start: int = 1) -> list[bytes]:
    """``count`` distinct record payloads ``b"<tag>:<n>"`` for n = start, start+1, ..."""
    return [f"{tag}:{n}".encode() for n in range(start, start + count)]


async def read_all(store: Store, stream: StreamId, after_seq: int = 0, page_size: int = 512) -> list[StoredRecord]:
    """Every record ``store.read`` yields, as a list."""
    return [record async for record in store.read(stream, after_seq, page_size=page_size)]


async def read_pairs(store: Store, stream: StreamId, after_seq: int = 0, page_size: int = 512) -> list[tuple[int, bytes]]:
    """``read_all`` as ``(seq, data)`` tuples, which compare and print nicely."""
    return [(r.seq, r.data) for r in await read_all(store, stream, after_seq, page_size)]


async def list_all(store: Store, namespace: str = NAMESPACE, prefix: str = "") -> list[StreamId]:
    """Every stream ``store.list_streams`` yields, as a list."""
    return [stream async for stream in store.list_streams(namespace, prefix)]


def numbered(data: Iterable[bytes], first_seq: int = 1) -> list[tuple[int, bytes]]:
    """``data`` paired with the seqs it should have been stored at."""
    return list(enumerate(data, start=first_seq))


def snapshot_seq(snapshot: StoredSnapshot | None) -> int | None:
    """The snapshot's seq, or None: for readable assertion messages."""
    return None if snapshot is None else snapshot.seq


class StoreHarness:
    """Hooks and settings of the conformance kit. Override ``make_store``; the rest is optional.

    ``make_store(tmp_path)`` returns a new, not yet opened ``Store`` for the
    location ``tmp_path`` (a fresh empty directory per test). Called twice with
    the same ``tmp_path``, it must return two stores of the same location: the
    kit uses that to check that data survives close and reopen, and (when
    ``concurrent_instances`` is true) that two open instances, like two
    processes, still let exactly one writer win each seq.
    """

    #: Two open stores from ``make_store(tmp_path)`` share data like two processes would.
    #: Set False when your backend allows a single open instance per location; the
    #: cross-instance checks are then skipped with that reason.
    concurrent_instances: bool = True
    #: Tasks racing on one stream in the concurrency checks.
    race_tasks: int = 16
    #: Size in bytes of the "very large" record, snapshot and blob (several MB).
    large_size: int = 5 * 1024 * 1024
    #: Streams written in the many-streams check.
    many_streams: int = 100

    @pytest.fixture
    def anyio_backend(self) -> str:
        """The event loop anyio's pytest plugin runs the async checks on."""
        return "asyncio"

    def make_store(self, tmp_path: Path) -> Store:
        """Return a new, unopened store for the location ``tmp_path``. Override this."""
        raise NotImplementedError(f"{type(self).__name__} must define make_store(self, tmp_path) -> Store")

    @asynccontextmanager
    async def opened(self, tmp_path: Path) -> AsyncIterator[Store]:
        """``make_store(tmp_path)``, opened for the ``async with`` block, then closed."""
        store = self.make_store(tmp_path)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    def require(self, store: Store, capability: str) -> None:
        """Skip the current check, with the reason, unless ``store`` declares ``capability``."""
        if capability not in store.capabilities:
            pytest.skip(
                f"optional capability {capability!r} not declared by {type(store).__name__} "
                f"(capabilities: {sorted(store.capabilities)})"
            )

    def require_concurrent_instances(self) -> None:
        """Skip the current check unless the adapter allows two open instances per location."""
        if not self.concurrent_instances:
            pytest.skip(f"{type(self).__name__}.concurrent_instances is False: one open store per location")


async def expect_raises(error: type[BaseException], call: Callable[[], object], what: str) -> None:
    """Await ``call()`` (a coroutine, or an async iterator drained) and fail unless it raises ``error``.

    ``what`` names the misuse in the failure message, so an adapter author sees
    which promise was broken without reading the kit's source.
    """
    try:
        result = call()
        if hasattr(result, "__aiter__"):
            result = [item async for item in result]  # type: ignore[union-attr]
        elif hasattr(result, "__await__"):
            result = await result  # type: ignore[misc]
    except error:
        return
    except Exception as other:  # noqa: BLE001 - reported as the wrong error type
        pytest.fail(f"{what}: expected {error.__name__}, got {type(other).__name__}: {other}")
    pytest.fail(f"{what}: expected {error.__name__}, but it returned {result!r:.200}")
