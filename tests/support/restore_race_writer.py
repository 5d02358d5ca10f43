"""Another process writing one stream while ``tests/runtime/test_attack_restore_gather.py`` restores it.

``python restore_race_writer.py URL SECONDS SEED COMPACT PURGE``: for SECONDS, appends
batches of 1-4 records, snapshots every few records (the state folded from scratch),
keeps two snapshots and, with COMPACT=1, deletes the records behind the older one (as the
runtime's snapshot writer does), now and then deletes every snapshot but the latest, and
with PURGE=1 purges the stream every ~150 records and starts a new run. Every record is
``record(run, seq)``, so the reader can fold the truth for any ``(run, seq)`` it restores.
Prints the number of records it appended and the runs it wrote, as JSON.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid

import anyio

from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably.adapters.sqlite import SQLiteStore
from durably.schemas._records import Kind, Record
from durably.storage._spi import AppendRequest, StreamId

STREAM = StreamId("ns", "a1")


def record(run: str, seq: int) -> Record:
    """Record ``seq`` of run ``run``: ``started`` at 1, then user messages naming run and seq."""
    if seq == 1:
        return Record(
            1,
            Kind.STARTED,
            {
                "namespace": STREAM.namespace,
                "agent_id": STREAM.agent_id,
                "run_id": run,
                "task": "t",
                "definition": {"name": "d", "version": "1", "digest": "x"},
                "instructions": "",
                "budget": {},
                "worker": "w",
            },
            1.0,
        )
    return Record(seq, Kind.MESSAGE_RECEIVED, {"role": "user", "content": f"{run}:{seq}"}, 1.0)


def fold(run: str, seq: int) -> AgentState:
    """The state of run ``run`` after record ``seq``, folded from scratch."""
    state = AgentState()
    for n in range(1, seq + 1):
        apply(state, record(run, n))
    return state


async def main(url: str, seconds: float, seed: int, compact: bool, purge: bool) -> None:
    rng, codec = random.Random(seed), RecordCodec()
    appended, runs = 0, []
    async with SQLiteStore(url) as store:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            run, state, seq, kept = uuid.uuid4().hex[:8], AgentState(), 0, []
            runs.append(run)
            length = rng.randrange(100, 200) if purge else 1 << 62
            while seq < length and time.monotonic() < deadline:
                batch = [record(run, n) for n in range(seq + 1, seq + 1 + rng.randrange(1, 5))]
                await store.append_batch([AppendRequest(STREAM, seq, [codec.encode_record(r, STREAM) for r in batch])])
                for r in batch:
                    apply(state, r)
                seq += len(batch)
                appended += len(batch)
                if rng.random() < 0.25:
                    await store.put_snapshot(STREAM, seq, codec.encode_snapshot(seq, state.to_wire(), STREAM))
                    kept = (kept + [seq])[-2:]
                    if len(kept) == 2:
                        await store.delete_snapshots(STREAM, kept[0])
                        if compact:
                            await store.delete_records(STREAM, kept[0])
                if rng.random() < 0.03:
                    await store.delete_snapshots(STREAM, seq + 1)  # all but the latest one
                    kept = kept[-1:]
            if purge:
                await store.delete_stream(STREAM)
    print(json.dumps({"appended": appended, "runs": runs}))


if __name__ == "__main__":
    url, seconds, seed, compact, purge = sys.argv[1:6]
    anyio.run(main, url, float(seconds), int(seed), compact == "1", purge == "1")
