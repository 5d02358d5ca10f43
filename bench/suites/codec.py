"""codec: encode+compress and decompress+decode MB/s, and compression ratios.

On the records of a seeded conversation (as the runtime journals them) and on
snapshots of its state at a quarter, half and the whole of the run. Speeds are
of the raw CBOR size (bytes before compression) per second, through
``RecordCodec`` (so the plain-data check on encode and the checksum and bounds
on decode are included). Record frames use the zstd dictionary durably ships
(frame format 3, ``durably.storage._dictionaries``, trained on text the bench
never uses); ``record_bytes_no_dict`` / ``record_bytes`` compare the journal's
frames without and with it. The last figures show what a dictionary trained
on this very workload would give the small records (those under 1 KiB of
CBOR): a bound no shipped dictionary can honestly reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import cbor2
import zstandard

from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably.schemas._records import Record
from durably.storage._codec import Codec, raw_size
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

from ..context import Bench
from ..workload import journal_entries

SUITE = "codec"


def _timed(fn: Callable[[], object], repeats: int = 3) -> float:
    """Best of ``repeats`` runs of ``fn()``, in seconds (best: least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _speed_figures(
    bench: Bench, kind: str, raw: int, stored: int, encode_s: float, decode_s: float, **params: Any
) -> None:
    r = bench.results
    r.add(SUITE, "encode_mb_per_s", raw / encode_s / 1e6, "MB/s", kind=kind, **params)
    r.add(SUITE, "decode_mb_per_s", raw / decode_s / 1e6, "MB/s", kind=kind, **params)
    r.add(SUITE, "compression_ratio", raw / stored, "raw/stored", kind=kind, **params)


async def run(bench: Bench) -> None:
    """Measure records, snapshots and the dictionary experiment."""
    steps = bench.sizes.codec_steps
    task = bench.progress.start("codec", 3)
    entries = journal_entries(bench.conversation(steps), "bench", "agent-0")
    records = [Record(seq, kind, data, 1_700_000_000.0 + seq) for seq, (kind, data) in enumerate(entries, start=1)]
    codec = RecordCodec()
    place = StreamId("bench", "agent-0")  # frames as the runtime writes them: format 2, bound to their place
    frames = [codec.encode_record(rec, place) for rec in records]
    stored_frames = [StoredRecord(rec.seq, f) for rec, f in zip(records, frames, strict=False)]
    raw = sum(map(raw_size, frames))
    encode_s = _timed(lambda: [codec.encode_record(rec, place) for rec in records])
    decode_s = _timed(lambda: [codec.decode_record(s, place) for s in stored_frames])
    _speed_figures(bench, "record", raw, sum(map(len, frames)), encode_s, decode_s, records=len(records))
    plain = RecordCodec(Codec(dictionary=None))
    without = bench.results.add(
        SUITE,
        "record_bytes_no_dict",
        sum(len(plain.encode_record(rec, place)) for rec in records),
        "B",
        records=len(records),
    )
    shipped = bench.results.add(SUITE, "record_bytes", sum(map(len, frames)), "B", records=len(records))
    bench.results.ratio(SUITE, "record bytes without/with the shipped dictionary", without, shipped)
    bench.progress.advance(task)

    state = AgentState()
    marks = {len(records) // 4, len(records) // 2, len(records)}
    for rec in records:
        apply(state, rec)
        if rec.seq in marks:
            wire = state.to_wire()
            frame = codec.encode_snapshot(rec.seq, wire)
            enc = _timed(lambda: codec.encode_snapshot(rec.seq, wire))
            dec = _timed(lambda: codec.decode_snapshot(StoredSnapshot(rec.seq, frame)))
            _speed_figures(bench, "snapshot", raw_size(frame), len(frame), enc, dec, at_seq=rec.seq)
    bench.progress.advance(task)

    small = [cbor2.dumps(rec.to_wire()) for rec in records]
    small = [s for s in small if len(s) < 1024]
    if len(small) >= 20:
        half = len(small) // 2
        train, test = small[:half], small[half:]
        zstd_plain = zstandard.ZstdCompressor(level=3)
        raw_test = sum(map(len, test))
        # As durably stores them: payloads under 256 B stay raw, others keep the smaller form.
        stored_plain = sum(len(s) if len(s) < 256 else min(len(s), len(zstd_plain.compress(s))) for s in test)
        try:
            samples: list[bytes | bytearray | memoryview[int]] = list(train)
            dictionary = zstandard.train_dictionary(16 * 1024, samples)
        except zstandard.ZstdError as exc:
            bench.results.note(f"codec: zstd dictionary training failed on {len(train)} samples: {exc}")
        else:
            with_dict = zstandard.ZstdCompressor(level=3, dict_data=dictionary)
            stored_dict = sum(min(len(s), len(with_dict.compress(s))) for s in test)
            params: dict[str, Any] = {"kind": "record<1KiB", "records": len(test)}
            bench.results.add(SUITE, "compression_ratio_no_dict", raw_test / stored_plain, "raw/stored", **params)
            bench.results.add(SUITE, "compression_ratio_dict16k", raw_test / stored_dict, "raw/stored", **params)
    bench.progress.advance(task)
