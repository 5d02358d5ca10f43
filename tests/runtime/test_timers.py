"""Durable timers in one process: parking, the index, waking on time, bad input."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

import anyio
import pytest
from timer_agents import NapModel, nap_agent

from durably import (
    AgentDefinition,
    ArgumentTypeError,
    InvalidArgumentError,
    ModelResponse,
    Runtime,
    Sleep,
    ToolCall,
    WaitTimeoutError,
    agent_tool,
    tool,
)
from durably._loop.state import AgentState, apply
from durably.schemas._records import Kind, Record

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "file"])
def store_url(request, tmp_path):
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if request.param == "file":
        return f"file://{tmp_path}/files"
    return f"sqlite:///{tmp_path}/agents.db"


async def kinds(rt: Runtime, agent_id: str) -> list[str]:
    return [entry.kind async for entry in rt.history(agent_id)]


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Sleep(-1), InvalidArgumentError),
        (lambda: Sleep(math.nan), InvalidArgumentError),
        (lambda: Sleep(math.inf), InvalidArgumentError),
        (lambda: Sleep(until=datetime(2030, 1, 1)), InvalidArgumentError),  # naive: which zone?
        (lambda: Sleep(), InvalidArgumentError),
        (lambda: Sleep(1, until=datetime.now(UTC)), InvalidArgumentError),
        (lambda: Sleep("5"), ArgumentTypeError),
        (lambda: Sleep(True), ArgumentTypeError),
        (lambda: Sleep(until="2030-01-01T00:00:00Z"), ArgumentTypeError),
    ],
)
def test_bad_sleeps_are_refused_with_a_typed_error(make, error):
    with pytest.raises(error):
        make()


def test_a_sleep_until_an_aware_time_wakes_then():
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert Sleep(until=when).wake_at == when.timestamp()
    assert Sleep(until=when.astimezone(timezone(timedelta(hours=2)))).wake_at == when.timestamp()


async def test_a_parked_agent_holds_nothing_and_wakes_once_when_due(store_url, tmp_path):
    effects = tmp_path / "effects.jsonl"
    napper = nap_agent(effects, 0.6)
    async with Runtime(store_url, agents=[napper]) as rt:
        state = await rt.run(napper, "a", "nap")
        assert state.status == "sleeping" and state.wake_at is not None
        assert state.reason.startswith("sleeping until ")
        assert "a" not in rt._activations.live  # parked: no actor, no memory
        assert await rt.lease_holder("a") is None  # and no lease
        entry = await rt.store.get_index(rt.stream("a"))
        assert entry is not None and entry.status == "sleeping" and entry.wake_at == state.wake_at
        # Before its time a resume takes nothing and appends nothing.
        assert await rt.resume("a") is None
        assert (await rt.status("a")).last_seq == state.last_seq
        assert [s.status for s in await rt.agents(statuses=["sleeping"])] == ["sleeping"]
        await anyio.sleep(max(0.0, state.wake_at - time.time()) + 0.05)
        handle = await rt.resume("a")
        assert handle is not None
        final = await handle.wait()
        assert final.status == "finished" and final.wake_at is None
        assert final.result == "done ['slept 0.6s', 10]"
        assert (await rt.resume("a")) is None  # finished: nothing fires again
        journal = await kinds(rt, "a")
    assert journal.count(Kind.TIMER_SET) == 1 and journal.count(Kind.TIMER_FIRED) == 1
    assert journal.index(Kind.TIMER_FIRED) + 1 == journal.index(Kind.RESUMED)  # one append: fired and resumed
    assert len(effects.read_text().splitlines()) == 1


async def test_serve_wakes_at_the_earliest_timer_not_at_its_next_poll(tmp_path):
    napper = nap_agent(tmp_path / "effects.jsonl", 0.5)
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.serve(poll_interval=3600))  # one scan, then only the timer can wake it
            assert (await rt.run(napper, "a", "nap")).status == "sleeping"
            with anyio.fail_after(30):
                while (await rt.status("a")).status != "finished":
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()


async def test_a_scan_restores_only_the_due_timers_the_index_lists(store_url, tmp_path):
    far = nap_agent(tmp_path / "far.jsonl", 3600, name="far")
    near = nap_agent(tmp_path / "near.jsonl", 0, name="near")
    async with Runtime(store_url, agents=[far, near]) as rt:
        for i in range(30):
            assert (await rt.run(far, f"far-{i}", "nap")).status == "sleeping"
        for i in range(4):
            assert (await rt.run(near, f"near-{i}", "nap")).status == "sleeping"
    async with Runtime(store_url, agents=[far, near]) as rt:
        read: list[str] = []
        original = rt._activations._restore

        async def counted(agent_id, claim=None):
            read.append(agent_id)
            return await original(agent_id, claim)

        rt._activations._restore = counted
        handles = await rt.resume_all()
        for handle in handles:
            await handle.wait()
        # Only the due agents were restored (an agent sleeping past now costs one index row, no read of its journal).
        assert sorted(set(read)) == [f"near-{i}" for i in range(4)]
        assert rt._activations.wake.earliest is not None and rt._activations.wake.earliest > time.time() + 3000
        for i in range(4):
            assert (await rt.status(f"near-{i}")).status == "finished"
        assert (await rt.status("far-0")).status == "sleeping"


async def test_a_sleep_until_a_past_time_fires_at_the_next_resume(tmp_path):
    @tool(name="nap")
    async def nap(seconds: float) -> Sleep:
        return Sleep(until=datetime.now(UTC) - timedelta(days=1), result="late")

    napper = AgentDefinition(name="late", model=NapModel(1.0), tools=[nap, nap_agent(tmp_path / "e", 0).tools[1]])
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        state = await rt.run(napper, "a", "nap")
        assert state.status == "sleeping" and state.wake_at < time.time()
        assert (await (await rt.resume("a")).wait()).status == "finished"


async def test_a_cancelled_sleeper_never_wakes(tmp_path):
    napper = nap_agent(tmp_path / "effects.jsonl", 0.0)
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        assert (await rt.run(napper, "a", "nap")).status == "sleeping"
        await rt.cancel("a", "not needed")
        assert await rt.resume_all() == []
        state = await rt.status("a")
        assert state.status == "cancelled"
        assert Kind.TIMER_FIRED not in await kinds(rt, "a")
    assert not (tmp_path / "effects.jsonl").exists()


async def test_the_cli_and_the_console_description_say_when_a_sleeper_wakes(tmp_path):
    napper = nap_agent(tmp_path / "effects.jsonl", 3600)
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(url, agents=[napper]) as rt:
        state = await rt.run(napper, "a", "nap")
        when = datetime.fromtimestamp(state.wake_at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        described = await rt.describe("a")  # what the console's agent page shows
        assert (described.status, described.reason) == ("sleeping", f"sleeping until {when}")
    listed = subprocess.run(
        [sys.executable, "-m", "durably", "agents", "--store", url, "--status", "sleeping"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert listed.returncode == 0, listed.stderr
    assert "sleeping until" in listed.stdout and when[:16] in listed.stdout


async def test_start_and_submit_not_before_park_a_new_agent_until_then(tmp_path):
    napper = nap_agent(tmp_path / "effects.jsonl", 0.0)
    soon = datetime.now(UTC) + timedelta(seconds=0.5)
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        with pytest.raises(InvalidArgumentError):
            await rt.start(napper, "naive", "nap", not_before=datetime(2030, 1, 1))
        with pytest.raises(ArgumentTypeError):
            await rt.submit(napper, "text", "nap", not_before="2030-01-01")
        assert [s.agent_id async for s in rt.store.list_streams(rt.namespace)] == []  # nothing journaled
        started = await (await rt.start(napper, "started", "nap", not_before=soon)).wait()
        submitted = await rt.submit(napper, "submitted", "nap", not_before=soon)
        assert started.status == submitted.status == "sleeping"
        assert started.wake_at == submitted.wake_at == soon.timestamp()
        assert await rt.resume("started") is None  # not before its time
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.serve(poll_interval=3600))
            with anyio.fail_after(30):
                while {(await rt.status(a)).status for a in ("started", "submitted")} != {"finished"}:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        for agent_id in ("started", "submitted"):
            journal = await kinds(rt, agent_id)
            assert journal[:2] == [Kind.STARTED, Kind.TIMER_SET]
            # not_before's timer, then the nap's: each set once, fired once
            assert journal.count(Kind.TIMER_SET) == journal.count(Kind.TIMER_FIRED) == 2


class _BossModel:
    """Asks the ``napper`` child agent once, then answers with what it said."""

    name = "nap-boss-model"

    async def respond(self, messages, tools):
        if messages[-1]["role"] == "tool":
            return ModelResponse(f"child said {messages[-1]['content']}")
        return ModelResponse("", (ToolCall("k1", "napper", {"task": "nap a little"}),))


async def test_run_follows_a_parent_through_its_childs_timer_without_serve(tmp_path):
    effects = tmp_path / "effects.jsonl"
    napper = nap_agent(effects, 0.5)
    boss = AgentDefinition(name="boss", model=_BossModel(), tools=[agent_tool(napper)])
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[boss, napper]) as rt:
        with anyio.fail_after(30):
            final = await rt.run(boss, "p", "delegate")
        assert final.status == "finished"
        assert final.result == "child said done ['slept 0.5s', 10]"
        (child,) = [s for s in await rt.agents() if s.agent_id != "p"]
        assert child.status == "finished"
        child_journal = await kinds(rt, child.agent_id)
    assert child_journal.count(Kind.TIMER_FIRED) == 1
    assert len(effects.read_text().splitlines()) == 1


async def test_wait_waits_through_the_timer_of_an_agent_registered_here(store_url, tmp_path):
    effects = tmp_path / "effects.jsonl"
    napper = nap_agent(effects, 0.5)
    async with Runtime(store_url, agents=[napper]) as rt:
        assert (await rt.run(napper, "a", "nap")).status == "sleeping"
        final = await rt.wait("a", timeout=30)
        assert final.status == "finished" and final.result == "done ['slept 0.5s', 10]"
        journal = await kinds(rt, "a")
    assert journal.count(Kind.TIMER_FIRED) == 1
    assert len(effects.read_text().splitlines()) == 1


async def test_wait_leaves_a_sleeper_registered_elsewhere_to_its_workers(tmp_path):
    url = f"sqlite:///{tmp_path}/agents.db"
    napper = nap_agent(tmp_path / "effects.jsonl", 0.2)
    async with Runtime(url, agents=[napper]) as rt:
        assert (await rt.run(napper, "a", "nap")).status == "sleeping"
    async with Runtime(url) as rt:  # the definition is not registered here: only a worker serving it may run it
        with pytest.raises(WaitTimeoutError) as raised:
            await rt.wait("a", timeout=1.5)
        assert raised.value.state.status == "sleeping"
        assert "serve()" in str(raised.value)
        assert await rt.lease_holder("a") is None


async def test_a_serving_worker_racing_a_waiting_runtime_fires_the_timer_once(tmp_path):
    url = f"sqlite:///{tmp_path}/agents.db"
    effects = tmp_path / "effects.jsonl"
    napper = nap_agent(effects, 0.4)
    async with Runtime(url, agents=[napper]) as waiting, Runtime(url, agents=[napper]) as worker:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: worker.serve(poll_interval=0.05, drain_signals=()))
            for i in range(4):
                assert (await waiting.run(napper, f"a{i}", "nap")).status == "sleeping"
            for i in range(4):
                assert (await waiting.wait(f"a{i}", timeout=30)).status == "finished"
            tg.cancel_scope.cancel()
        journals = [await kinds(waiting, f"a{i}") for i in range(4)]
    assert [journal.count(Kind.TIMER_FIRED) for journal in journals] == [1, 1, 1, 1]
    assert len(effects.read_text().splitlines()) == 4


FAR = datetime.max.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Sleep(3e11),  # the year 11533
        lambda: Sleep(1e15),
        lambda: Sleep(1e300),
        lambda: Sleep(10**400),  # an int no float can hold
        lambda: Sleep(until=FAR),
        lambda: Sleep(until=datetime(9999, 1, 1, 0, 0, 1, tzinfo=UTC)),
    ],
)
def test_a_wake_time_no_date_can_show_is_refused(make):
    with pytest.raises(InvalidArgumentError, match="wake|finite"):
        make()


def test_the_latest_wake_time_allowed_is_still_taken():
    assert Sleep(until=datetime(9999, 1, 1, tzinfo=UTC)).wake_at == datetime(9999, 1, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("far", [3e11, 1e15, 1e300, 10**400, FAR])
async def test_a_tools_refused_sleep_fails_that_call_and_sets_no_timer(tmp_path, far):
    @tool(name="nap")
    async def nap(seconds: float) -> Sleep:
        return Sleep(until=far) if isinstance(far, datetime) else Sleep(far)

    effect = nap_agent(tmp_path / "e", 0).tools[1]
    napper = AgentDefinition(name="far", model=NapModel(1.0), tools=[nap, effect])
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        state = await rt.run(napper, "a", "nap")
        assert state.status == "finished", state.reason
        assert Kind.TIMER_SET not in await kinds(rt, "a")
        told = [m["content"] for m in state.messages if m["role"] == "tool"][0]
        assert "InvalidArgumentError" in told
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        assert (await rt.status("a")).status == "finished"  # readable from the store too


async def test_start_not_before_past_the_latest_wake_time_journals_nothing(tmp_path):
    napper = nap_agent(tmp_path / "effects.jsonl", 0.0)
    async with Runtime(f"sqlite:///{tmp_path}/agents.db", agents=[napper]) as rt:
        with pytest.raises(InvalidArgumentError):
            await rt.start(napper, "a", "nap", not_before=FAR)
        with pytest.raises(InvalidArgumentError):
            await rt.submit(napper, "b", "nap", not_before=FAR)
        assert [s.agent_id async for s in rt.store.list_streams(rt.namespace)] == []


@pytest.mark.parametrize("wake_at", [3e11, 1e300, math.inf, 10**400])
def test_a_stored_wake_time_no_date_can_show_still_folds(wake_at):
    state = AgentState(agent_id="a")
    apply(state, Record(1, Kind.TIMER_SET, {"wake_at": wake_at}, 0.0))
    assert state.status == "sleeping" and state.wake_at is not None and state.wake_at > time.time()
    assert state.reason.startswith("sleeping until ")
    apply(state, Record(2, Kind.CANCELLED, {"reason": "never"}, 0.0))
    assert state.status == "cancelled"
