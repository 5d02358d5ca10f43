"""A function agent's journal is made of the record kinds every reader knows, each valid
against the record schema (record-v5.cddl), model usage included; the snapshot folds to
the same state as the records."""

from __future__ import annotations

from pathlib import Path

import cbor2
import pytest
from schema_wire import schema

from durably import FunctionAgent, Run, Runtime, SnapshotPolicy, Usage
from durably.errors import ArgumentTypeError, CallFailedError
from durably.schemas._records import Kind
from durably.storage._codec import Codec
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_every_record_of_a_function_run_fits_the_record_schema(tmp_path: Path) -> None:
    async def chat(prompt: str) -> str:
        return f"reply to {prompt}"

    async def broken() -> None:
        raise ValueError("nope")

    async def body(run: Run, task: str) -> dict[str, str]:
        reply = await run.call(chat, task, kind="model", usage=lambda r: Usage(3, 4, 0.25))
        try:
            await run.call(broken)
        except CallFailedError:
            pass
        decision = await run.approval("ship it?", data={"reply": reply})
        return {"reply": reply, "by": decision["by"]}

    definition = FunctionAgent("schema-check", body)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    async with Runtime(url, agents=[definition], snapshot_policy=SnapshotPolicy(every_records=2)) as rt:
        await rt.run(definition, "s-1", "hi")
        await rt.approve("s-1", "approval-1", approved=True, by="ann")
        state = await rt.wait("s-1", timeout=30)
        assert state.status == "finished"
        assert state.usage == {"steps": 1, "input_tokens": 3, "output_tokens": 4, "cost_usd": 0.25}
    store = open_store(url)
    stream = StreamId("default", "s-1")
    async with store:
        frames = [stored async for stored in store.read(stream)]
    kinds = []
    for stored in frames:
        frame = Codec().decode(stored.data, stream=stream, seq=stored.seq)
        schema("record-v5.cddl").validate_cbor(cbor2.dumps(frame.value))
        kinds.append(frame.value["k"])
    assert kinds.count(Kind.TOOL_INTENT) == 2 and kinds.count(Kind.TOOL_RESULT) == 2
    assert Kind.APPROVAL_REQUESTED in kinds and kinds[-1] == Kind.FINISHED


async def test_an_intent_holds_the_arguments_the_journal_can_hold_and_names_the_others(tmp_path: Path) -> None:
    class Card:
        """Not storable: shown by its type name."""

    async def charge(amount: int, card: Card, *extra: str, **meta: object) -> str:
        return "ok"

    async def body(run: Run, task: str) -> list[str]:
        first = await run.call(charge, 500, Card(), "a", "b", note="n", card_id=b"\x01")
        second = await run.call(charge, 1, Card(), shown_arguments={"amount": 1, "card": Card()})
        try:
            await run.call(charge, 1, Card(), shown_arguments=["amount"])  # type: ignore[arg-type]
        except ArgumentTypeError:
            pass
        return [first, second]

    definition = FunctionAgent("arguments", body)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    async with Runtime(url, agents=[definition]) as rt:
        state = await rt.run(definition, "a-1", "")
        assert state.status == "finished" and state.result == ["ok", "ok"]
    store = open_store(url)
    stream = StreamId("default", "a-1")
    async with store:
        frames = [stored async for stored in store.read(stream)]
    intents = []
    for stored in frames:
        frame = Codec().decode(stored.data, stream=stream, seq=stored.seq)
        schema("record-v5.cddl").validate_cbor(cbor2.dumps(frame.value))
        if frame.value["k"] == Kind.TOOL_INTENT:
            intents.append(frame.value["d"]["arguments"])
    assert intents == [
        {"amount": 500, "card": "<Card>", "extra": ["a", "b"], "meta": {"note": "n", "card_id": b"\x01"}},
        {"amount": 1, "card": "<Card>"},
    ]
