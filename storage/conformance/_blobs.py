"""Checks of the optional blob capability (``CAP_BLOBS``): content-addressed bytes per stream."""

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
