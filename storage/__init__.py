"""durably.storage: what an adapter author needs: the storage SPI, its errors, the URL registry.

``StoreBase`` (lifecycle and the closed-store guard), ``check_append``,
``check_blob`` and ``check_lease`` (the SPI's argument checks) are here too; the conformance kit
is ``durably.storage.conformance``. The frame codec and group commit are
internal to durably.
"""

from ._base import StoreBase
from ._errors import (
    ArgumentTypeError,
    BlobNotFoundError,
    CodecError,
    ConflictError,
    CorruptRecordError,
    DecryptionError,
    DurablyError,
    EncryptionRequiredError,
    FrameLimitError,
    InvalidArgumentError,
    InvalidRequestError,
    InvalidStoreURLError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    TruncatedRecordError,
    UnencodableValueError,
    UnknownDictionaryError,
    UnknownKeyError,
    UnknownSchemaVersionError,
    UnknownSchemeError,
    UnsafeCompactionError,
)
from ._registry import known_schemes, open_store, register_store
from ._spi import OPTIONAL_PROTOCOLS, declared_capabilities, supports_blobs, supports_changes, supports_leases
from ._spi import CAP_BLOBS, CAP_CHANGES, CAP_LEASES, CAP_SINGLE_PROCESS, CAP_STATUS_INDEX, AppendRequest, BlobStore, ChangeStore, ChangeSubscription, Lease, LeaseStore, Store, StoredRecord, StoredSnapshot, StreamId, check_append, check_blob, check_lease
from ._spi import IndexedStream, IndexEntry, IndexStore, supports_status_index

__all__ = [
    "CAP_BLOBS", "CAP_CHANGES", "CAP_LEASES", "CAP_SINGLE_PROCESS", "ChangeStore", "ChangeSubscription", "AppendRequest", "Lease", "LeaseStore", "BlobNotFoundError", "BlobStore", "CodecError", "ConflictError", "CorruptRecordError",
    "ArgumentTypeError", "DecryptionError", "DurablyError", "EncryptionRequiredError", "FrameLimitError", "InvalidArgumentError", "InvalidRequestError", "InvalidStoreURLError", "Store", "StoreBase", "StoreClosedError", "StoreError",
    "StoreUnavailableError", "StoredRecord", "StoredSnapshot", "StreamId", "TruncatedRecordError",
    "UnencodableValueError", "UnknownDictionaryError", "UnknownKeyError", "UnknownSchemaVersionError", "UnknownSchemeError", "UnsafeCompactionError",
    "check_append", "check_blob", "check_lease", "known_schemes", "open_store", "register_store",
    "OPTIONAL_PROTOCOLS", "declared_capabilities", "supports_blobs", "supports_changes", "supports_leases",
    "CAP_STATUS_INDEX", "IndexEntry", "IndexStore", "IndexedStream", "supports_status_index",
]
