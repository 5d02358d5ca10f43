"""Check that a purge leaves nothing readable behind: a planted value is gone from the backend's bytes.

The adapter names the bytes it owns through the ``stored_bytes(tmp_path)``
hook (its files, objects or pages; ``files_bytes(tmp_path)`` for a directory).
The check plants a unique value in a stream's records, snapshot and blob, sees
it in those bytes (so the hook really shows them), purges the stream, and
requires the value absent, with the store still open and after close. A
backend that cannot say which bytes it owns returns None: the check is skipped
with that reason, and its documentation should say so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durably.storage._spi import supports_blobs

from ._harness import StoreHarness, sid


class PurgeChecks(StoreHarness):
    """``delete_stream`` leaves none of the stream's bytes readable in the backend."""

    async def _bytes_or_skip(self, tmp_path: Path) -> bytes:
        found = await self.stored_bytes(tmp_path)
        if found is None:
            pytest.skip(f"{type(self).__name__}.stored_bytes(tmp_path) is not given: the backend cannot name its bytes")
        return found

    @pytest.mark.anyio
    async def test_purge_leaves_no_readable_bytes(self, tmp_path: Path) -> None:
        await self._bytes_or_skip(tmp_path)
        planted = b"durably-planted-" + os.urandom(12).hex().encode()
        doomed, bystander = sid("purged"), sid("kept")
        async with self.opened(tmp_path) as store:
            await store.append(bystander, 0, [b"the bystander's record"])
            await store.append(doomed, 0, [planted + b" in record 1", b"filler", planted + b" in record 3"])
            await store.put_snapshot(doomed, 3, planted + b" in the snapshot")
            if supports_blobs(store):
                await store.put_blob(doomed, planted + b" in a blob")
            assert planted in await self._bytes_or_skip(tmp_path), (
                "stored_bytes(tmp_path) must return the bytes the backend holds: the value just written is not in them"
            )
            await store.delete_stream(doomed)
            assert planted not in await self._bytes_or_skip(tmp_path), (
                "a purge leaves nothing readable behind: the purged stream's planted value is still in the "
                "backend's bytes after delete_stream (freed pages, a WAL, an old object version, a trash file)"
            )
        assert planted not in await self._bytes_or_skip(tmp_path), (
            "a purge leaves nothing readable behind: the planted value is back in the backend's bytes after close"
        )
        async with self.opened(tmp_path) as store:
            assert [r.data async for r in store.read(bystander)] == [b"the bystander's record"]
