"""Train the zstd dictionary durably ships for record frames (``durably.storage._dictionaries``).

Run by hand, once per new dictionary: ``python -m durably.bench.dictionary OUT``.
A dictionary, once shipped, never changes: frames name it by id, and every
build must go on reading them. A better one gets a new id and a new file.

What it is trained on: the records a coding agent journals, as the runtime
writes them (every record of ``AGENTS`` bench agents run through a real
``Runtime`` on ``memory://``, ``STEPS`` steps each: started, model responses
with tool calls, intents, results, finished). The text comes from the
standard library modules *after* the bench's corpus (``workload.corpus``
with ``start=CORPUS_MODULES``) and another seed, so the dictionary learns the
records' structure (keys, kinds, field shapes, idempotency keys' form) and
the flavour of code and prose, but holds no text the bench measures: the
bench's compression figures stay honest. zstd's own advice is to train on
samples of the data to compress (``zstd --train``, COVER algorithm).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import cbor2
import zstandard

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.storage import _dictionaries as dictionaries
from durably.storage import _values as values
from durably.storage._codec import Codec
from durably.storage._dictionaries import DICTIONARY_SIZE, RECORDS_V1
from durably.storage._registry import open_store

from .agent import run_agents
from .workload import CORPUS_MODULES, Workload

AGENTS = 6
STEPS = 400
SEED = 7  # the bench's conversations use seed 0


async def samples() -> list[bytes]:
    """The raw CBOR payload of every record the training agents journaled."""
    dictionaries.DEFAULT = None  # the runtime's codecs must not need the dictionary being made
    workload = Workload(seed=SEED, corpus_start=CORPUS_MODULES)
    conversations = [workload.conversation(STEPS, agent) for agent in range(AGENTS)]
    codec = RecordCodec(Codec(dictionary=None))
    out: list[bytes] = []
    async with open_store("memory://dictionary-training") as store:
        run = await run_agents(store, "training", conversations)
        for stream in run.streams:
            async for record in JournalReader(store, codec, stream).records():
                out.append(cbor2.dumps(values.to_cbor(record.to_wire())))
    return out


def train(payloads: list[bytes], dictionary_id: int) -> bytes:
    """A ``DICTIONARY_SIZE``-byte zstd dictionary with id ``dictionary_id`` (single-threaded: reproducible)."""
    samples: list[bytes | bytearray | memoryview[int]] = list(payloads)
    trained = zstandard.train_dictionary(DICTIONARY_SIZE, samples, dict_id=dictionary_id, level=3, threads=1)
    return trained.as_bytes()


def main(out: str) -> None:
    payloads = anyio.run(samples)
    data = train(payloads, RECORDS_V1)
    Path(out).write_bytes(data)
    print(
        f"{out}: {len(data)} bytes, id {RECORDS_V1:#x}, from {len(payloads)} records "
        f"({sum(map(len, payloads)):,} raw bytes), Python {sys.version.split()[0]}"
    )


if __name__ == "__main__":
    main(sys.argv[1])
