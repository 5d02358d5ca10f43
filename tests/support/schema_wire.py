"""Checking stored frames against the CDDL in durably/schemas, independently of the codec.

The header is unpacked here with ``struct`` from the layout documented in
``frame.cddl`` (not with durably's codec), so a codec change that the docs do
not follow fails the tests that use this module.
"""

from __future__ import annotations

import importlib.resources
import struct
from functools import cache
from typing import Any

import cbor2
import pycddl
import zstandard

from durably.schemas._records import RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID

HEADER = struct.Struct(">2sBBBHIII")  # magic, format, flags, schema id, version, raw, stored, crc
HEADER_V3 = struct.Struct(">2sBBBHIIII")  # format 3: ... stored, dictionary id, crc
HEADER_V4 = struct.Struct(">2sBBBHIIIHI")  # format 4 (a group): ... dictionary id (0: none), count, crc
FILE_PREFIX = {RECORD_SCHEMA_ID: "record", SNAPSHOT_SCHEMA_ID: "snapshot"}


def cddl_text(name: str) -> str:
    """The text of ``durably/schemas/<name>`` as installed."""
    return (importlib.resources.files("durably.schemas") / name).read_text(encoding="utf-8")


def cddl_name(schema_id: int, version: int) -> str:
    """The file describing ``schema_id`` at ``version``, e.g. ``record-v1.cddl``."""
    return f"{FILE_PREFIX[schema_id]}-v{version}.cddl"


@cache
def schema(name: str) -> pycddl.Schema:
    """The parsed CDDL of ``name`` (its first rule is what it validates)."""
    return pycddl.Schema(cddl_text(name))


def header_fields(frame: bytes) -> dict[str, Any]:
    """The frame header as the map ``frame.cddl`` describes."""
    if frame[2] == 4:
        magic, fmt, flags, schema_id, version, raw, stored, dictionary, count, crc = HEADER_V4.unpack_from(frame)
        return {
            "magic": magic,
            "format": fmt,
            "flags": flags,
            "schema-id": schema_id,
            "schema-version": version,
            "raw-size": raw,
            "stored-size": stored,
            "dictionary-id": dictionary,
            "count": count,
            "crc32": crc,
        }
    if frame[2] == 3:
        magic, fmt, flags, schema_id, version, raw, stored, dictionary, crc = HEADER_V3.unpack_from(frame)
        return {
            "magic": magic,
            "format": fmt,
            "flags": flags,
            "schema-id": schema_id,
            "schema-version": version,
            "raw-size": raw,
            "stored-size": stored,
            "dictionary-id": dictionary,
            "crc32": crc,
        }
    magic, fmt, flags, schema_id, version, raw, stored, crc = HEADER.unpack_from(frame)
    return {
        "magic": magic,
        "format": fmt,
        "flags": flags,
        "schema-id": schema_id,
        "schema-version": version,
        "raw-size": raw,
        "stored-size": stored,
        "crc32": crc,
    }


@cache
def shipped_dictionaries() -> dict[int, bytes]:
    """Every ``*.zdict`` file durably ships, by the id its own zstd header names (as ``frame.cddl`` says)."""
    folder = importlib.resources.files("durably.storage._dictionaries")
    files = [entry.read_bytes() for entry in folder.iterdir() if entry.name.endswith(".zdict")]
    return {zstandard.ZstdCompressionDict(data).dict_id(): data for data in files}


def payload(frame: bytes) -> bytes:
    """The frame's CBOR payload, decompressed when flag bit 0 says so."""
    header = header_fields(frame)
    sizes = {3: HEADER_V3.size, 4: HEADER_V4.size}
    body = frame[sizes.get(header["format"], HEADER.size) :]
    assert len(body) == header["stored-size"]
    assert not header["flags"] & 2, "an encrypted payload cannot be checked without its key"
    if header["format"] == 3 or header.get("dictionary-id"):
        dictionary = zstandard.ZstdCompressionDict(shipped_dictionaries()[header["dictionary-id"]])
        inflate = zstandard.ZstdDecompressor(dict_data=dictionary, format=zstandard.FORMAT_ZSTD1_MAGICLESS)
        body = inflate.decompress(body, max_output_size=header["raw-size"])
    elif header["flags"] & 1:
        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=header["raw-size"])
    assert len(body) == header["raw-size"]
    return body


MEMBER_ROW = struct.Struct(">2sBBHHI")  # format 5: magic, format, flags, index, count, crc


def validate_member_row(row: bytes) -> dict[str, Any]:
    """Validate a group's member row (format 5) against ``member-row`` in ``frame.cddl``; return its map."""
    assert len(row) == MEMBER_ROW.size, len(row)
    magic, fmt, flags, index, count, crc = MEMBER_ROW.unpack(row)
    fields = {"magic": magic, "format": fmt, "flags": flags, "index": index, "count": count, "crc32": crc}
    assert magic == b"dy", magic
    pycddl.Schema("root = member-row\n" + cddl_text("frame.cddl")).validate_cbor(cbor2.dumps(fields))
    return fields


def validate_frame(frame: bytes) -> dict[str, Any]:
    """Validate header and payload of ``frame`` against the CDDL; return the header map.

    Raises ``pycddl.ValidationError`` (or ``AssertionError`` for the magic bytes,
    which the validator cannot compare) when the bytes and the docs disagree.
    """
    header = header_fields(frame)
    assert header["magic"] == b"dy", header["magic"]
    schema("frame.cddl").validate_cbor(cbor2.dumps(header))
    item_schema = schema(cddl_name(header["schema-id"], header["schema-version"]))
    if header["format"] == 4:  # a group: an array of count records, each as its schema says
        items = cbor2.loads(payload(frame))
        assert isinstance(items, list) and len(items) == header["count"], header
        for item in items:
            item_schema.validate_cbor(cbor2.dumps(item))
    else:
        item_schema.validate_cbor(payload(frame))
    return header
