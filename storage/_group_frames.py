"""Group frames: the records of one commit encoded, compressed and sealed as one unit.

A commit that appends n >= 2 records stores them at seqs h..h+n-1 (one stored
row per seq, as every adapter keeps them) as:

- at h, a *group frame* (format 4): the header of format 3 followed by the
  number of records n, then one payload holding a CBOR array of the n records'
  wire maps, compressed with one call (the codec's zstd dictionary when it has
  one), sealed once when the codec encrypts (the associated data binds the
  stream, h and n), and one CRC-32 seeded with the place of h::

      offset size  field
      0      19    as format 3: magic, format (4), flags, schema id, schema version,
                   raw size, stored size, dictionary id (0: none)
      19     2     n, records in the group (>= 2), big-endian
      21     4     CRC-32 (zlib) of bytes 0..20 and the payload, seeded with place(h)
      25     ...   payload

- at h+i (1 <= i < n), a *member row* (format 5) of 12 bytes, which names its
  index in the group and holds no data::

      0      2     magic b"dy"
      2      1     format version (5)
      3      1     flags (0)
      4      2     i, its index in the group, big-endian
      6      2     n, records in the group, big-endian
      8      4     CRC-32 of bytes 0..7 seeded with place(h+i)

A member row copied to another seq or stream fails its checksum; one that names
another index than its place's record in the group fails the record's own seq
check (every record in the array carries its seq). A one-record commit keeps
its format 3 (or format 1/2) frame: a group is only worth its header at n >= 2.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cbor2
import zstandard

from ._codec import (
    FLAG_ENCRYPTED,
    FLAG_ZSTD,
    MAGIC,
    Codec,
    associated_data,
    place_seed,
)
from ._errors import (
    CorruptRecordError,
    DecryptionError,
    EncryptionRequiredError,
    FrameLimitError,
    InvalidRequestError,
    TruncatedRecordError,
    UnknownDictionaryError,
)

if TYPE_CHECKING:
    from ._spi import StreamId

FORMAT_GROUP = 4
FORMAT_MEMBER = 5
_GROUP_HEADER = struct.Struct(">2sBBBHIIIH")  # format 3's fields, then n
_MEMBER = struct.Struct(">2sBBHH")  # magic, format, flags, index, n
_CRC = struct.Struct(">I")
GROUP_HEADER_SIZE = _GROUP_HEADER.size + _CRC.size
MEMBER_SIZE = _MEMBER.size + _CRC.size
_GROUP_AAD = struct.Struct(">HI")  # n, dictionary id: bound besides format 1's fields
MAX_GROUP = 0xFFFF
_GROUP_BYTE, _MEMBER_BYTE = bytes((FORMAT_GROUP,)), bytes((FORMAT_MEMBER,))


def is_group(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` is a group frame (format 4): the first row of a commit of n >= 2 records."""
    return isinstance(data, (bytes, bytearray, memoryview)) and data[:2] == MAGIC and data[2:3] == _GROUP_BYTE


def is_member(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` is a member row (format 5) of a group: it holds no record itself."""
    return isinstance(data, (bytes, bytearray, memoryview)) and data[:2] == MAGIC and data[2:3] == _MEMBER_BYTE


def _array_head(n: int) -> bytes:
    """The CBOR head of a definite-length array of ``n`` items (RFC 8949 section 3)."""
    if n < 24:
        return bytes((0x80 | n,))
    if n < 0x100:
        return bytes((0x98, n))
    return bytes((0x99,)) + n.to_bytes(2, "big")


def encode_group(
    codec: Codec,
    schema_id: int,
    schema_version: int,
    payloads: Sequence[bytes],
    stream: StreamId,
    first: int,
) -> list[bytes]:
    """The stored rows of a commit's records: the group frame at ``first``, then one
    member row per later record.

    In: ``payloads``, each one record's CBOR item (``Codec.payload``), 2 to
    ``MAX_GROUP`` of them, to be stored at ``first``, ``first + 1``, ... in
    ``stream``. The array is their concatenation behind its head, so no record is
    encoded twice. Raises ``InvalidRequestError`` for a count out of range.
    """
    n = len(payloads)
    if not 2 <= n <= MAX_GROUP:
        raise InvalidRequestError(f"a group holds 2 to {MAX_GROUP} records, not {n}")
    raw = b"".join((_array_head(n), *payloads))
    flags, dictionary, payload = 0, 0, raw
    if codec.dictionary is not None:
        compressed = codec._dictionaries.compress(raw)
        if len(compressed) < len(raw):
            flags, dictionary, payload = FLAG_ZSTD, codec.dictionary, compressed
    if not flags and len(raw) >= codec._min_compress:
        compressed = codec._compressor_for(len(raw)).compress(raw)
        if len(compressed) < len(raw):
            flags, payload = FLAG_ZSTD, compressed
    if codec.cipher is not None:
        flags |= FLAG_ENCRYPTED
        payload = codec.cipher.seal(
            payload, _aad(flags, schema_id, schema_version, len(raw), stream, first, n, dictionary)
        )
    header = _GROUP_HEADER.pack(
        MAGIC, FORMAT_GROUP, flags, schema_id, schema_version, len(raw), len(payload), dictionary, n
    )
    crc = zlib.crc32(payload, zlib.crc32(header, place_seed(stream, first)))
    rows = [b"".join((header, _CRC.pack(crc), payload))]
    for index in range(1, n):
        member = _MEMBER.pack(MAGIC, FORMAT_MEMBER, 0, index, n)
        rows.append(member + _CRC.pack(zlib.crc32(member, place_seed(stream, first + index))))
    return rows


def _aad(
    flags: int, schema_id: int, schema_version: int, raw: int, stream: StreamId, first: int, n: int, dictionary: int
) -> bytes:
    return associated_data(flags, schema_id, schema_version, raw, stream, first, FORMAT_GROUP) + _GROUP_AAD.pack(
        n, dictionary
    )


def read_member(data: bytes | bytearray | memoryview, stream: StreamId, seq: int) -> tuple[int, int]:
    """``(index, n)`` of the member row ``data`` stored at ``seq`` in ``stream``: its
    group's frame is at ``seq - index``.

    Raises ``TruncatedRecordError`` for a row shorter than 12 bytes and
    ``CorruptRecordError`` for longer bytes, a bad magic, flags, index or count,
    or a checksum that does not match this place (a row moved from elsewhere)."""
    if len(data) < MEMBER_SIZE:
        raise TruncatedRecordError(f"member row of {len(data)} bytes, not {MEMBER_SIZE}", stream=stream, seq=seq)
    if len(data) > MEMBER_SIZE:
        raise CorruptRecordError(
            f"{len(data) - MEMBER_SIZE} unexpected bytes after the member row", stream=stream, seq=seq
        )
    magic, fmt, flags, index, n = _MEMBER.unpack_from(data)
    if magic != MAGIC or fmt != FORMAT_MEMBER or flags != 0:
        raise CorruptRecordError("not a durably member row", stream=stream, seq=seq)
    (crc,) = _CRC.unpack_from(data, _MEMBER.size)
    if zlib.crc32(bytes(data[: _MEMBER.size]), place_seed(stream, seq)) != crc:
        raise CorruptRecordError(
            "checksum mismatch (or the row was copied from another stream or seq)", stream=stream, seq=seq
        )
    if not 1 <= index < n or seq - index < 1:
        raise CorruptRecordError(f"member row names index {index} of {n}", stream=stream, seq=seq)
    return index, n


def decode_group(
    codec: Codec, data: bytes | bytearray | memoryview, stream: StreamId, seq: int
) -> tuple[int, int, list[Any], int]:
    """``(schema_id, schema_version, values, raw_size)`` of the group frame ``data``
    stored at ``seq`` in ``stream``: ``values`` are its records' wire values, in seq order.

    Raises as ``Codec.decode``: ``TruncatedRecordError``, ``CorruptRecordError`` (bad
    magic, checksum, a payload that is not one array of n items...),
    ``FrameLimitError``, ``UnknownDictionaryError``, and with encryption
    ``DecryptionError`` / ``UnknownKeyError`` / ``EncryptionRequiredError``."""
    view = memoryview(data)
    if len(view) < GROUP_HEADER_SIZE:
        raise TruncatedRecordError(
            f"frame of {len(view)} bytes is shorter than the {GROUP_HEADER_SIZE}-byte header of format 4",
            stream=stream,
            seq=seq,
        )
    magic, fmt, flags, schema_id, schema_version, raw, stored, dictionary, n = _GROUP_HEADER.unpack_from(view)
    if magic != MAGIC or fmt != FORMAT_GROUP:
        raise CorruptRecordError("not a durably group frame", stream=stream, seq=seq)
    payload = view[GROUP_HEADER_SIZE:]
    if len(payload) < stored:
        raise TruncatedRecordError(f"frame payload has {len(payload)} of {stored} bytes", stream=stream, seq=seq)
    if len(payload) > stored:
        raise CorruptRecordError(f"{len(payload) - stored} unexpected bytes after the frame", stream=stream, seq=seq)
    (crc,) = _CRC.unpack_from(view, _GROUP_HEADER.size)
    if zlib.crc32(payload, zlib.crc32(view[: _GROUP_HEADER.size], place_seed(stream, seq))) != crc:
        raise CorruptRecordError(
            "checksum mismatch (or the frame was copied from another stream or seq)", stream=stream, seq=seq
        )
    if n < 2 or flags & ~(FLAG_ZSTD | FLAG_ENCRYPTED) or (dictionary and not flags & FLAG_ZSTD):
        raise CorruptRecordError(f"group frame with flags {flags:#x}, {n} records", stream=stream, seq=seq)
    if raw > codec.limits.max_raw_size:
        raise FrameLimitError(
            f"frame would decode to {raw} bytes, over the {codec.limits.max_raw_size}-byte limit",
            stream=stream,
            seq=seq,
        )
    cipher = codec.cipher
    if flags & FLAG_ENCRYPTED:
        if cipher is None:
            raise DecryptionError(
                "frame is encrypted and this codec has no cipher (key provider)", stream=stream, seq=seq
            )
        aad = _aad(flags, schema_id, schema_version, raw, stream, seq, n, dictionary)
        payload = memoryview(cipher.open(bytes(payload), aad, stream=stream, seq=seq))
    elif cipher is not None and cipher.required:
        raise EncryptionRequiredError("plaintext frame where encryption is required", stream=stream, seq=seq)
    try:
        if dictionary:
            try:
                body: bytes | memoryview = codec._dictionaries.decompress(payload, dictionary, raw)
            except UnknownDictionaryError as exc:
                raise UnknownDictionaryError(dictionary, exc.known, stream=stream, seq=seq) from None
        elif flags & FLAG_ZSTD:
            if zstandard.frame_content_size(payload) != raw:
                raise CorruptRecordError(
                    f"zstd frame does not declare the header's {raw} bytes", stream=stream, seq=seq
                )
            body = codec._decompressor.decompress(payload, max_output_size=raw, allow_extra_data=False)
        else:
            body = payload
        if len(body) != raw:
            raise CorruptRecordError(f"payload is {len(body)} bytes, header says {raw}", stream=stream, seq=seq)
        value = codec._loads(body, stream, seq)
    except (ValueError, zstandard.ZstdError) as exc:  # CBORDecodeError is a ValueError
        if isinstance(exc, CorruptRecordError):
            raise
        cls = FrameLimitError if "depth" in str(exc) else CorruptRecordError
        kind = "cbor" if isinstance(exc, cbor2.CBORDecodeError) else "zstd"
        raise cls(f"{kind}: {exc}", stream=stream, seq=seq) from exc
    if type(value) is not list or len(value) != n:
        raise CorruptRecordError(f"group frame does not hold an array of its {n} records", stream=stream, seq=seq)
    return schema_id, schema_version, value, raw
