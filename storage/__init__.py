"""durably.storage: the storage SPI, its errors, the frame codec and the group-commit journal writer."""

from .errors import (
    BlobNotFoundError,
    CodecError,
    ConflictError,
    CorruptRecordError,
    DurablyError,
    FrameLimitError,
    InvalidRequestError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    TruncatedRecordError,
    UnencodableValueError,
    UnknownSchemaVersionError,
    UnknownSchemeError,
    UnsafeCompactionError,
)
from .registry import known_schemes, open_store, register_store
from .spi import OPTIONAL_PROTOCOLS, declared_capabilities, supports_blobs, supports_changes, supports_leases
from .spi import CAP_BLOBS, CAP_CHANGES, CAP_LEASES, CAP_SINGLE_PROCESS, AppendRequest, BlobStore, ChangeStore, ChangeSubscription, Lease, LeaseStore, Store, StoredRecord, StoredSnapshot, StreamId

__all__ = [
    "CAP_BLOBS", "CAP_CHANGES", "CAP_LEASES", "CAP_SINGLE_PROCESS", "ChangeStore", "ChangeSubscription", "AppendRequest", "Lease", "LeaseStore", "BlobNotFoundError", "BlobStore", "CodecError", "ConflictError", "CorruptRecordError",
    "DurablyError", "FrameLimitError", "InvalidRequestError", "Store", "StoreClosedError", "StoreError",
    "StoreUnavailableError", "StoredRecord", "StoredSnapshot", "StreamId", "TruncatedRecordError",
    "UnencodableValueError", "UnknownSchemaVersionError", "UnknownSchemeError", "UnsafeCompactionError",
    "known_schemes", "open_store", "register_store",
    "OPTIONAL_PROTOCOLS", "declared_capabilities", "supports_blobs", "supports_changes", "supports_leases",
]
