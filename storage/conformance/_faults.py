"""Checks of faults: typed errors while the backend fails, nothing acknowledged lost after.

Callers branch on ``StoreUnavailableError``; a driver's own exception types
(a connection reset, ``sqlite3.OperationalError``, ``OSError``) reach them as
crashes. So while the backend fails, every call must either answer correctly
or raise ``StoreUnavailableError``, and once the fault ends everything
acknowledged is there and writing continues.

The kit provokes the faults itself where it can (see ``_breakers``): it cuts
the sockets the store holds, and fills the disk under a store that keeps files
in the test location. The author may add an ``outage(tmp_path)`` (the backend
unreachable for a while) and a ``backend_server(tmp_path)`` (a server the kit
kills and restarts). A store that none of these reaches must say why in
``cannot_fail``; otherwise ``test_the_kit_can_make_the_store_fail`` fails, so
an adapter cannot pass the kit by giving it no way to look.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from durably.storage._errors import StoreUnavailableError
from durably.storage._spi import Store, supports_blob_delete

from ._breakers import cut_sockets, full_disk, full_disk_reason, holds_files, socket_fds
from ._harness import StoreHarness, list_all, read_pairs, sid

#: What the store holds before each fault: two records and a snapshot at seq 2.
BEFORE = [(1, b"one"), (2, b"two")]


def _raw(name: str, exc: BaseException) -> str:
    return f"{name}: {type(exc).__module__}.{type(exc).__name__}: {exc}"


class FaultChecks(StoreHarness):
    """``StoreUnavailableError`` while the backend fails (faults the kit makes, or the hooks make); no loss."""

    async def _calls_during(self, store: Store, *, append_may_land: bool) -> list[str]:
        """Call every method once during a fault; return what broke the promise (raw errors, wrong answers)."""
        stream = sid("outage")
        broken: list[str] = []
        try:
            await store.append(stream, 2, [b"during the outage"])
        except StoreUnavailableError:
            pass
        except Exception as exc:
            broken.append(_raw("append", exc))
        else:
            if not append_may_land:
                pytest.fail("an append during an outage was acknowledged: the fault does not reach the backend")
        calls: dict[str, tuple[Callable[[], Awaitable[object]], Callable[[object], bool]]] = {
            "last_seq": (lambda: store.last_seq(stream), lambda last: last in (2, 3)),
            "read": (
                lambda: read_pairs(store, stream),
                lambda records: isinstance(records, list) and records[:2] == BEFORE,
            ),
            "get_snapshot": (
                lambda: store.get_snapshot(stream),
                lambda snapshot: getattr(snapshot, "seq", None) == 2,
            ),
            "list_streams": (lambda: list_all(store), lambda streams: isinstance(streams, list) and stream in streams),
            "put_snapshot": (lambda: store.put_snapshot(stream, 1, b"state@1"), lambda _: True),
        }
        if supports_blob_delete(store):
            digest = hashlib.sha256(b"a blob").hexdigest()
            # Done or not, both are right; an untyped error is not.
            calls["delete_blobs"] = (lambda: store.delete_blobs(stream, [digest]), lambda _: True)
        for name, (call, right) in calls.items():
            try:
                answer = await call()
            except StoreUnavailableError:
                continue
            except Exception as exc:
                broken.append(_raw(name, exc))
                continue
            if not right(answer):
                broken.append(f"{name}: answered {answer!r:.200} instead of raising StoreUnavailableError")
        return broken

    async def _check_fault(
        self,
        tmp_path: Path,
        fault: Callable[[Store], AbstractAsyncContextManager[None]],
        what: str,
        *,
        append_may_land: bool = False,
    ) -> None:
        """Write, run every call inside ``fault(store)``, then check the promise and that nothing was lost."""
        stream = sid("outage")
        async with self.opened(tmp_path) as store:
            await store.append(stream, 0, [b"one", b"two"])
            await store.put_snapshot(stream, 2, b"state@2")
            async with fault(store):
                broken = await self._calls_during(store, append_may_land=append_may_land)
            assert not broken, (
                f"{what}: an unreachable backend raises StoreUnavailableError, never its own exceptions "
                f"(a call may instead answer correctly): {broken}"
            )
            records = await read_pairs(store, stream)
            assert records[:2] == BEFORE, f"{what}: everything acknowledged before the fault is there after it"
            last = await store.last_seq(stream)
            assert last in (2, 3), f"{what}: the failed append landed whole or not at all: last seq {last}"
            assert await store.append(stream, last, [b"after the outage"]) == last + 1, (
                f"{what}: the same open store continues once the fault ends"
            )
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and snapshot.seq >= 1
        async with self.opened(tmp_path) as store:
            assert (await read_pairs(store, stream))[:2] == BEFORE, f"{what}: a reopened store has everything"

    @pytest.mark.anyio
    async def test_outage_raises_typed_errors_and_loses_nothing(self, tmp_path: Path) -> None:
        outage = self.outage(tmp_path)
        if outage is None:
            pytest.skip(f"{type(self).__name__}.outage(tmp_path) is not given: no way to make the backend unreachable")
        await self._check_fault(tmp_path, lambda store: outage, "during the outage hook")

    @pytest.mark.anyio
    async def test_cut_connections_raise_typed_errors(self, tmp_path: Path) -> None:
        before = socket_fds()
        async with self.opened(tmp_path) as store:
            await store.append(sid("probe"), 0, [b"probe"])
            held = socket_fds() - before
        if not held:
            pytest.skip(f"{type(store).__name__} holds no socket: no connection for the kit to cut")

        @asynccontextmanager
        async def cut(store: Store) -> AsyncIterator[None]:
            sockets = socket_fds() - before
            assert cut_sockets(sockets), "the kit found the store's sockets but could not cut them"
            yield

        await self._check_fault(tmp_path, cut, "with its connections cut", append_may_land=True)

    @pytest.mark.anyio
    async def test_full_disk_raises_typed_errors(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            await store.append(sid("probe"), 0, [b"probe"])
        if not holds_files(tmp_path):
            pytest.skip(f"{type(store).__name__} keeps no file under the test location: no disk for the kit to fill")
        reason = full_disk_reason()
        if reason is not None:
            pytest.skip(reason)

        @asynccontextmanager
        async def full(store: Store) -> AsyncIterator[None]:
            with full_disk():
                yield

        await self._check_fault(tmp_path, full, "on a full disk")

    @pytest.mark.anyio
    async def test_killed_server_raises_typed_errors(self, tmp_path: Path) -> None:
        server = self.backend_server(tmp_path)
        if server is None:
            pytest.skip(f"{type(self).__name__}.backend_server(tmp_path) is not given: no server for the kit to kill")

        @asynccontextmanager
        async def killed(store: Store) -> AsyncIterator[None]:
            await server.kill()
            try:
                yield
            finally:
                await server.restart()

        await self._check_fault(tmp_path, killed, "with its server killed")

    @pytest.mark.anyio
    async def test_the_kit_can_make_the_store_fail(self, tmp_path: Path) -> None:
        """Without a fault the kit can make, the promise of typed errors would go unchecked: say why."""
        before = socket_fds()
        async with self.opened(tmp_path) as store:
            await store.append(sid("probe"), 0, [b"probe"])
            sockets = socket_fds() - before
        ways = {
            "outage hook": self.outage(tmp_path) is not None,
            "backend_server hook": self.backend_server(tmp_path) is not None,
            "its sockets": bool(sockets),
            "a full disk": holds_files(tmp_path) and full_disk_reason() is None,
        }
        if any(ways.values()):
            return
        if self.cannot_fail is not None:
            pytest.skip(f"{type(self).__name__}.cannot_fail: {self.cannot_fail}")
        pytest.fail(
            f"the kit found no way to make {type(store).__name__} fail (no socket, no file under the test "
            f"location, no outage or backend_server hook), so its errors reaching callers as "
            f"StoreUnavailableError is unchecked: give {type(self).__name__} an outage(tmp_path) or "
            f"backend_server(tmp_path) hook, or set cannot_fail to the reason"
        )
