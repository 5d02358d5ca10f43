"""The zstd dictionaries durably ships for record frames, found by id.

A record frame is small (a tool intent is ~120 bytes of CBOR, a model turn a
few hundred), and zstd alone finds little to refer back to in so few bytes:
most of them were stored uncompressed. A dictionary primes each compression
with what records share (map keys, record kinds, the shape of tool calls,
idempotency keys, the texture of code and prose), so even a tiny record
compresses (the zstd manual's "dictionary compression" for small data; RFC
8878 section 5). Frame format 3 names the dictionary by its zstd dictionary
id (``durably.storage._codec``); a frame naming one this build does not ship
fails with ``UnknownDictionaryError`` and its data stays as it is.

A shipped dictionary never changes and is never removed: old frames name it.
A better one is a new file under a new id; ``DEFAULT`` says which one new
frames use. ``records-1.zdict`` was made by ``python -m durably.bench.dictionary``
(see that module for what it was trained on).
"""

from __future__ import annotations

import functools
import pkgutil

import zstandard

from .._errors import UnknownDictionaryError

#: The first shipped record dictionary. zstd leaves ids below 32,768 and from 2**31 on to
#: a registry; private ones live between (RFC 8878 section 5): "dy" then a serial number.
RECORDS_V1 = 0x6479_0001
DICTIONARY_SIZE = 64 * 1024  # bytes; measured: 16 KiB gave 1.33x, 64 KiB 1.38x on the bench's records
#: The dictionary new record frames are compressed with (None: none; the bench's training sets it so).
DEFAULT: int | None = RECORDS_V1

_FILES = {RECORDS_V1: "records-1.zdict"}


def known() -> frozenset[int]:
    """The ids of every dictionary this build ships."""
    return frozenset(_FILES)


@functools.cache
def dictionary_bytes(dictionary_id: int) -> bytes:
    """The bytes of dictionary ``dictionary_id`` (read once per process).

    Raises ``UnknownDictionaryError`` for an id this build does not ship, and
    also if the shipped file does not carry the id it is filed under (a broken install).
    """
    name = _FILES.get(dictionary_id)
    if name is None:
        raise UnknownDictionaryError(dictionary_id, known())
    # pkgutil: the package's loader reads the file (a plain file or a zip member), without
    # importlib.resources, whose import (tempfile, shutil, zipfile...) costs more than the read.
    data = pkgutil.get_data(__package__, name)
    if data is None:  # a loader that cannot read files: the general (slower to import) way
        from importlib import resources

        data = (resources.files(__package__) / name).read_bytes()
    if zstandard.ZstdCompressionDict(data).dict_id() != dictionary_id:
        raise UnknownDictionaryError(
            dictionary_id, known(), f"the shipped file {name} is not dictionary {dictionary_id:#x}"
        )
    return data


def load(dictionary_id: int) -> zstandard.ZstdCompressionDict:
    """A new ``ZstdCompressionDict`` of ``dictionary_id`` (one per codec: they are not shared between threads).

    Raises ``UnknownDictionaryError`` as ``dictionary_bytes``.
    """
    return zstandard.ZstdCompressionDict(dictionary_bytes(dictionary_id), dict_type=zstandard.DICT_TYPE_FULLDICT)


#: log2 of the hash and chain tables record frames are compressed with (16 K entries each,
#: 128 KiB in all). Measured on the bench's records with a cold cache (as in a busy event
#: loop): 2x faster than the level's default tables, 2 % more stored bytes. Frames stay
#: plain zstd: decoding does not depend on it.
TABLE_LOG = 14

#: zstd frames inside format 3 drop their 4-byte magic number; the frame header names their dictionary.
MAGICLESS = zstandard.FORMAT_ZSTD1_MAGICLESS


class DictionaryFrames:
    """Compresses payloads with one dictionary and decompresses those of any shipped one.

    In: ``dictionary`` (the id to compress with; None: compress never
    called) and the zstd ``level``. Contexts are made on first use and kept:
    one instance per codec, so per thread (zstd contexts are not shareable).
    """

    def __init__(self, dictionary: int | None, level: int = 3) -> None:
        self.dictionary = dictionary
        self._level = level
        self._compressor: zstandard.ZstdCompressor | None = None
        self._decompressors: dict[int, zstandard.ZstdDecompressor] = {}

    def compress(self, raw: bytes) -> bytes:
        """``raw`` as one magicless zstd frame with its content size and no dictionary id or checksum."""
        if self._compressor is None:
            assert self.dictionary is not None
            trained = load(self.dictionary)
            # Digested once, not per small frame, into match tables sized for records
            # (TABLE_LOG): the level's own (hash 2**17, chain 2**16 entries, ~768 KiB)
            # are cold in cache at every record of a busy loop, which makes a record's
            # compression cost 4x its warm-cache time.
            trained.precompute_compress(
                compression_params=zstandard.ZstdCompressionParameters.from_level(
                    self._level, hash_log=TABLE_LOG, chain_log=TABLE_LOG
                )
            )
            params = zstandard.ZstdCompressionParameters.from_level(
                self._level,
                hash_log=TABLE_LOG,
                chain_log=TABLE_LOG,
                format=MAGICLESS,
                write_content_size=True,
                write_dict_id=False,
                write_checksum=False,
            )
            self._compressor = zstandard.ZstdCompressor(dict_data=trained, compression_params=params)
        return self._compressor.compress(raw)

    def decompress(self, payload: bytes | memoryview, dictionary: int, raw_size: int) -> bytes:
        """The ``raw_size`` bytes of ``payload``, compressed with ``dictionary``.

        Raises ``UnknownDictionaryError`` for a dictionary this build does not
        ship, ``ValueError`` when the zstd frame declares another content size
        (refused before it inflates: a crafted bomb), and ``zstandard.ZstdError``
        for anything but exactly one valid frame.
        """
        inflate = self._decompressors.get(dictionary)
        if inflate is None:
            inflate = self._decompressors[dictionary] = zstandard.ZstdDecompressor(
                dict_data=load(dictionary), format=MAGICLESS
            )
        declared = zstandard.get_frame_parameters(payload, format=MAGICLESS).content_size
        if declared != raw_size:
            raise ValueError(f"zstd frame declares {declared} bytes, header says {raw_size}")
        raw = inflate.decompress(payload, max_output_size=raw_size, allow_extra_data=False)
        if len(raw) != raw_size:
            raise ValueError(f"payload is {len(raw)} bytes, header says {raw_size}")
        return raw
