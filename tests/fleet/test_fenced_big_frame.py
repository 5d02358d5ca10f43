"""Attack on off-loop framing and fencing: a worker's large tool result is being sealed
in a worker thread when its lease lapses (its lease traffic cut) and another worker
takes the agent over and finishes it. When the seal comes back, the stale worker's
append is refused by its fencing token (``AgentLeaseLostError``): nothing of it lands
after the takeover, and each call's result is in the journal once."""

from __future__ import annotations

import os
import threading
from typing import Any

import anyio
import pytest
from lease_partition import lease_partitionable
from store_urls import leased_store_url  # noqa: F401 - the fixture: the store URL, as ``url``
from support_agents import StepModel

from durably import AgentDefinition, AgentLeaseLostError, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.offloop import OFFLOOP_BYTES
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key

BIG = os.urandom(OFFLOOP_BYTES).hex()


class GatedCipher(AESGCMCipher):
    """AES-GCM whose seal of a large payload waits at a gate (a worker thread then holds it)."""

    def __init__(self, key: bytes) -> None:
        super().__init__(StaticKeyProvider({"k": key}))
        self.sealing = threading.Event()
        self.gate = threading.Event()

    def seal(self, payload: bytes, aad: bytes) -> bytes:
        if len(payload) >= OFFLOOP_BYTES // 4:
            self.sealing.set()
            self.gate.wait(20)
        return super().seal(payload, aad)


async def test_a_large_frame_sealed_past_the_lease_is_refused_by_its_fence(url: str) -> None:
    key = generate_key()
    ran: list[str] = []

    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int) -> str:
        ran.append(f"c{n}")
        return f"{n}:{BIG}"

    definition = AgentDefinition(name="big", model=StepModel(2), tools=[effect])
    stale_cipher = GatedCipher(key)
    a_store = lease_partitionable(url)
    async with (
        a_store,
        Runtime(a_store, agents=[definition], worker_id="a", lease_ttl=0.6, encryption=stale_cipher) as a,
    ):
        stale = await a.start(definition, "a1", "go")
        await anyio.to_thread.run_sync(stale_cipher.sealing.wait, 20)
        a_store.cut = True  # A renews no more while its frame is sealed
        fresh_cipher = AESGCMCipher(StaticKeyProvider({"k": key}))
        async with Runtime(url, agents=[definition], worker_id="b", encryption=fresh_cipher) as b:
            handle = await b.resume("a1", force=True)  # once A's lease lapsed
            assert handle is not None
            state = await handle.wait()
        assert state.status == "finished", state.reason
        async with open_store(url) as store:
            stream = StreamId("default", "a1")
            before = [r.seq async for r in store.read(stream)]
        stale_cipher.gate.set()  # A's seal comes back, its append goes to the store
        with pytest.raises(AgentLeaseLostError):
            await stale.wait()
    codec = RecordCodec(cipher=fresh_cipher)
    async with open_store(url) as store:
        records: list[Any] = [record async for record in JournalReader(store, codec, stream).records()]
    assert [r.seq for r in records] == before  # nothing of A after the takeover
    results = [r.data["call_id"] for r in records if r.kind == Kind.TOOL_RESULT]
    assert results == ["c1", "c2"]
    assert all(r.data["result"] == f"{r.data['call_id'][1:]}:{BIG}" for r in records if r.kind == Kind.TOOL_RESULT)
