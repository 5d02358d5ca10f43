"""Checks of the optional blob capabilities: content-addressed bytes per stream (``CAP_BLOBS``), deleted by name (``CAP_BLOB_DELETE``)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from durably.storage._errors import BlobNotFoundError, InvalidRequestError

from ._harness import StoreHarness, expect_raises, sid


class BlobChecks(StoreHarness):
    """Promises of ``put_blob``/``get_blob``; skipped unless the store declares ``CAP_BLOBS``."""

    @pytest.mark.anyio
    async def test_blobs_are_content_addressed(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.blobs_of(opened)
            stream = sid("blobs")
            for data in (b"", b"artifact", os.urandom(self.large_size)):
                digest = await store.put_blob(stream, data)
                assert digest == hashlib.sha256(data).hexdigest(), "put_blob returns the SHA-256 hex digest"
                assert await store.put_blob(stream, data) == digest, "putting the same bytes again is harmless"
                assert await store.get_blob(stream, digest) == data

    @pytest.mark.anyio
    async def test_missing_blob_raises(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.blobs_of(opened)
            stream, other = sid("has-blob"), sid("other")
            digest = await store.put_blob(stream, b"mine")
            missing = hashlib.sha256(b"never stored").hexdigest()
            await expect_raises(
                BlobNotFoundError, lambda: store.get_blob(stream, missing), "get_blob of an unknown digest"
            )
            await expect_raises(
                BlobNotFoundError, lambda: store.get_blob(other, digest), "get_blob from another stream"
            )
            await expect_raises(
                BlobNotFoundError, lambda: store.get_blob(stream, "../" * 8 + "etc"), "get_blob of a malformed digest"
            )

    @pytest.mark.anyio
    async def test_malformed_blob_raises_invalid_request(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as opened:
            store = self.blobs_of(opened)
            stream = sid("bad-blob")
            # Malformed on purpose: not bytes, whatever the signature says.
            for what, data in {
                "a str": "text",
                "None": None,
                "an int": 7,
                "a bytearray": bytearray(b"x"),
                "a memoryview": memoryview(b"x"),
            }.items():
                await expect_raises(
                    InvalidRequestError,
                    lambda: store.put_blob(stream, data),  # type: ignore[arg-type]
                    f"put_blob of {what}",
                )
            await expect_raises(
                InvalidRequestError,
                lambda: store.put_blob(("ns", "a"), b"x"),  # type: ignore[arg-type]
                "put_blob to a stream that is not a StreamId",
            )

    @pytest.mark.anyio
    async def test_blobs_survive_reopen_and_are_purged_with_the_stream(self, tmp_path: Path) -> None:
        stream, bystander = sid("blob-life"), sid("blob-bystander")
        async with self.opened(tmp_path) as opened:
            store = self.blobs_of(opened)
            await store.append(stream, 0, [b"r"])
            digest = await store.put_blob(stream, b"kept")
            kept = await store.put_blob(bystander, b"kept")
        async with self.opened(tmp_path) as opened:
            store = self.blobs_of(opened)
            assert await store.get_blob(stream, digest) == b"kept", "an acknowledged blob survives reopen"
            await store.delete_stream(stream)
            await expect_raises(
                BlobNotFoundError, lambda: store.get_blob(stream, digest), "get_blob after delete_stream"
            )
            assert await store.get_blob(bystander, kept) == b"kept", "other streams' blobs are untouched"


class BlobDeleteChecks(StoreHarness):
    """Promises of ``delete_blobs``; skipped unless the store declares ``CAP_BLOB_DELETE``."""

    @pytest.mark.anyio
    async def test_deleted_blobs_are_gone_and_others_stay(self, tmp_path: Path) -> None:
        stream, other = sid("blob-delete"), sid("blob-delete-other")
        async with self.opened(tmp_path) as opened:
            store = self.blob_delete_of(opened)
            await store.append(stream, 0, [b"r"])
            gone = [await store.put_blob(stream, b"page %d" % n) for n in range(3)]
            kept = await store.put_blob(stream, b"kept")
            shared = await store.put_blob(other, b"page 0")  # the same digest in another stream
            await store.delete_blobs(stream, gone)
            for digest in gone:
                await expect_raises(BlobNotFoundError, lambda: store.get_blob(stream, digest), "a deleted blob")
            assert await store.get_blob(stream, kept) == b"kept", "a blob not named stays"
            assert await store.get_blob(other, shared) == b"page 0", "another stream's blob of the same digest stays"
            assert [r.data for r in [r async for r in store.read(stream)]] == [b"r"], "records are untouched"
        async with self.opened(tmp_path) as opened:
            store = self.blob_delete_of(opened)
            await expect_raises(BlobNotFoundError, lambda: store.get_blob(stream, gone[0]), "deleted, after reopen")
            assert await store.get_blob(stream, kept) == b"kept", "a blob not named stays, after reopen"
            assert await store.put_blob(stream, b"page 0") == gone[0], "a deleted digest can be stored again"
            assert await store.get_blob(stream, gone[0]) == b"page 0"

    @pytest.mark.anyio
    async def test_deleting_what_is_not_there_is_no_error(self, tmp_path: Path) -> None:
        stream = sid("blob-delete-idem")
        async with self.opened(tmp_path) as opened:
            store = self.blob_delete_of(opened)
            digest = await store.put_blob(stream, b"once")
            await store.delete_blobs(stream, [digest])
            await store.delete_blobs(stream, [digest, digest])  # deleted already, and named twice
            await store.delete_blobs(stream, [])
            await store.delete_blobs(sid("never-written"), [digest])
            await store.delete_blobs(stream, ["../" * 8 + "etc", "A" * 64, ""])  # malformed: names no blob
            await expect_raises(BlobNotFoundError, lambda: store.get_blob(stream, digest), "deleted")

    @pytest.mark.anyio
    async def test_malformed_delete_raises_invalid_request(self, tmp_path: Path) -> None:
        stream = sid("blob-delete-bad")
        async with self.opened(tmp_path) as opened:
            store = self.blob_delete_of(opened)
            digest = await store.put_blob(stream, b"stays")
            # Malformed on purpose, whatever the signature says.
            for what, digests in {"a str": digest, "None": None, "a list with an int": [digest, 7]}.items():
                await expect_raises(
                    InvalidRequestError,
                    lambda: store.delete_blobs(stream, digests),  # type: ignore[arg-type]
                    f"delete_blobs of {what}",
                )
            await expect_raises(
                InvalidRequestError,
                lambda: store.delete_blobs(("ns", "a"), [digest]),  # type: ignore[arg-type]
                "delete_blobs of a stream that is not a StreamId",
            )
            assert await store.get_blob(stream, digest) == b"stays", "a refused delete deletes nothing"
