"""Forged frames and lossless values.

A frame decodes as exactly one zstd frame and exactly one CBOR item consuming every
byte, with only the tags durably writes and bounded expansion; the standard
library's value types round-trip exactly, and naive datetimes read the same on
every host."""

from __future__ import annotations

import datetime as dt
import fractions
import ipaddress
import re
import struct
import subprocess
import sys
import time
import uuid
import zlib
from decimal import Decimal

import cbor2
import pytest
import zstandard

from durably.storage._codec import Codec
from durably.storage._errors import CorruptRecordError

ALL_TYPES = {
    "aware": dt.datetime(2025, 3, 30, 1, 59, 59, 123456, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    "utc": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    "naive": dt.datetime(2025, 3, 30, 2, 30),  # a wall-clock time that does not exist in Europe/Berlin
    "date": dt.date(2024, 2, 29),
    "time": dt.time(23, 59, 59, 999999),
    "time_tz": dt.time(8, 0, tzinfo=dt.timezone(dt.timedelta(hours=9))),
    "delta": dt.timedelta(days=-2, seconds=3, microseconds=4),
    "decimal": Decimal("-12345678901234567890123456789.000000000000000000001"),
    "decimal_exp": Decimal("1E+20"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "tuple": (1, "a", (2.5, [None, True])),
    "set": {1, "b", (3, 4)},
    "frozenset": frozenset({"x", frozenset({1})}),
    "bytes": b"\x00\xff",
    "empty": ((), set(), frozenset()),
}


def test_every_supported_type_round_trips_with_its_exact_type() -> None:
    codec = Codec()
    back = codec.decode(codec.encode(1, 1, ALL_TYPES)).value
    assert back == ALL_TYPES
    for key, value in ALL_TYPES.items():
        assert type(back[key]) is type(value), key
    assert back["aware"].utcoffset() == ALL_TYPES["aware"].utcoffset()
    assert back["naive"].tzinfo is None


NAIVE_PROBE = """
import datetime as dt, sys, time
from durably.storage._codec import Codec
codec = Codec()
value = dt.datetime(2025, 3, 30, 2, 30)
frame = codec.encode(1, 1, {"t": value})
print(time.tzname[0], frame.hex(), codec.decode(frame).value["t"].isoformat())
"""


def test_a_naive_datetime_is_stored_and_read_the_same_under_every_tz() -> None:
    outputs = []
    for zone in ("UTC", "Asia/Tokyo", "America/St_Johns"):
        done = subprocess.run(
            [sys.executable, "-c", NAIVE_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            env={"TZ": zone, "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.split())
    assert len({name for name, _, _ in outputs}) == 3  # the zones really differed
    assert len({(frame, text) for _, frame, text in outputs}) == 1
    assert outputs[0][2] == "2025-03-30T02:30:00"


def frame_of(raw: bytes, *, compress: bool = False, payload: bytes | None = None) -> bytes:
    """A format-1 record frame around ``raw`` CBOR with a valid CRC (a forger can compute one)."""
    body = payload if payload is not None else (zstandard.ZstdCompressor().compress(raw) if compress else raw)
    header = struct.pack(">2sBBBHII", b"dy", 1, 1 if compress else 0, 1, 1, len(raw), len(body))
    return header + struct.pack(">I", zlib.crc32(body, zlib.crc32(header))) + body


def refused(frame: bytes, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        Codec().decode(frame)


def test_bytes_after_the_cbor_item_are_refused() -> None:
    raw = cbor2.dumps({"a": 1}) + b"\x00"
    refused(frame_of(raw), "bytes after the CBOR item")


def test_junk_or_a_second_zstd_frame_after_the_first_is_refused() -> None:
    raw = cbor2.dumps({"a": "x" * 300})
    one = zstandard.ZstdCompressor().compress(raw)
    refused(frame_of(raw, compress=True, payload=one + one), "not exactly one frame")
    refused(frame_of(raw, compress=True, payload=one + b"junk"), "not exactly one frame")


@pytest.mark.parametrize(
    "value",
    [
        re.compile("a+"),
        fractions.Fraction(1, 3),
        ipaddress.ip_address("10.0.0.1"),
        cbor2.CBORTag(1, 1_700_000_000),  # epoch time: durably writes tag 0
        cbor2.CBORTag(27, ["os.system", "rm -rf /"]),  # a type name durably never writes
        cbor2.CBORTag(55799, 1),
        cbor2.CBORTag(40000, 1),
        cbor2.CBORTag(5, [1, 3]),
    ],
    ids=["regex", "fraction", "ip", "epoch", "foreign-type-27", "self-describe", "unassigned", "bigfloat"],
)
def test_tags_durably_never_writes_are_refused(value) -> None:
    refused(frame_of(cbor2.dumps({"v": value})), "not one durably writes|cbor:")


def test_array_map_keys_and_duplicate_keys_are_refused() -> None:
    refused(frame_of(b"\xa1\x82\x01\x02\x01"), "cbor:")  # {[1, 2]: 1}: a tuple key
    refused(frame_of(b"\xa2\x61a\x01\x61a\x02"), "cbor:")  # {"a": 1, "a": 2}


def test_a_small_record_of_shared_references_is_refused_at_once() -> None:
    node: list = [1]
    for _ in range(55):
        node = [node, node]  # 2^55 leaves once expanded
    raw = cbor2.dumps({"d": node}, value_sharing=True)
    assert len(raw) < 400
    started = time.monotonic()
    refused(frame_of(raw), "cbor:")
    assert time.monotonic() - started < 1.0


def test_a_cycle_cannot_be_built() -> None:
    cycle: list = []
    cycle.append(cycle)
    refused(frame_of(cbor2.dumps(cycle, value_sharing=True)), "cbor:")


@pytest.mark.parametrize(
    "forged",
    [
        cbor2.CBORTag(4, [10**7, 1]),
        cbor2.CBORTag(37, b"short"),
        cbor2.CBORTag(258, [1, 1]),
        cbor2.CBORTag(0, "2025-01-01T00:00:00"),
        cbor2.CBORTag(27, ["timedelta", ["a", 0, 0]]),
        cbor2.CBORTag(2, b"\x01" * 1000),
    ],
    ids=["decimal-exponent", "uuid-size", "set-duplicates", "naive-in-tag-0", "timedelta-shape", "huge-bignum"],
)
def test_durably_tags_out_of_shape_are_refused(forged) -> None:
    refused(frame_of(cbor2.dumps({"v": forged})), "cbor:")


@pytest.mark.parametrize(
    "raw",
    [
        cbor2.dumps({"messages": [{"role": "user", "content": cbor2.undefined}]}),
        cbor2.dumps({"messages": [cbor2.CBORSimpleValue(16)]}),
        cbor2.dumps({"v": cbor2.CBORTag(27, ["tuple", [1, cbor2.CBORSimpleValue(200)]])}),
        cbor2.dumps(cbor2.undefined),
    ],
    ids=["undefined-in-messages", "simple-16", "simple-200-in-tuple", "undefined-alone"],
)
def test_simple_values_durably_never_writes_are_refused(raw: bytes) -> None:
    refused(frame_of(raw), "simple value")
    refused(frame_of(raw, compress=True), "simple value")


def test_bytes_and_text_that_look_like_simple_values_still_round_trip() -> None:
    value = {"text": "naïve — 漢字 🙂", "bytes": bytes([0xE0, 0xF3, 0xF7, 0xF8, 0x17]), "n": 0xF7F8E0}
    assert Codec().decode(frame_of(cbor2.dumps(value))).value == value
