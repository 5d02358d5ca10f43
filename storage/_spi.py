"""The storage SPI: what every backend implements, bytes in and bytes out.

An adapter stores opaque frames (already encoded by ``durably.storage._codec``)
keyed by stream and seq. It never decodes them. The contract is what the
conformance kit (``durably.storage.conformance``) checks.

Vocabulary, as in event stores (EventStoreDB, Marten, Akka Persistence):

* a **stream** is the append-only journal of one agent, ``StreamId(namespace, agent_id)``;
* each record in it has a gapless **seq** starting at 1;
* an append states the **expected seq** (the last seq the writer saw, 0 for a
  new stream); a mismatch is a ``ConflictError`` and writes nothing;
* a **snapshot** is an encoded state at some seq; restore = latest snapshot at or
  before a seq + the records after it.

The contract is stated by the protocols' docstrings (the adapter guide's table is
generated from them). The SPI is three modules, all re-exported here (import from this one):
``durably.storage._spi_values`` (the shapes: ``StreamId``, ``StoredRecord``,
``AppendRequest``... and the ``check_*`` argument checks),
``durably.storage._spi_store`` (the ``Store`` protocol and the ``CAP_*`` names) and
``durably.storage._spi_capabilities`` (the optional protocols and ``supports_*``).
"""

from __future__ import annotations

from ._spi_capabilities import (
    OPTIONAL_PROTOCOLS,
    BlobDeleteStore,
    BlobStore,
    ChangeStore,
    ChangeSubscription,
    IndexStore,
    LeaseRenewStore,
    LeaseStore,
    declared_capabilities,
    supports_blob_delete,
    supports_blobs,
    supports_changes,
    supports_lease_renew,
    supports_leases,
    supports_status_index,
)
from ._spi_store import (
    CAP_BLOB_DELETE,
    CAP_BLOBS,
    CAP_CHANGES,
    CAP_LEASE_RENEW,
    CAP_LEASES,
    CAP_SINGLE_PROCESS,
    CAP_STATUS_INDEX,
    Store,
)
from ._spi_values import (
    MAX_SEQ,
    AppendRequest,
    IndexedStream,
    IndexEntry,
    Lease,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_append,
    check_blob,
    check_blob_digests,
    check_fence,
    check_lease,
    check_lease_renewal,
)

__all__ = [
    "CAP_BLOBS",
    "CAP_BLOB_DELETE",
    "CAP_CHANGES",
    "CAP_LEASES",
    "CAP_LEASE_RENEW",
    "CAP_SINGLE_PROCESS",
    "CAP_STATUS_INDEX",
    "MAX_SEQ",
    "OPTIONAL_PROTOCOLS",
    "AppendRequest",
    "BlobDeleteStore",
    "BlobStore",
    "ChangeStore",
    "ChangeSubscription",
    "IndexEntry",
    "IndexStore",
    "IndexedStream",
    "Lease",
    "LeaseRenewStore",
    "LeaseStore",
    "Store",
    "StoredRecord",
    "StoredSnapshot",
    "StreamId",
    "check_append",
    "check_blob",
    "check_blob_digests",
    "check_fence",
    "check_lease",
    "check_lease_renewal",
    "declared_capabilities",
    "supports_blob_delete",
    "supports_blobs",
    "supports_changes",
    "supports_lease_renew",
    "supports_leases",
    "supports_status_index",
]
