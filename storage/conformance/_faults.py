"""Check of outages: typed errors while the backend is unreachable, nothing acknowledged lost after.

The adapter author says how to make the backend unreachable with the
``outage(tmp_path)`` hook: an async context manager (stop the server, hold an
exclusive lock past the busy timeout, take the directory away). While it is
entered, an append must fail with ``StoreUnavailableError`` (never the
backend's own exception types, which callers cannot branch on), and every other
call must either answer correctly or raise that same error. Once the outage
ends, everything acknowledged before is there and writing continues.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from durably.storage._errors import StoreUnavailableError

from ._harness import StoreHarness, list_all, read_pairs, sid


class FaultChecks(StoreHarness):
    """``StoreUnavailableError`` during an outage made by the ``outage`` hook; no acknowledged loss."""

    @pytest.mark.anyio
    async def test_outage_raises_typed_errors_and_loses_nothing(self, tmp_path: Path) -> None:
        outage = self.outage(tmp_path)
        if outage is None:
            pytest.skip(f"{type(self).__name__}.outage(tmp_path) is not given: no way to make the backend unreachable")
        stream = sid("outage")
        async with self.opened(tmp_path) as store:
            await store.append(stream, 0, [b"one", b"two"])
            await store.put_snapshot(stream, 2, b"state@2")
            raw: list[str] = []
            async with outage:
                try:
                    await store.append(stream, 2, [b"during the outage"])
                except StoreUnavailableError:
                    pass
                except Exception as exc:
                    raw.append(f"append: {type(exc).__module__}.{type(exc).__name__}: {exc}")
                else:
                    pytest.fail(
                        "an append during an outage was acknowledged: the outage hook does not reach the backend"
                    )
                calls: dict[str, Callable[[], Awaitable[object]]] = {
                    "last_seq": lambda: store.last_seq(stream),
                    "read": lambda: read_pairs(store, stream),
                    "get_snapshot": lambda: store.get_snapshot(stream),
                    "list_streams": lambda: list_all(store),
                    "put_snapshot": lambda: store.put_snapshot(stream, 1, b"state@1"),
                }
                for name, call in calls.items():
                    try:
                        await call()
                    except StoreUnavailableError:
                        pass
                    except Exception as exc:
                        raw.append(f"{name}: {type(exc).__module__}.{type(exc).__name__}: {exc}")
            assert not raw, f"an unreachable backend raises StoreUnavailableError, never its own exceptions: {raw}"
            records = await read_pairs(store, stream)
            assert records[:2] == [(1, b"one"), (2, b"two")], (
                "everything acknowledged before the outage is there after it"
            )
            last = await store.last_seq(stream)
            assert last in (2, 3), f"the failed append landed whole or not at all: last seq {last}"
            assert await store.append(stream, last, [b"after the outage"]) == last + 1, "appends continue once it ends"
            snapshot = await store.get_snapshot(stream)
            assert snapshot is not None and snapshot.seq >= 1
