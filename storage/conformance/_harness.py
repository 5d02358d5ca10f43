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
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from durably.storage._registry import open_store
from durably.storage._spi import (
    CAP_BLOB_DELETE,
    CAP_BLOBS,
    CAP_LEASES,
    CAP_SINGLE_PROCESS,
    BlobDeleteStore,
    BlobStore,
    LeaseStore,
    Store,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    supports_blob_delete,
    supports_blobs,
    supports_leases,
)

from ._breakers import ServerControl

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


async def read_pairs(
    store: Store, stream: StreamId, after_seq: int = 0, page_size: int = 512
) -> list[tuple[int, bytes]]:
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


def files_bytes(*roots: Path) -> bytes:
    """Read every byte of every regular file under ``roots``, concatenated.

    A ready-made body for the ``stored_bytes`` hook of an adapter that keeps its
    data in files: ``return files_bytes(tmp_path)``.

    Args:
        *roots: Files or directories (searched recursively, in sorted path
            order); missing paths, and files removed while they are read, are skipped.

    Returns:
        The files' contents joined with NUL bytes.
    """
    chunks: list[bytes] = []
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
        for path in paths:
            try:
                chunks.append(path.read_bytes())
            except FileNotFoundError:
                continue  # removed while we looked: it holds nothing any more
    return b"\x00".join(chunks)


class StoreHarness:
    """Hooks and settings of the conformance kit. Override ``make_store`` or ``store_url``; the rest is optional.

    ``make_store(tmp_path)`` returns a new, not yet opened ``Store`` for the
    location ``tmp_path`` (a fresh empty directory per test). Called twice with
    the same ``tmp_path``, it must return two stores of the same location: the
    kit uses that to check that data survives close and reopen, and (when
    ``concurrent_instances`` is true) that two open instances, like two
    processes, still let exactly one writer win each seq.

    ``store_url(tmp_path)`` returns the URL of that location, the one your
    class takes as its only argument. The kit passes it to other OS processes
    (they build ``YourClass(url)``, importing your class by module and name) to
    check that a second process sees one store, and to SIGKILL a writer. Without
    it those checks fail, unless the store declares ``CAP_SINGLE_PROCESS``. When
    you define only ``store_url``, ``make_store`` is ``open_store(store_url(tmp_path))``.

    Optional hooks, each check skipped with the reason when the hook is not given:
    ``stored_bytes(tmp_path)`` (async: every byte your backend holds for the
    location, e.g. ``files_bytes(tmp_path)``; the purge check looks for a planted
    value in them) and ``outage(tmp_path)`` (an async context manager during which
    the backend is unreachable: stop the server, hold a lock, remove the directory;
    the fault check wants typed errors during it and nothing lost after it) and
    ``backend_server(tmp_path)`` (a ``ServerControl`` the kit kills and restarts).
    The kit also makes the backend fail by itself: it cuts the sockets a store
    holds and fills the disk under a store that keeps files in ``tmp_path``. A
    store none of these can reach declares why in ``cannot_fail``.
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
    #: Sizes in bytes of the largest record and snapshot the scale checks round-trip.
    huge_record_size: int = 16 * 1024 * 1024
    huge_snapshot_size: int = 64 * 1024 * 1024
    #: Records of the long stream on which tail reads and snapshot lookups must stay fast.
    scale_records: int = 100_000
    #: SIGKILLs of a writer process in the crash-durability check.
    crash_kills: int = 8
    #: OS processes racing in the cross-process checks.
    race_processes: int = 4
    #: Why no fault can reach this backend (it keeps everything in this process's memory), or None.
    #: Without a reason, a store the kit cannot make fail (no socket, no file under ``tmp_path``,
    #: no ``outage`` or ``backend_server`` hook) fails the fault check; with one, it is skipped with it.
    cannot_fail: str | None = None

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Pick the event loop anyio's pytest plugin runs the async checks on (a fixture).

        Returns:
            ``"asyncio"``.
        """
        return "asyncio"

    def make_store(self, tmp_path: Path) -> Store:
        """Return a new, unopened store for the location ``tmp_path``. Override this (or ``store_url``).

        Called twice with the same ``tmp_path``, it must return two stores of
        the same location. The default is ``open_store(store_url(tmp_path))``.

        Args:
            tmp_path: The test's location: a fresh empty directory (pytest's ``tmp_path``).

        Returns:
            The store, not yet opened.

        Raises:
            NotImplementedError: When neither this nor ``store_url`` is overridden.
        """
        url = self.store_url(tmp_path)
        if url is None:
            raise NotImplementedError(
                f"{type(self).__name__} must define make_store(self, tmp_path) -> Store or store_url(self, tmp_path) -> str"
            )
        return open_store(url)

    def store_url(self, tmp_path: Path) -> str | None:
        """The URL of the location ``tmp_path`` for other processes, or None (not given). Override this.

        Args:
            tmp_path: The test's location: a fresh empty directory.

        Returns:
            The URL your store class takes as its only argument; None (the
                default) when not given, and the cross-process checks then fail
                unless the store declares ``CAP_SINGLE_PROCESS``.
        """
        return None

    async def stored_bytes(self, tmp_path: Path) -> bytes | None:
        """Every byte the backend holds for ``tmp_path`` (files, objects, pages), or None: cannot say.

        Optional hook: the purge check looks for a planted value in these bytes,
        and is skipped when this returns None (the default).

        Args:
            tmp_path: The test's location.

        Returns:
            The bytes, e.g. ``files_bytes(tmp_path)``; or None.
        """
        return None

    def outage(self, tmp_path: Path) -> AbstractAsyncContextManager[None] | None:
        """An async context manager making the backend of ``tmp_path`` unreachable while entered, or None.

        Optional hook (stop the server, hold a lock, remove the directory): the
        fault check wants typed errors during it and nothing lost after it, and
        is skipped when this returns None (the default).

        Args:
            tmp_path: The test's location.

        Returns:
            The context manager, or None.
        """
        return None

    def backend_server(self, tmp_path: Path) -> ServerControl | None:
        """The server behind the store of ``tmp_path``, for the kit to kill and restart, or None.

        Optional hook (a database server, an object store's server process): the
        kit kills it while a store is open, wants ``StoreUnavailableError`` (or a
        correct answer) from every call until it is restarted, then the same
        store continuing with nothing acknowledged lost. Skipped when this returns
        None (the default).

        Args:
            tmp_path: The test's location.

        Returns:
            The server's ``ServerControl``, or None.
        """
        return None

    @asynccontextmanager
    async def opened(self, tmp_path: Path) -> AsyncIterator[Store]:
        """``make_store(tmp_path)``, opened for the ``async with`` block, then closed.

        Args:
            tmp_path: The test's location.

        Yields:
            The open store.
        """
        store = self.make_store(tmp_path)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    def require(self, store: Store, capability: str) -> None:
        """Skip the current check, with the reason, unless ``store`` declares ``capability``.

        Args:
            store: The store under test.
            capability: A ``CAP_*`` name.
        """
        if capability not in store.capabilities:
            self._skip_undeclared(store, capability)

    def _skip_undeclared(self, store: Store, capability: str) -> NoReturn:
        pytest.skip(
            f"optional capability {capability!r} not declared by {type(store).__name__} "
            f"(capabilities: {sorted(store.capabilities)})"
        )

    def blobs_of(self, store: Store) -> BlobStore:
        """``store`` as a ``BlobStore``; skips the current check unless it declares ``CAP_BLOBS``.

        Args:
            store: The store under test.

        Returns:
            The same store, typed as a ``BlobStore``.
        """
        if supports_blobs(store):
            return store
        self._skip_undeclared(store, CAP_BLOBS)

    def blob_delete_of(self, store: Store) -> BlobDeleteStore:
        """``store`` as a ``BlobDeleteStore``; skips the current check unless it declares ``CAP_BLOB_DELETE``.

        Args:
            store: The store under test.

        Returns:
            The same store, typed as a ``BlobDeleteStore``.
        """
        if supports_blob_delete(store):
            return store
        self._skip_undeclared(store, CAP_BLOB_DELETE)

    def leases_of(self, store: Store) -> LeaseStore:
        """``store`` as a ``LeaseStore``; skips the current check unless it declares ``CAP_LEASES``.

        Args:
            store: The store under test.

        Returns:
            The same store, typed as a ``LeaseStore``.
        """
        if supports_leases(store):
            return store
        self._skip_undeclared(store, CAP_LEASES)

    def require_processes(self, tmp_path: Path) -> tuple[type, str]:
        """Skip for a single-process store; fail without ``store_url``; return (class, url) for peers.

        Builds (without opening) a store to read its capabilities.

        Args:
            tmp_path: The test's location.

        Returns:
            ``(store class, URL)``: what another OS process needs to build the
                same store as ``YourClass(url)``.
        """
        store = self.make_store(tmp_path)
        if CAP_SINGLE_PROCESS in store.capabilities:
            pytest.skip(f"{type(store).__name__} declares {CAP_SINGLE_PROCESS!r}: one OS process per location")
        url = self.store_url(tmp_path)
        if url is None:
            pytest.fail(
                f"the promise that other OS processes see one store is unchecked: define "
                f"{type(self).__name__}.store_url(tmp_path) (the URL {type(store).__name__} takes), "
                f"or declare {CAP_SINGLE_PROCESS!r} in its capabilities"
            )
        return type(store), url

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
            result = [item async for item in result]
        elif hasattr(result, "__await__"):
            result = await result
    except error:
        return
    except Exception as other:
        pytest.fail(f"{what}: expected {error.__name__}, got {type(other).__name__}: {other}")
    pytest.fail(f"{what}: expected {error.__name__}, but it returned {result!r:.200}")
