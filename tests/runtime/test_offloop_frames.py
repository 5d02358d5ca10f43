"""A commit's frames are finished (zstd, cipher, CRC-32) in a worker thread when a
payload is large, on the loop otherwise: the stored bytes are the same, encryption
still applies, and an error there reaches the step as it would on the loop."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.offloop import OFFLOOP_BYTES, finish_frames
from durably._journal.records import RecordCodec
from durably.adapters.memory import MemoryStore
from durably.schemas._records import Kind, Record
from durably.storage._crypto import AESGCMCipher, KeyConfigError, StaticKeyProvider, generate_key
from durably.storage._registry import open_store
from durably.storage._spi import StoredRecord, StreamId

BIG = os.urandom(OFFLOOP_BYTES).hex()  # twice the threshold of text that compresses to about half
STREAM = StreamId("default", "a1")


class WatchedCipher(AESGCMCipher):
    """AES-GCM that notes which thread sealed each payload, and can refuse large ones."""

    def __init__(self) -> None:
        super().__init__(StaticKeyProvider({"k": generate_key()}))
        self.seals: list[tuple[int, int]] = []  # (thread id, payload bytes)
        self.refuse_from: int | None = None  # payload bytes from which seal raises KeyConfigError

    def seal(self, payload: bytes, aad: bytes) -> bytes:
        self.seals.append((threading.get_ident(), len(payload)))
        if self.refuse_from is not None and len(payload) >= self.refuse_from:
            raise KeyConfigError("key store refused the key")
        return super().seal(payload, aad)


def big_result_agent(steps: int) -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int) -> str:
        return f"{n}:{BIG}"

    return AgentDefinition(name="big", model=StepModel(steps), tools=[effect])


async def test_a_large_tool_result_is_sealed_off_the_loop_and_reads_back(tmp_path: Path) -> None:
    cipher, url = WatchedCipher(), f"sqlite:///{tmp_path}/agents.db"
    loop_thread = threading.get_ident()
    async with Runtime(url, agents=[big_result_agent(3)], encryption=cipher) as rt:
        state = await rt.run("big", "a1", "go")
    assert state.status == "finished"
    large = [thread for thread, size in cipher.seals if size >= OFFLOOP_BYTES // 2]
    small = [thread for thread, size in cipher.seals if size < 4096]
    assert len(large) >= 3 and loop_thread not in large  # every large result: in a worker thread
    assert loop_thread in small  # a commit of small records only (the start) stays on the loop
    async with open_store(url) as store:
        stored = [record.data async for record in store.read(STREAM)]
    assert stored and not any(BIG[:64].encode() in data for data in stored)  # encrypted at rest
    async with Runtime(url, agents=[big_result_agent(3)], encryption=cipher) as rt:
        restored = await rt.status("a1")
    results = [m["content"] for m in restored.messages if m["role"] == "tool"]
    assert results == [f"{n}:{BIG}" for n in (1, 2, 3)]


@pytest.mark.parametrize("encrypted", [False, True])
async def test_frames_made_in_a_thread_decode_as_those_made_on_the_loop(encrypted: bool) -> None:
    cipher = WatchedCipher() if encrypted else None
    codec = RecordCodec(cipher=cipher)
    records = [
        Record(1, Kind.TOOL_RESULT, {"key": "k1", "result": "x" * 40}, 1.0),
        Record(2, Kind.TOOL_RESULT, {"key": "k2", "result": BIG}, 2.0),
        Record(3, Kind.TOOL_RESULT, {"key": "k3", "result": ["y" * 3000, 7]}, 3.0),
    ]
    payloads = [codec.record_payload(r) for r in records]
    seqs = [r.seq for r in records]
    on_loop = await finish_frames(codec, payloads, seqs, STREAM, threshold=10**12)
    in_thread = await finish_frames(codec, payloads, seqs, STREAM, threshold=0)
    if not encrypted:  # zstd is deterministic: the very same bytes
        assert in_thread == on_loop
    for frames in (on_loop, in_thread):
        reader = JournalReader(MemoryStore(), RecordCodec(cipher=cipher), STREAM)
        decoded = [reader.decode_loaded(StoredRecord(seq, data)) for seq, data in zip(seqs, frames, strict=True)]
        assert [(r.seq, r.kind, r.data) for r in decoded] == [(r.seq, r.kind, r.data) for r in records]
    if cipher is not None:
        assert len(cipher.seals) == 2  # one seal per commit: its records' group frame
        threads = {thread for thread, _ in cipher.seals[1:]}
        assert threading.get_ident() not in threads


@pytest.mark.parametrize("size", [100, 2 * OFFLOOP_BYTES])
async def test_a_seal_that_fails_reaches_the_step_typed_and_writes_nothing(tmp_path: Path, size: int) -> None:
    """The same error and the same journal whether the frame was made on the loop (small) or not."""
    cipher, url = WatchedCipher(), f"sqlite:///{tmp_path}/agents.db"
    result = os.urandom(size // 2).hex()  # compresses to about half: its sealed payload stays above size // 4

    @tool(name="effect")
    async def effect(n: int) -> str:
        cipher.refuse_from = size // 4  # from now on, a payload this large cannot be sealed
        return result

    definition = AgentDefinition(name="refused", model=StepModel(1), tools=[effect])
    async with Runtime(url, agents=[definition], encryption=cipher) as rt:
        with pytest.raises(KeyConfigError):
            await rt.run("refused", "a1", "go")
    refused = [thread for thread, sealed in cipher.seals if sealed >= size // 4]
    assert refused and (threading.get_ident() in refused) == (size < OFFLOOP_BYTES)  # where it was made
    cipher.refuse_from = None
    async with open_store(url) as store:
        last = await store.last_seq(STREAM)
    async with Runtime(url, agents=[definition], encryption=cipher) as rt:
        state = await rt.status("a1")
    assert state.last_seq == last and not any(m["role"] == "tool" for m in state.messages)


async def test_a_thread_keeps_one_twin_per_codec() -> None:
    codec = RecordCodec()
    first = await anyio.to_thread.run_sync(codec.twin_for_this_thread)
    assert first is not codec and first.codec is not codec.codec
    assert first.codec.dictionary == codec.codec.dictionary and first.codec.limits is codec.codec.limits
