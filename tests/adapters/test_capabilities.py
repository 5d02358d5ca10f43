"""Capabilities as types: the ``CAP_*`` names follow from the optional protocols.

A ``StoreBase`` adapter declares a capability by subclassing its protocol;
``supports_*`` narrows a ``Store`` for a type checker and answers from the
declaration, so a wrapper that merely has the methods does not gain it.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

from durably._torture.ledgered_store import LedgeredStore
from durably.adapters.filesystem import FileSystemStore
from durably.adapters.memory import MemoryStore
from durably.storage._base import StoreBase
from durably.storage._spi import (
    CAP_BLOB_DELETE,
    CAP_BLOBS,
    CAP_CHANGES,
    CAP_LEASE_RENEW,
    CAP_LEASES,
    CAP_SINGLE_PROCESS,
    CAP_STATUS_INDEX,
    OPTIONAL_PROTOCOLS,
    BlobDeleteStore,
    BlobStore,
    ChangeStore,
    IndexStore,
    Lease,
    LeaseRenewStore,
    LeaseStore,
    StreamId,
    declared_capabilities,
    supports_blob_delete,
    supports_blobs,
    supports_changes,
    supports_leases,
)
from durably.storage._torture import Ledger


class _Leased(StoreBase, LeaseStore):
    """A (data-less) adapter declaring leases by its base, plus a limitation by name."""

    capabilities = frozenset({CAP_SINGLE_PROCESS})

    async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        return None

    async def release_lease(self, lease: Lease) -> None:
        return None

    async def get_lease(self, stream: StreamId) -> Lease | None:
        return None


class _LeasedAndBlobs(_Leased, BlobStore):
    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        return ""

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        return b""


def test_storebase_derives_capabilities_from_the_protocols_it_subclasses() -> None:
    assert _Leased.capabilities == {CAP_LEASES, CAP_SINGLE_PROCESS}
    assert _LeasedAndBlobs.capabilities == {CAP_LEASES, CAP_BLOBS, CAP_SINGLE_PROCESS}, "inherited and added"
    assert declared_capabilities(_LeasedAndBlobs) == {CAP_LEASES, CAP_BLOBS}, "limitations are not protocols"
    assert declared_capabilities(StoreBase) == frozenset()


def test_each_cap_name_has_its_protocol() -> None:
    assert OPTIONAL_PROTOCOLS == {
        CAP_BLOBS: BlobStore,
        CAP_BLOB_DELETE: BlobDeleteStore,
        CAP_LEASES: LeaseStore,
        CAP_LEASE_RENEW: LeaseRenewStore,
        CAP_CHANGES: ChangeStore,
        CAP_STATUS_INDEX: IndexStore,
    }


def test_supports_answers_from_the_declaration_not_the_shape(tmp_path: Path) -> None:
    store = MemoryStore("memory://capabilities")
    assert supports_leases(store) and supports_blobs(store) and not supports_changes(store)
    # The torture kit's wrapper has every optional method and forwards the wrapped store's capabilities.
    wrapped = LedgeredStore(FileSystemStore(f"file://{tmp_path}"), Ledger(tmp_path / "acks.jsonl"), "w", lambda _: None)
    assert callable(wrapped.acquire_lease)
    assert supports_blobs(wrapped) and not supports_leases(wrapped), "the filesystem store has blobs, no leases"
    assert supports_blob_delete(wrapped), "the filesystem store deletes blobs, and the wrapper says so"


def test_a_store_with_blobs_but_no_blob_delete_is_not_taken_for_one() -> None:
    """A store written before ``delete_blobs`` (blobs only) is not seen as deleting them."""
    assert _LeasedAndBlobs.capabilities == {CAP_LEASES, CAP_BLOBS, CAP_SINGLE_PROCESS}
    assert not supports_blob_delete(_LeasedAndBlobs())
    assert CAP_BLOB_DELETE in MemoryStore.capabilities and supports_blob_delete(MemoryStore())


@pytest.mark.parametrize(
    "entry", sorted(entry_points(group="durably.stores"), key=lambda e: e.name), ids=lambda e: e.name
)
def test_every_shipped_adapter_declares_by_protocol(entry: EntryPoint) -> None:
    """The string flags of durably's own adapters are derived: each names exactly the protocols it subclasses."""
    cls = entry.load()
    optional = cls.capabilities & OPTIONAL_PROTOCOLS.keys()
    assert optional == declared_capabilities(cls), (
        f"{cls.__name__} lists {sorted(optional)} but subclasses the protocols of {sorted(declared_capabilities(cls))}"
    )
