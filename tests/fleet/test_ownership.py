"""Ownership the store enforces: an agent runs only under a lease acquired in the store, every
append of an activation carries its fencing token, and a worker past its lease acts no more.

Several runtimes in one process share one store (a memory store by name, one SQLite
file, or one PostgreSQL schema on a local server); the races are driven by hooks in the store (a subclass of the real adapter), never by sleeps.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from lease_partition import lease_partitionable
from store_urls import leased_store_url  # noqa: F401 - the fixture: the store URL, as ``url``

from durably import (
    AgentDefinition,
    AgentLeasedError,
    AgentLeaseLostError,
    ModelResponse,
    Runtime,
    ToolCall,
    tool,
)
from durably._fleet.leases import LeaseKeeper
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store


def hooked(url: str, **hooks: Any) -> Any:
    """The real store for ``url`` (not opened), subclassed so that each hook given
    (``after_refused_acquire``, ``release_lease``) runs at that point of its lease calls."""
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream, owner, ttl):
            lease = await super().acquire_lease(stream, owner, ttl)
            if lease is None and "after_refused_acquire" in hooks:
                await hooks.pop("after_refused_acquire")()  # once
            return lease

        async def release_lease(self, lease):
            if "release_lease" in hooks:
                await hooks["release_lease"](lease)
            return await super().release_lease(lease)

    return Hooked(url)


class PayThenFinish:
    """A model that asks for ``pay(what=<the task>)``, then finishes quoting its result."""

    name = "pay-then-finish"

    def __init__(self) -> None:
        self.calls = 0

    async def respond(self, messages, tools):
        self.calls += 1
        results = [m for m in messages if m["role"] == "tool"]
        if results:
            return ModelResponse(f"done: {results[-1]['content']}")
        task = next(m["content"] for m in messages if m["role"] == "user")
        return ModelResponse("", (ToolCall("p1", "pay", {"what": task}),))


def payer(paid: list[str], gates: dict[str, anyio.Event], started: anyio.Event | None = None) -> AgentDefinition:
    """An agent whose ``pay`` records each run of its body; the first run for a task that has a
    gate waits on it (later runs, such as a takeover's retry, do not)."""

    @tool(name="pay", on_unknown_outcome="retry")
    async def pay(what: str) -> str:
        paid.append(what)
        if started is not None:
            started.set()
        gate = gates.pop(what, None)
        if gate is not None:
            await gate.wait()
        return f"paid {what}"

    return AgentDefinition(name="payer", model=PayThenFinish(), tools=[pay])


async def journal(url: str, agent_id: str) -> list[Any]:
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId("default", agent_id)
        return [record async for record in JournalReader(store, codec, stream).records()]


async def test_the_three_runtime_race_runs_a_side_effect_once(url):
    # X holds the lease; B's acquire is refused; X releases before B reads the holder. B must
    # not run without a lease: it takes the now free lease in the store, so C is refused.
    paid: list[str] = []
    refund = anyio.Event()
    started = anyio.Event()
    definition = payer(paid, {"refund": refund}, started)
    async with Runtime(url) as first:  # started, then left at once: runnable, nobody runs it
        await first.start(definition, "a1", "refund")
    async with open_store(url) as plain:
        x = Runtime(plain, agents=[definition])
        async with x:
            stream = x.stream("a1")
            x_lease = await plain.acquire_lease(stream, x._activations.leases.owner, 30.0)
            assert x_lease is not None

            async def x_releases() -> None:
                await plain.release_lease(x_lease)

            b_store = hooked(url, after_refused_acquire=x_releases)
            async with b_store, Runtime(b_store, agents=[definition]) as b, Runtime(url, agents=[definition]) as c:
                handle = await b.resume("a1")
                await started.wait()  # B's pay is in flight
                with pytest.raises(AgentLeasedError):
                    await c.resume("a1")  # B holds the lease in the store
                refund.set()
                state = await handle.wait()
    assert state.status == "finished"
    assert paid == ["refund"]  # the body ran once


async def test_a_stale_worker_after_purge_and_restart_is_refused_and_the_new_run_keeps_its_result(url):
    # W runs run 1 and is inside pay when the agent is purged and started again (run 2, seq from
    # 0 again). When W's pay returns, its result would land at the very seq run 2 reached: the
    # store refuses W's fencing token, W ends with AgentLeaseLostError, run 2 finishes with its own.
    # The operator forces the purge: without force it is refused while W holds the lease.
    paid: list[str] = []
    run_1, run_2 = anyio.Event(), anyio.Event()
    definition = payer(paid, {"run 1": run_1, "run 2": run_2})
    async with Runtime(url, agents=[definition], worker_id="w") as w:
        stale = await w.start(definition, "a1", "run 1")
        while paid != ["run 1"]:
            await anyio.sleep(0.01)
        async with Runtime(url, worker_id="operator") as operator:
            with pytest.raises(AgentLeasedError):
                await operator.purge("a1")
            await operator.purge("a1", force=True)
        async with Runtime(url, agents=[definition], worker_id="n") as n:
            fresh = await n.start(definition, "a1", "run 2")
            while paid != ["run 1", "run 2"]:
                await anyio.sleep(0.01)
            run_1.set()  # the stale worker's result comes back first
            with pytest.raises(AgentLeaseLostError):
                await stale.wait()
            run_2.set()
            state = await fresh.wait()
    assert state.status == "finished" and state.result == "done: paid run 2"
    records = await journal(url, "a1")
    results = [r.data["result"] for r in records if r.kind == Kind.TOOL_RESULT]
    assert results == ["paid run 2"]
    assert [r.data["task"] for r in records if r.kind == Kind.STARTED] == ["run 2"]


async def test_a_worker_past_its_lease_makes_no_model_call_and_no_tool_call_after_the_takeover(url):
    # A's lease traffic is cut while its tool runs (a paused or partitioned worker): its
    # lease lapses and B takes the agent over and finishes it. When A's tool returns, A
    # spends nothing more: no model call, no tool call.
    paid: list[str] = []
    order = anyio.Event()
    started = anyio.Event()
    definition = payer(paid, {"order": order}, started)
    model = definition.model
    assert isinstance(model, PayThenFinish)
    a_store = lease_partitionable(url)
    async with a_store, Runtime(a_store, agents=[definition], worker_id="a", lease_ttl=0.6) as a:
        handle = await a.start(definition, "a1", "order")
        await started.wait()
        a_store.cut = True  # A renews no more
        async with Runtime(url, agents=[definition], worker_id="b") as b:
            state = await (await b.resume("a1", force=True)).wait()  # once A's lease lapsed
        assert state.status == "finished"
        model_calls, tool_runs = model.calls, len(paid)
        assert tool_runs == 2  # A's call (in flight at the takeover) and B's retry of it
        a_store.cut = False  # the partition heals as A's call returns
        order.set()
        with pytest.raises(AgentLeaseLostError):
            await handle.wait()
    assert model.calls == model_calls and len(paid) == tool_runs


async def test_an_activation_releases_only_the_lease_it_acquired(url):
    # Two claims of one stream by one runtime (an ended activation's and a newer one's):
    # releasing the old claim leaves the newer one's lease held in the store.
    async with open_store(url) as store:
        keeper = LeaseKeeper(store, "w", 30.0)
        stream = StreamId("default", "a1")
        old, _ = await keeper.claim_or_holder(stream)
        new, _ = await keeper.claim_or_holder(stream)
        assert old is not None and new is not None and old is not new
        await keeper.release(old)
        held = await store.get_lease(stream)
        assert held is not None and held.owner == keeper.owner and held.token == new.fence
        await keeper.release(new)
        assert await store.get_lease(stream) is None


async def test_a_release_that_fails_is_logged_and_never_closes_the_runtime(url, caplog):
    # A lease release raising in an actor's cleanup (a driver's internal error, not a
    # StoreError) must stop nothing: the next agents run, the runtime answers.
    async def broken_release(lease):
        raise RuntimeError("connection reset during release")

    paid: list[str] = []
    definition = payer(paid, {})
    store = hooked(url, release_lease=broken_release)
    with caplog.at_level(logging.WARNING, logger="durably.leases"):
        async with store, Runtime(store, agents=[definition]) as rt:
            assert (await rt.run(definition, "a1", "first")).status == "finished"
            assert (await rt.run(definition, "a2", "second")).status == "finished"
            assert (await rt.status("a1")).status == "finished"
    assert paid == ["first", "second"]
    assert any("not released" in r.getMessage() and "connection reset" in r.getMessage() for r in caplog.records)


async def test_serve_on_a_store_without_leases_says_it_must_be_the_only_worker(tmp_path, caplog):
    # Nothing in a store without leases keeps a second worker from running the same agents.
    with caplog.at_level(logging.WARNING, logger="durably.serve"):
        async with Runtime(f"file://{tmp_path}/agents") as rt, anyio.create_task_group() as tg:
            tg.start_soon(rt.serve, 0.05)
            with anyio.fail_after(10):
                while not any("only worker" in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    (warning,) = [r for r in caplog.records if "only worker" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "no leases" in warning.getMessage()
