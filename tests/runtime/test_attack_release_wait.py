"""Attacks on the release that waits for the snapshot writer: an activation gives its
lease back only once its snapshot write in flight has ended. That wait must never hang
the runtime: a blob store that stalls (a page write that never returns) must not keep
the runtime from closing, and one that fails (an outage) must not keep ``run`` from
returning nor the lease from being given back. Real SQLite; the stall and the outage
are the store's own calls hooked in a subclass of the real adapter."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, SnapshotPolicy, tool
from durably._journal import page_writer
from durably.errors import StoreUnavailableError
from durably.storage import StreamId, open_store


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_writer, "PAGE", 8)
    monkeypatch.setattr(page_writer, "KEEP", 4)


def step_agent(steps: int) -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int) -> int:
        return n * 10

    return AgentDefinition(name="counter", model=StepModel(steps), tools=[effect])


async def test_a_runtime_closes_while_a_page_write_stalls_under_a_releasing_activation(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    stalled = anyio.Event()
    base = type(open_store(url))

    class Stalling(base):  # type: ignore[valid-type, misc]
        async def put_blob(self, stream: StreamId, data: bytes) -> str:
            stalled.set()
            await anyio.sleep_forever()  # the blob store stopped answering
            raise AssertionError("unreachable")

    policy = SnapshotPolicy(every_records=40, tail_ratio=0.0)
    with anyio.fail_after(60):
        async with Stalling(url) as store:
            async with Runtime(store, agents=[step_agent(30)], snapshot_policy=policy) as rt:
                handle = await rt.start("counter", "a1", "count")
                await stalled.wait()
                with anyio.move_on_after(1):
                    await handle.wait()  # the agent may end meanwhile, its release waiting for the writer
            # Closing cancels the writer's stalled page: the release ends, nothing hangs.
    async with Runtime(url, agents=[step_agent(30)]) as rt:
        state = await rt.status("a1")
        assert state.last_seq > 0


async def test_run_returns_and_the_lease_goes_back_while_the_blob_store_is_down(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    base = type(open_store(url))
    failures: list[int] = []

    class Down(base):  # type: ignore[valid-type, misc]
        async def put_blob(self, stream: StreamId, data: bytes) -> str:
            failures.append(len(data))
            raise StoreUnavailableError("blob store down")

    policy = SnapshotPolicy(every_records=40, tail_ratio=0.0)
    with anyio.fail_after(60):
        async with Down(url) as store, Runtime(store, agents=[step_agent(30)], snapshot_policy=policy) as rt:
            state = await rt.run("counter", "a1", "count")
            assert state.status == "finished" and failures
            async with Runtime(url, agents=[step_agent(30)]) as elsewhere:
                await elsewhere.purge("a1")  # the lease was given back
                assert [s async for s in elsewhere.store.list_streams("default")] == []
