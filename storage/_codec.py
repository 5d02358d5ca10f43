"""The frame codec: CBOR (RFC 8949) + zstd (RFC 8878) + a header and a CRC-32.

Every record and snapshot is stored as one frame::

    offset size  field
    0      2     magic b"dy"
    2      1     format version (2; 1 is still read)
    3      1     flags: bit 0 = payload is zstd-compressed,
                        bit 1 = payload is AES-GCM encrypted (durably.storage._crypto)
    4      1     schema id (1 = record, 2 = snapshot)
    5      2     schema version, big-endian
    7      4     raw size: bytes of the CBOR payload before compression
    11     4     stored size: bytes of payload that follow the header
    15     4     CRC-32 (zlib) of the frame's place, bytes 0..14 and the payload
    19     ...   payload

Format 3 (plaintext record frames compressed with a shipped zstd dictionary,
``durably.storage._dictionaries``) adds a 4-byte dictionary id before the CRC,
a 23-byte header::

    15     4     dictionary id: the zstd dictionary id of the payload's dictionary
    19     4     CRC-32 as in format 2 (bytes 0..18, seeded with the place)
    23     ...   payload: a zstd frame without its 4-byte magic number and
                 dictionary id (the header names both), with its content size

A frame naming a dictionary this build does not ship fails with
``UnknownDictionaryError`` (an ``UnknownSchemaVersionError``): the agent stops,
the data stays. Formats 1 and 2 are still read; snapshots, encrypted frames
and frames encoded without a place are written as before.

The checksum catches flipped bits; the stored size catches a torn (truncated)
frame; raw size lets decoding refuse a decompression bomb before it inflates.
Format 2 seeds the CRC with the frame's place (``place_seed``: namespace,
agent id and seq), so a plaintext frame copied into another agent's stream at
the same seq fails its checksum instead of replaying there: the binding the
cipher's associated data gives encrypted frames. Format 1 frames (CRC of
header and payload only) are still read and still written for an encrypted
frame (its tag binds the place, and its CRC then tells bit rot from tampering)
or one encoded without a place; every plaintext frame the runtime writes is
format 2.
Decoding a format 2 frame needs its place (``InvalidRequestError`` without it).

With a ``FrameCipher`` the payload is compressed *then* encrypted (ciphertext
looks random and does not compress). The cipher authenticates, as associated
data, the header fields and the frame's place: namespace, agent id and seq
(``associated_data``), so a frame copied to another stream or seq, or a
flipped flag, fails to decrypt. The CRC still covers the stored bytes, so bit
rot is told apart from tampering.

Values are plain data (None, bool, int in 64 bits, float, str, bytes, list,
dict with str keys) and the standard library's value types that
``durably.storage._values`` writes with registered CBOR tags (datetimes,
dates, times, durations, Decimal, UUID, tuple, set, frozenset): each reads
back as the same type and value. Anything else (an object, a subclass of str
or int such as a StrEnum member) fails at save time with the path of the
field, never stored as something else.

Decoding is strict, against forged frames: exactly one zstd frame, exactly
one CBOR item consuming every byte, no indefinite lengths, no duplicate map
keys, only str/bytes map keys, and only the tags durably writes; sizes and
nesting are bounded, and with no shared-reference tags a record cannot expand
into more values than its bytes hold.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import cbor2
import zstandard

from . import _dictionaries as dictionaries
from . import _values as values

if TYPE_CHECKING:  # spi does not import the codec; the name is for annotations only
    from ._spi import StreamId

from durably.errors import InvalidArgumentError

from ._errors import (
    CorruptRecordError,
    DecryptionError,
    EncryptionRequiredError,
    FrameLimitError,
    InvalidRequestError,
    TruncatedRecordError,
    UnencodableValueError,
    UnknownDictionaryError,
)

MAGIC = b"dy"
FORMAT_VERSION = 2  # written when the frame's place is known (see place_seed)
UNBOUND_FORMAT = 1  # CRC of header and payload only: written without a place, always read
FORMAT_DICTIONARY = 3  # format 2 plus the id of the zstd dictionary the payload was compressed with
_FORMAT_MEMBER = 5  # a member row of a group frame (durably.storage._group_frames): no payload
FLAG_ZSTD = 0x01
FLAG_ENCRYPTED = 0x02
_HEADER = struct.Struct(">2sBBBHII")  # magic, format, flags, schema id, schema version, raw, stored
_HEADER_DICT = struct.Struct(">2sBBBHIII")  # the same, then the dictionary id (format 3)
_CRC = struct.Struct(">I")
HEADER_SIZE = _HEADER.size + _CRC.size
HEADER_SIZE_DICT = _HEADER_DICT.size + _CRC.size
_DICT_ID_SIZE = _HEADER_DICT.size - _HEADER.size
_MAX_WINDOW_LOG = 27  # 128 MiB: zstd's default decoder limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT)
_SHIPPED = object()  # Codec's default dictionary: dictionaries.DEFAULT as it is when the codec is made

_AAD_PREFIX = b"durably/frame-aad/1\x00"
_AAD_FIELDS = struct.Struct(">BBBHIQ")  # format, flags, schema id, schema version, raw size, seq
_AAD_LEN = struct.Struct(">H")

_PLACE_PREFIX = b"durably/frame-place/2\x00"
_SEQ = struct.Struct(">Q")

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded frame: the schema it names, the value, and its sizes in bytes."""

    schema_id: int
    schema_version: int
    value: Any
    raw_size: int
    stored_size: int
    raw: bytes | None = None  # the CBOR payload itself, when decoded with ``load=False``


@dataclass(frozen=True, slots=True)
class CodecLimits:
    """Decoding bounds. ``max_raw_size`` in bytes; ``max_depth`` in nested containers."""

    max_raw_size: int = 256 * 1024 * 1024
    max_depth: int = 64


def check_encodable(value: Any, path: str = "value", max_depth: int = 64) -> bool:
    """Raise ``UnencodableValueError`` naming the first field that cannot be stored.

    In: any value and the name of its root (used in the path, e.g. ``state``).
    Out: True when the value holds tagged types (see ``durably.storage._values``),
    False for plain data only; the encoder converts only in the first case.
    """
    # The common case walks without building a path per node; only a value it
    # refuses is walked again, with paths, to name the field.
    tagged = _plain_walk(value, max_depth)
    if tagged is None:
        return _checked_walk(value, path, max_depth)
    return tagged


def _plain_walk(value: Any, max_depth: int) -> bool | None:
    """Whether ``value`` holds tagged types (True/False), or None when something in
    it cannot be stored (``_checked_walk`` then says what and where)."""
    tagged = False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict:
            if depth >= max_depth:
                return None
            for key, child in item.items():
                if type(key) is not str:
                    return None
                ckind = type(child)
                if ckind is str or ckind is float or ckind is bool or child is None or ckind is bytes:
                    continue
                if ckind is int and _INT_MIN <= child <= _INT_MAX:
                    continue
                stack.append((child, depth + 1))
        elif kind is list:
            if depth >= max_depth:
                return None
            for child in item:
                ckind = type(child)
                if ckind is str or ckind is float or ckind is bool or child is None or ckind is bytes:
                    continue
                if ckind is int and _INT_MIN <= child <= _INT_MAX:
                    continue
                stack.append((child, depth + 1))
        elif kind is str or kind is bool or kind is float or item is None or kind is bytes:
            continue
        elif kind is int:
            if not _INT_MIN <= item <= _INT_MAX:
                return None
        elif kind in values.TAGGED_TYPES:
            if depth >= max_depth or values.problem(item) is not None:
                return None
            tagged = True
            stack.extend((child, depth + 1) for child in values.children(item))
        else:
            return None
    return tagged


def _checked_walk(value: Any, path: str, max_depth: int) -> bool:
    """``check_encodable``'s walk with the path of every node: raises for the first bad one."""
    # Iterative walk: user data may be deep and Python's recursion is slow.
    tagged = False
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or kind is float or item is None or kind is bytes:
            continue
        if kind is int:
            if not _INT_MIN <= item <= _INT_MAX:
                raise UnencodableValueError(where, "int does not fit in 64 bits")
            continue
        if depth >= max_depth:
            raise UnencodableValueError(where, f"nesting deeper than {max_depth} levels")
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    raise UnencodableValueError(
                        f"{where}[{key!r}]", f"dict key of type {type(key).__name__} is not supported (use str)"
                    )
                stack.append((child, _field(where, key), depth + 1))
        elif kind is list:
            for index, child in enumerate(item):
                stack.append((child, f"{where}[{index}]", depth + 1))
        elif kind in values.TAGGED_TYPES:
            if (why := values.problem(item)) is not None:
                raise UnencodableValueError(where, why)
            tagged = True
            for index, child in enumerate(values.children(item)):
                stack.append((child, f"{where}[{index}]", depth + 1))
        elif isinstance(item, (str, int, float, bytes)):
            # Stored as the plain value it equals, it would come back as another type.
            base = next(b for b in (bool, str, int, float, bytes) if isinstance(item, b))
            raise UnencodableValueError(
                where,
                f"{kind.__name__} (a {base.__name__} subclass) is not supported: "
                f"store its plain value, {base.__name__}(x)",
            )
        else:
            raise UnencodableValueError(where, f"{kind.__name__} is not supported")
    return tagged


def _field(path: str, key: str) -> str:
    """The path of ``key`` in the dict at ``path``: ``path.key``, or ``path['\\udc80']``
    (its escaped repr) for a key that is not valid Unicode, so that the path itself,
    and the failure record quoting it, can be stored."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return f"{path}[{key!r}]"
    return f"{path}.{key}"


def _locate_unencodable(value: Any, path: str, cause: Exception) -> UnencodableValueError:
    """The ``UnencodableValueError`` for a value cbor2 refused: finds the string
    that is not valid Unicode (a lone surrogate, as ``json.loads`` can produce)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return UnencodableValueError(where, f"str is not valid Unicode ({exc.reason} at index {exc.start})")
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, f"{where}[{key!r}]"))
                stack.append((child, _field(where, key) if isinstance(key, str) else f"{where}[{key!r}]"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return UnencodableValueError(path, f"cannot be encoded as CBOR: {cause}")


def _largest_part(value: Any, path: str, limit: int) -> tuple[str, int]:
    """``(path, size)`` of the field to blame for a value over ``limit`` bytes: the
    deepest part that alone passes the limit, else the one holding most of it
    (only computed on this error path: it encodes each part again)."""
    size = len(cbor2.dumps(values.to_cbor(value)))
    while True:
        kind = type(value)
        parts = (
            ((f"{path}.{k}", v) for k, v in value.items())
            if kind is dict
            else ((f"{path}[{i}]", v) for i, v in enumerate(value))
            if kind in (list, tuple)
            else ()
        )
        sized = [(len(cbor2.dumps(values.to_cbor(v))), p, v) for p, v in parts]
        if not sized:
            return path, size
        biggest, where, part = max(sized, key=lambda item: item[0])
        if biggest <= limit and biggest * 2 < size:
            return path, size  # no single part is to blame: the whole is
        value, path, size = part, where, biggest


class FrameCipher(Protocol):
    """Authenticated encryption of frame payloads; ``durably.AESGCMCipher`` is one.

    Implement it to bring your own KMS or envelope scheme. Every method may be
    called from several threads at once. The associated data binds a frame to
    its namespace, agent id and seq, so a frame copied elsewhere fails to open.

    Attributes:
        required: When True, decoding refuses plaintext frames (``EncryptionRequiredError``).
    """

    required: bool

    def current_key_id(self) -> str:
        """The id of the key ``seal`` uses now (what re-encryption moves frames to).

        Returns:
            A short key id; sealed bytes name it, so ``open`` can find the key later.
        """
        ...

    def seal(self, payload: bytes, aad: bytes) -> bytes:
        """Encrypt and authenticate one frame payload.

        Args:
            payload: The compressed CBOR payload.
            aad: The associated data to authenticate with it (the frame's header and place).

        Returns:
            The sealed bytes, naming the key id they were sealed under.
        """
        ...

    def open(self, sealed: bytes, aad: bytes, *, stream: StreamId | None = None, seq: int | None = None) -> bytes:
        """Decrypt and verify one sealed payload.

        Args:
            sealed: What ``seal`` returned.
            aad: The associated data it was sealed with.
            stream: The frame's stream, for the error message.
            seq: The frame's seq, for the error message.

        Returns:
            The payload.

        Raises:
            DecryptionError: The tag does not verify (tampered, moved, or another key).
            UnknownKeyError: The key id it names cannot be had from the key provider.
        """
        ...


def associated_data(
    flags: int,
    schema_id: int,
    schema_version: int,
    raw_size: int,
    stream: StreamId,
    seq: int,
    fmt: int = UNBOUND_FORMAT,
) -> bytes:
    """The bytes an encrypted frame's tag authenticates besides its payload.

    In: the header fields (``fmt``: the frame's format version), ``stream`` (a
    ``StreamId``: namespace and agent id) and ``seq`` (the record's seq, or the
    seq a snapshot covers). Ids are
    length-prefixed so no two places share an encoding (RFC 5116's advice on
    associated data: it must identify the context unambiguously).
    """
    parts = [_AAD_PREFIX, _AAD_FIELDS.pack(fmt, flags, schema_id, schema_version, raw_size, seq)]
    for name in (stream.namespace, stream.agent_id):
        encoded = name.encode("utf-8", "surrogatepass")
        parts += (_AAD_LEN.pack(len(encoded)), encoded)
    return b"".join(parts)


def place_seed(stream: StreamId, seq: int) -> int:
    """The CRC-32 a format 2 frame's checksum starts from: that of its place.

    In: ``stream`` (a ``StreamId``) and ``seq`` (the record's seq, or the seq a
    snapshot covers). Ids are length-prefixed, as in ``associated_data``, so no
    two places share a seed input.
    """
    # CRC-32 runs on: the CRC of prefix + ids, cached per stream, continued over the seq's bytes.
    return zlib.crc32(_SEQ.pack(seq), _stream_crc(stream.namespace, stream.agent_id))


@functools.lru_cache(maxsize=4096)
def _stream_crc(namespace: str, agent_id: str) -> int:
    """The CRC-32 of a place seed's prefix and ids (``place_seed`` continues it with the seq)."""
    parts = [_PLACE_PREFIX]
    for name in (namespace, agent_id):
        encoded = name.encode("utf-8", "surrogatepass")
        parts += (_AAD_LEN.pack(len(encoded)), encoded)
    return zlib.crc32(b"".join(parts))


def raw_size(frame: bytes) -> int:
    """Bytes of a frame's CBOR payload before compression, read from its header (0 for
    a member row of a group, ``durably.storage._group_frames``: its group frame counts them)."""
    if len(frame) > 2 and frame[2] == _FORMAT_MEMBER:
        return 0
    size: int = _HEADER.unpack_from(frame)[5]
    return size


def _prefixed_compressor(size: int, prefix: bytes, level: int) -> zstandard.ZstdCompressor:
    """A compressor at ``level`` for ``size`` raw bytes continuing ``prefix`` (zstd's raw-content
    dictionary, which the decoder must be given too), its window spanning both (up to 128 MiB,
    what every zstd decoder accepts) so the payload can refer to any byte of the prefix.

    A frame continuing a prefix carries zstd's content checksum: decoded with other bytes of
    the same length and shape (base pages named in another order, or another page's), its
    matches copy the wrong text into valid CBOR, which nothing else would catch."""
    window_log = min(_MAX_WINDOW_LOG, max(zstandard.WINDOWLOG_MIN, (len(prefix) + size - 1).bit_length()))
    params = zstandard.ZstdCompressionParameters.from_level(level, window_log=window_log, write_checksum=bool(prefix))
    if not prefix:
        return zstandard.ZstdCompressor(compression_params=params)
    dictionary = zstandard.ZstdCompressionDict(prefix, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params)


class Codec:
    """Encodes values to frames and back. Not thread-safe: one instance per thread.

    ``level``: zstd level (3 is zstd's default balance). ``min_compress_size``:
    payloads smaller than this many bytes are stored raw, since zstd's frame
    overhead outweighs the gain on tiny records. ``limits`` bound decoding.
    ``cipher``: encrypt every frame written and decrypt those read (a
    ``FrameCipher``, shareable between codecs and threads); None: plaintext.
    ``dictionary``: the id of the shipped zstd dictionary small frames are
    compressed with (default ``dictionaries.DEFAULT``; None: none). Frames
    naming any shipped dictionary are read whatever it says.
    """

    def __init__(
        self,
        *,
        level: int = 3,
        min_compress_size: int = 256,
        limits: CodecLimits | None = None,
        cipher: FrameCipher | None = None,
        dictionary: int | None | object = _SHIPPED,
    ) -> None:
        self.limits = limits or CodecLimits()
        self.cipher = cipher
        self.dictionary: int | None = dictionaries.DEFAULT if dictionary is _SHIPPED else dictionary  # type: ignore[assignment]
        self._level = level
        self._min_compress = min_compress_size
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._default_window_log = zstandard.ZstdCompressionParameters.from_level(level).window_log
        self._wide: dict[int, zstandard.ZstdCompressor] = {}  # by window log, see _compressor_for
        self._decompressor = zstandard.ZstdDecompressor()
        self._dictionaries = dictionaries.DictionaryFrames(self.dictionary, level)
        self._decoder: cbor2.CBORDecoder | None = None  # see _loads

    def twin(self) -> Codec:
        """A new codec with this one's settings and cipher, for another thread (a codec's
        zstd contexts are not shareable): it writes the same frames and reads the same ones."""
        return Codec(
            level=self._level,
            min_compress_size=self._min_compress,
            limits=self.limits,
            cipher=self.cipher,
            dictionary=self.dictionary,
        )

    def _compressor_for(self, size: int) -> zstandard.ZstdCompressor:
        """The compressor for ``size`` raw bytes: above zstd's window at this level (2 MiB
        at 3) one whose window spans the whole value, up to 128 MiB, which every zstd
        decoder accepts by default. A snapshot holds each tool result twice (in the
        conversation and in the ledger), further apart than 2 MiB once it grows:
        measured 7% smaller at the same speed."""
        window_log = min(_MAX_WINDOW_LOG, max(size - 1, 1).bit_length())
        if window_log <= self._default_window_log:
            return self._compressor
        found = self._wide.get(window_log)
        if found is None:
            params = zstandard.ZstdCompressionParameters.from_level(self._level, window_log=window_log)
            found = self._wide[window_log] = zstandard.ZstdCompressor(compression_params=params)
        return found

    def encode(
        self,
        schema_id: int,
        schema_version: int,
        value: Any,
        *,
        path: str = "value",
        check: bool = True,
        tagged: bool = True,
        stream: StreamId | None = None,
        seq: int | None = None,
        small: bool = False,
    ) -> bytes:
        """Encode ``value`` as a frame (bytes).

        Raises ``UnencodableValueError`` with the field path (rooted at ``path``)
        for values outside plain data, before anything is written; also for a string
        that is not valid Unicode and a value whose CBOR passes the decode size
        limit. ``check=False`` skips the walk, for callers that already ran
        ``check_encodable``; they pass what it returned as ``tagged`` (False:
        plain data only, no tag conversion needed).
        ``stream`` (``StreamId``) and ``seq`` say where the frame will be stored;
        an encrypting codec binds the ciphertext to them and raises ``ValueError``
        without them. ``small``: the value is one of many small ones (a record);
        a plaintext frame with a place is then compressed with the codec's
        ``dictionary`` (format 3) when that makes it smaller.
        """
        raw = self.payload(value, path=path, check=check, tagged=tagged)
        return self.frame(schema_id, schema_version, raw, stream=stream, seq=seq, small=small)

    def payload(self, value: Any, *, path: str = "value", check: bool = True, tagged: bool = True) -> bytes:
        """The CBOR payload of ``value``: the part of ``encode`` that reads the value.

        ``path``, ``check`` and ``tagged`` as in ``encode``. Raises ``UnencodableValueError``
        as ``encode`` does. ``frame`` turns the result into the stored bytes.
        """
        if check:
            tagged = check_encodable(value, path, self.limits.max_depth)
        try:
            raw = cbor2.dumps(values.to_cbor(value) if tagged else value)
        except (UnicodeEncodeError, cbor2.CBOREncodeError, ValueError, OverflowError) as exc:
            raise _locate_unencodable(value, path, exc) from exc
        if len(raw) > self.limits.max_raw_size:
            # Decoding refuses frames past this bound, so writing one would store an unreadable record.
            where, size = _largest_part(value, path, self.limits.max_raw_size)
            raise UnencodableValueError(
                where, f"encodes to {size} bytes, over the {self.limits.max_raw_size}-byte limit that decoding allows"
            )
        return raw

    def frame(
        self,
        schema_id: int,
        schema_version: int,
        raw: bytes,
        *,
        stream: StreamId | None = None,
        seq: int | None = None,
        small: bool = False,
        prefix: bytes = b"",
        level: int | None = None,
    ) -> bytes:
        """The frame of the CBOR payload ``raw`` (from ``payload``): compressed, encrypted and
        checksummed, the part of ``encode`` that spends its time in zstd, the cipher and
        CRC-32, which release the GIL on large inputs. It touches no Python value, so it may
        run in another thread, on that thread's own codec (``twin``). Arguments as ``encode``;
        raises ``InvalidArgumentError`` when an encrypting codec is given no ``stream``/``seq``.

        ``prefix``: bytes the decoder will have (a conversation page's earlier pages): the
        payload is compressed as their continuation (zstd's raw-content dictionary), so what
        it repeats from them costs a few bytes, and only ``decode`` with the same ``prefix``
        reads it. ``level``: the zstd level for this frame (default: the codec's).
        """
        flags = 0
        payload = raw
        if small and self.dictionary is not None and self.cipher is None and stream is not None and seq is not None:
            compressed = self._dictionaries.compress(raw)
            if len(compressed) + _DICT_ID_SIZE < len(raw):
                header = _HEADER_DICT.pack(
                    MAGIC,
                    FORMAT_DICTIONARY,
                    FLAG_ZSTD,
                    schema_id,
                    schema_version,
                    len(raw),
                    len(compressed),
                    self.dictionary,
                )
                crc = zlib.crc32(compressed, zlib.crc32(header, place_seed(stream, seq)))
                return b"".join((header, _CRC.pack(crc), compressed))
        if len(raw) >= self._min_compress:
            if prefix or level is not None:
                compressor = _prefixed_compressor(len(raw), prefix, self._level if level is None else level)
            else:
                compressor = self._compressor_for(len(raw))
            compressed = compressor.compress(raw)
            if len(compressed) < len(raw):
                payload, flags = compressed, FLAG_ZSTD
        if self.cipher is not None:
            if stream is None or seq is None:
                raise InvalidArgumentError("an encrypting codec needs the stream and seq a frame is stored at")
            flags |= FLAG_ENCRYPTED
            aad = associated_data(flags, schema_id, schema_version, len(raw), stream, seq, UNBOUND_FORMAT)
            payload = self.cipher.seal(payload, aad)
        # An encrypted frame's tag already binds its place; its CRC stays over the stored
        # bytes alone, so bit rot (CRC) is told apart from tampering or a move (tag).
        bound = stream is not None and seq is not None and not flags & FLAG_ENCRYPTED
        fmt = FORMAT_VERSION if bound else UNBOUND_FORMAT
        header = _HEADER.pack(MAGIC, fmt, flags, schema_id, schema_version, len(raw), len(payload))
        crc = zlib.crc32(
            payload,
            zlib.crc32(header, place_seed(stream, seq) if bound and stream is not None and seq is not None else 0),
        )
        return b"".join((header, _CRC.pack(crc), payload))

    def decode(
        self,
        data: bytes,
        *,
        stream: StreamId | None = None,
        seq: int | None = None,
        prefix: bytes = b"",
        load: bool = True,
    ) -> Frame:
        """Decode a frame. ``stream``/``seq`` label errors and, for an encrypted
        frame, are the place its associated data must name. ``prefix``: the bytes its
        payload was compressed as the continuation of (``frame``). ``load=False``: the
        frame's CBOR payload is checked as bytes (sizes, checksum, tag) but not decoded:
        the ``Frame`` holds it as ``raw``, its ``value`` None.

        Raises ``TruncatedRecordError`` for a frame shorter than its header says,
        ``CorruptRecordError`` for a value that is not bytes, bad magic, an unknown
        format version, a checksum mismatch (for format 2 also: a frame copied from
        another place), trailing bytes or invalid CBOR/zstd, ``InvalidRequestError``
        for a format 2 frame decoded without its stream and seq, and ``FrameLimitError`` when
        the size or depth bounds would be passed. With encryption: ``DecryptionError``
        (tampered, moved, wrong key, no cipher, no place given), ``UnknownKeyError``
        (its key id is not available) and ``EncryptionRequiredError`` (a plaintext
        frame while the cipher requires encryption).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            # A foreign value where an adapter keeps frames (a TEXT cell, a number).
            raise CorruptRecordError(
                f"a frame must be bytes, the store holds a {type(data).__name__}", stream=stream, seq=seq
            )
        view = memoryview(data)
        if len(view) < HEADER_SIZE:
            raise TruncatedRecordError(
                f"frame of {len(view)} bytes is shorter than the {HEADER_SIZE}-byte header", stream=stream, seq=seq
            )
        header, dictionary = _HEADER, 0
        if view[2] == FORMAT_DICTIONARY:
            if len(view) < HEADER_SIZE_DICT:
                raise TruncatedRecordError(
                    f"frame of {len(view)} bytes is shorter than the {HEADER_SIZE_DICT}-byte header of format 3",
                    stream=stream,
                    seq=seq,
                )
            header = _HEADER_DICT
            magic, fmt, flags, schema_id, schema_version, raw_size, stored_size, dictionary = header.unpack_from(view)
        else:
            magic, fmt, flags, schema_id, schema_version, raw_size, stored_size = header.unpack_from(view)
        if magic != MAGIC:
            raise CorruptRecordError("not a durably frame (bad magic)", stream=stream, seq=seq)
        if fmt not in (FORMAT_DICTIONARY, FORMAT_VERSION, UNBOUND_FORMAT):
            raise CorruptRecordError(f"unknown frame format version {fmt}", stream=stream, seq=seq)
        if fmt != UNBOUND_FORMAT and (stream is None or seq is None):
            raise InvalidRequestError(
                f"a format {fmt} frame is bound to its place: decoding it needs its stream and seq"
            )
        payload = view[header.size + _CRC.size :]
        if len(payload) < stored_size:
            raise TruncatedRecordError(
                f"frame payload has {len(payload)} of {stored_size} bytes", stream=stream, seq=seq
            )
        if len(payload) > stored_size:
            raise CorruptRecordError(
                f"{len(payload) - stored_size} unexpected bytes after the frame", stream=stream, seq=seq
            )
        (crc,) = _CRC.unpack_from(view, header.size)
        # (stream and seq are known for a bound format: refused above otherwise; the test narrows them for mypy)
        seed = place_seed(stream, seq) if fmt != UNBOUND_FORMAT and stream is not None and seq is not None else 0
        if zlib.crc32(payload, zlib.crc32(view[: header.size], seed)) != crc:
            where = " (or the frame was copied from another stream or seq)" if seed else ""
            raise CorruptRecordError(f"checksum mismatch{where}", stream=stream, seq=seq)
        if raw_size > self.limits.max_raw_size:
            raise FrameLimitError(
                f"frame would decode to {raw_size} bytes, over the {self.limits.max_raw_size}-byte limit",
                stream=stream,
                seq=seq,
            )
        if fmt == FORMAT_DICTIONARY:
            if flags != FLAG_ZSTD:  # this format is only written for plaintext frames compressed with a dictionary
                raise CorruptRecordError(f"format 3 frame with flags {flags:#x}", stream=stream, seq=seq)
            if self.cipher is not None and self.cipher.required:
                raise EncryptionRequiredError("plaintext frame where encryption is required", stream=stream, seq=seq)
            try:
                raw: bytes | memoryview = self._dictionaries.decompress(payload, dictionary, raw_size)
                if not load:
                    return Frame(schema_id, schema_version, None, raw_size, len(payload), bytes(raw))
                value = self._loads(raw, stream, seq)
            except UnknownDictionaryError as exc:
                raise UnknownDictionaryError(dictionary, exc.known, stream=stream, seq=seq) from None
            except (ValueError, zstandard.ZstdError) as exc:  # CBORDecodeError is a ValueError
                cls = FrameLimitError if "depth" in str(exc) else CorruptRecordError
                raise cls(
                    f"{'cbor' if isinstance(exc, cbor2.CBORDecodeError) else 'zstd'}: {exc}", stream=stream, seq=seq
                ) from exc
            return Frame(schema_id, schema_version, value, raw_size, len(payload))
        if flags & FLAG_ENCRYPTED:
            if self.cipher is None:
                raise DecryptionError(
                    "frame is encrypted and this codec has no cipher (key provider)", stream=stream, seq=seq
                )
            if stream is None or seq is None:
                raise DecryptionError(
                    "an encrypted frame cannot be decrypted without the stream and seq it is stored at"
                )
            aad = associated_data(flags, schema_id, schema_version, raw_size, stream, seq, fmt)
            payload = memoryview(self.cipher.open(bytes(payload), aad, stream=stream, seq=seq))
        elif self.cipher is not None and self.cipher.required:
            raise EncryptionRequiredError("plaintext frame where encryption is required", stream=stream, seq=seq)
        try:
            if flags & FLAG_ZSTD:
                # zstd sizes its output from the content size in its own frame header and
                # ignores max_output_size then, so a frame declaring more than raw_size
                # (a crafted bomb with a valid CRC) is refused before it inflates.
                declared = zstandard.frame_content_size(payload)
                if declared != raw_size:  # our frames always declare it; unknown (-1) is not ours
                    raise CorruptRecordError(
                        f"zstd frame declares {declared} bytes, header says {raw_size}", stream=stream, seq=seq
                    )
                # One frame, and nothing after it (allow_extra_data=False refuses a second frame or
                # junk); one call into an output sized from the content size (for a large snapshot,
                # 1.7x faster than a decompressobj growing its output).
                decompressor = self._decompressor
                if prefix:
                    continued = zstandard.ZstdCompressionDict(prefix, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
                    decompressor = zstandard.ZstdDecompressor(dict_data=continued)
                try:
                    raw = decompressor.decompress(payload, max_output_size=raw_size, allow_extra_data=False)
                except zstandard.ZstdError as exc:
                    raise CorruptRecordError(
                        f"zstd payload is not exactly one frame: {exc}", stream=stream, seq=seq
                    ) from exc
            else:
                raw = payload
            if len(raw) != raw_size:
                raise CorruptRecordError(f"payload is {len(raw)} bytes, header says {raw_size}", stream=stream, seq=seq)
            if not load:
                return Frame(schema_id, schema_version, None, raw_size, len(payload), bytes(raw))
            value = self._loads(raw, stream, seq)
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd: {exc}", stream=stream, seq=seq) from exc
        except cbor2.CBORDecodeError as exc:
            cls = FrameLimitError if "depth" in str(exc) else CorruptRecordError
            raise cls(f"cbor: {exc}", stream=stream, seq=seq) from exc
        return Frame(schema_id, schema_version, value, raw_size, len(payload))

    def loads(self, raw: bytes) -> Any:
        """Decode one bare CBOR item (no frame) by a frame's rules: durably's tags
        only, no indefinite lengths, duplicate keys or simple values it never
        writes, within the codec's depth limit, every byte consumed.

        Raises ``CorruptRecordError`` for bytes that break a rule and
        ``FrameLimitError`` past the depth limit."""
        try:
            return self._loads(raw, None, None)
        except cbor2.CBORDecodeError as exc:
            cls = FrameLimitError if "depth" in str(exc) else CorruptRecordError
            raise cls(f"cbor: {exc}") from exc

    def _loads(self, raw: bytes | memoryview, stream: StreamId | None, seq: int | None) -> Any:
        """Exactly one CBOR item, consuming every byte, with durably's tags only."""
        source = io.BytesIO(raw)
        decoder = self._decoder
        if decoder is None:  # made once per codec (a third of a small record's decode time), reused
            decoder = cbor2.CBORDecoder(
                source,
                tag_hook=values.refuse_unknown,
                semantic_decoders=values.SEMANTIC_DECODERS,
                max_depth=self.limits.max_depth,
                allow_indefinite=False,
                allow_duplicate_keys=False,
                strict_hashable_types=True,
            )
        else:
            decoder.fp = source
        self._decoder = None  # an item that fails leaves no half-used decoder behind
        value = decoder.decode()
        self._decoder = decoder
        if source.tell() != len(raw):
            raise CorruptRecordError(f"{len(raw) - source.tell()} bytes after the CBOR item", stream=stream, seq=seq)
        # cbor2 hands ``undefined`` and unassigned simple values through as its own
        # sentinel objects, and no hook can refuse them while decoding.
        where = values.simple_value_path(raw, value)
        if where is not None:
            raise CorruptRecordError(
                f"cbor: a simple value durably never writes (undefined or unassigned) at {where[:200]}",
                stream=stream,
                seq=seq,
            )
        return value
