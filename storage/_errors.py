"""The storage layer's typed errors, for adapter authors (defined in ``durably.errors``).

Every failure a caller can act on has its own class, so a caller never has to
parse a message: a stale writer gets ``ConflictError``, bit rot gets
``CorruptRecordError``, an outage gets ``StoreUnavailableError``, a URL an
adapter cannot use ``InvalidStoreURLError``, a bad argument to a shared
value type (``StreamId``) ``InvalidArgumentError`` or ``ArgumentTypeError``. The one hierarchy of every durably
error is ``durably.errors``; this module re-exports the part the SPI speaks.
"""

from __future__ import annotations

from durably.errors import (
    ArgumentTypeError,
    BlobNotFoundError,
    CodecError,
    ConflictError,
    CorruptRecordError,
    DecryptionError,
    DurablyError,
    EncryptionRequiredError,
    FencedError,
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

__all__ = [
    "ArgumentTypeError",
    "BlobNotFoundError",
    "CodecError",
    "ConflictError",
    "FencedError",
    "CorruptRecordError",
    "DecryptionError",
    "DurablyError",
    "EncryptionRequiredError",
    "FrameLimitError",
    "InvalidArgumentError",
    "InvalidRequestError",
    "InvalidStoreURLError",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "TruncatedRecordError",
    "UnencodableValueError",
    "UnknownDictionaryError",
    "UnknownKeyError",
    "UnknownSchemaVersionError",
    "UnknownSchemeError",
    "UnsafeCompactionError",
]
