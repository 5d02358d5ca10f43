"""A call the body cancels while its result is being written (as the OpenAI Agents SDK
cancels the model request when an input guardrail trips): the write the store made is
the activation's too, so the run goes on from it and ends as the body says.

The store is a real SQLite file; it only marks the moment: once the result is written
and before its append returns, the body cancels the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from durably import FunctionAgent, Run, Runtime
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.adapters.sqlite import SQLiteStore
from durably.schemas._records import Kind
from durably.storage._spi import AppendRequest, StoredRecord

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Tripwire(Exception):
    """What the body raises once the check trips."""


class MarksTheResultWrite(SQLiteStore):
    """A SQLite store that, once it wrote the result of the call named ``target``, says so
    and lets every other task run (they cancel the call) before its append returns."""

    def __init__(self, url: str, target: str) -> None:
        super().__init__(url)
        self.target = target
        self.written = anyio.Event()
        self._codec = RecordCodec()

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        results = await super().append_batch(requests)
        if not self.written.is_set() and any(self._writes_target(r) for r in requests):
            self.written.set()
            for _ in range(10):  # the body cancels the call meanwhile
                await anyio.lowlevel.checkpoint()
        return results

    def _writes_target(self, request: AppendRequest) -> bool:
        reader = JournalReader(self, self._codec, request.stream)
        for offset, data in enumerate(request.records, start=1):
            record = reader.decode_loaded(StoredRecord(request.expected_seq + offset, data))
            if record.kind == Kind.TOOL_RESULT and record.data.get("tool") == self.target:
                return True
        return False


async def _cancel_by_task_group(run: Run, written: anyio.Event) -> None:
    """The call and the check in one task group: the tripped check cancels the call."""

    async def ask() -> None:
        await run.call(answer, name="answer")

    async with anyio.create_task_group() as tg:

        async def check() -> None:
            await written.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(ask)
        tg.start_soon(check)
    raise Tripwire("off-topic")


async def _cancel_by_asyncio(run: Run, written: anyio.Event) -> None:
    """As the OpenAI Agents SDK does it: the call is an asyncio task, cancelled with ``Task.cancel``."""
    model = asyncio.create_task(run.call(answer, name="answer"))
    await written.wait()
    model.cancel()
    await asyncio.gather(model, return_exceptions=True)
    raise Tripwire("off-topic")


async def answer() -> str:
    return "an answer"


@pytest.mark.parametrize("cancel", [_cancel_by_task_group, _cancel_by_asyncio], ids=["task-group", "asyncio"])
async def test_a_call_cancelled_while_its_result_is_written_does_not_stop_the_run(
    tmp_path: Path, cancel: Callable[[Run, anyio.Event], Awaitable[None]]
) -> None:
    store = MarksTheResultWrite(f"sqlite:///{tmp_path / 'j.db'}", target="answer")

    async def body(run: Run, task: str) -> str:
        await cancel(run, store.written)
        return "not reached: the check trips"

    definition = FunctionAgent("guarded", body)
    async with store, Runtime(store, agents=[definition]) as rt:
        state = await rt.run(definition, "g-1", "")
        assert state.status == "failed", state.reason
        assert state.reason is not None and "Tripwire: off-topic" in state.reason
        status = await rt.status("g-1")
    assert status.status == "failed"
    # The result the store took is the run's: done, so a later activation never runs it again.
    [entry] = state.ledger.values()
    assert (entry["tool"], entry.get("done"), entry.get("result")) == ("answer", True, "an answer")
