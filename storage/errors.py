"""Typed errors of durably's storage layer.

Every failure a caller can act on has its own class, so a caller never has to
parse a message: a stale writer gets ``ConflictError``, bit rot gets
``CorruptRecordError``, an outage gets ``StoreUnavailableError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # spi imports this module: the name is for annotations only
    from .spi import StreamId


class DurablyError(Exception):
    """Base class of every error durably raises on purpose."""


class StoreError(DurablyError):
    """A storage operation failed."""


class ConflictError(StoreError):
    """An append stated an expected seq that is not the stream's last seq.

    This is optimistic concurrency as in event stores (EventStoreDB's
    ``expectedRevision``, Marten, Akka Persistence): another writer appended
    first, so this writer's view of the stream is stale and it must re-read
    before it may act again. Nothing of the rejected batch was written.

    Attributes: ``stream`` (StreamId), ``expected_seq`` (int), ``actual_seq``
    (int or None when the store could not tell). An adapter builds it as
    ``ConflictError(request.stream, request.expected_seq, actual_seq)`` and
    returns it (not raises it) in ``append_batch``'s result list.
    """

    def __init__(self, stream: StreamId, expected_seq: int, actual_seq: int | None) -> None:
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"conflict on {stream}: expected last seq {expected_seq}, "
            f"stream is at {actual_seq if actual_seq is not None else 'an unknown seq'}"
        )


class StoreUnavailableError(StoreError):
    """The store could not be reached or did not answer in time.

    The operation's outcome is as documented by the raising method: appends
    that raise this were not acknowledged and may be retried with the same
    expected seq (a retry then either succeeds or raises ``ConflictError``).
    """


class StoreClosedError(StoreError):
    """The store was used before ``open()`` or after ``close()``."""


class InvalidRequestError(StoreError, ValueError):
    """The caller asked for something the SPI forbids (an empty batch, a negative seq...)."""


class UnsafeCompactionError(InvalidRequestError):
    """Compaction would delete records that restore still needs.

    Records may only be deleted through the seq of an existing snapshot;
    anything after the latest snapshot is the tail that restore replays.
    """


class BlobNotFoundError(StoreError, KeyError):
    """No blob with that digest is stored for the stream."""


class UnknownSchemeError(StoreError, ValueError):
    """No installed adapter handles the URL's scheme; the message lists known schemes."""


class CodecError(DurablyError):
    """Encoding or decoding a frame failed."""


class UnencodableValueError(CodecError, TypeError):
    """A value cannot be stored; ``path`` names the offending field.

    Raised at save time, before anything is written, so a bad value never
    reaches the journal and never surprises a restore.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class CorruptRecordError(CodecError):
    """Stored bytes are not a valid frame (bad magic, checksum mismatch, bad CBOR...).

    Attributes: ``stream`` and ``seq`` when known, else None.
    """

    def __init__(self, message: str, *, stream: StreamId | None = None, seq: int | None = None) -> None:
        self.stream = stream
        self.seq = seq
        where = f" ({stream} seq {seq})" if stream is not None else ""
        super().__init__(message + where)


class TruncatedRecordError(CorruptRecordError):
    """A frame is shorter than its header says: a torn write."""


class FrameLimitError(CorruptRecordError):
    """A frame would decode past the configured size or nesting-depth bound."""


class DecryptionError(CorruptRecordError):
    """An encrypted frame failed to decrypt: AES-GCM authentication failed.

    The frame was tampered with, encrypted under another key than its key id
    names, or moved: its associated data binds it to its namespace, agent id,
    seq and schema, so a frame copied to another stream or seq never decrypts.
    Also raised when an encrypted frame meets a codec without a cipher, or a
    decode that does not say where the frame was stored.
    """


class UnknownKeyError(DecryptionError):
    """An encrypted frame names a key id the key provider does not have
    (a retired key, or the wrong provider). Attribute: ``key_id`` (str)."""

    def __init__(self, message: str, *, key_id: str, stream: StreamId | None = None, seq: int | None = None) -> None:
        self.key_id = key_id
        super().__init__(message, stream=stream, seq=seq)


class EncryptionRequiredError(CorruptRecordError):
    """A plaintext frame was read where the codec requires encryption: it was
    not written by this deployment's encrypted codec, so it is refused."""


class UnknownSchemaVersionError(CodecError):
    """A frame names a schema version this build cannot read (a newer durably wrote it).

    The data is left untouched; upgrade durably or register an upcaster.
    Attributes: ``schema``, ``version``, ``supported`` (highest known), ``stream``, ``seq``.
    """

    def __init__(self, schema: str, version: int, supported: int, *, stream: StreamId | None = None,
                 seq: int | None = None) -> None:
        self.schema = schema
        self.version = version
        self.supported = supported
        self.stream = stream
        self.seq = seq
        where = f" in {stream} at seq {seq}" if stream is not None else ""
        super().__init__(
            f"{schema} version {version}{where} is newer than this build supports "
            f"(up to {supported}); the data was left untouched"
        )
