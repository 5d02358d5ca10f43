"""Fleet-wide limits: concurrency, requests and tokens per window, shared by every runtime of a store.

Several ``Runtime`` instances on one SQLite file and on one PostgreSQL database
run agents under one ``Limit``; a model shared by all of them counts the calls in
flight at once (entered, not yet returned). Rates are judged from the journaled
``model_responded`` timestamps. A SIGKILLed worker's concurrency slot frees itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import limit_agents
import pytest
from fleet_processes import spawn_worker, stop, wait_for, workers_json
from pg_server import PostgresTestServer

from durably import (
    AgentDefinition,
    ArgumentTypeError,
    InvalidArgumentError,
    Limit,
    ModelResponse,
    Runtime,
    ToolCall,
    Usage,
    tool,
)
from durably._fleet.limiter import LIMITS_NAMESPACE, Limiter
from durably.storage import StreamId, open_store

WORKER = Path(__file__).resolve().parents[1] / "support" / "limit_worker.py"


class CountingModel:
    """Answers with one tool call per turn until ``steps`` results are in, counting calls in flight."""

    def __init__(self, name: str, steps: int = 2, think_s: float = 0.05, tokens: int = 10) -> None:
        self.name = name
        self.steps = steps
        self.think_s = think_s
        self.tokens = tokens
        self.in_flight = 0
        self.most = 0
        self.calls = 0
        self.entered: list[float] = []

    async def respond(self, messages, tools):
        self.in_flight += 1
        self.calls += 1
        self.entered.append(time.time())
        self.most = max(self.most, self.in_flight)
        try:
            await anyio.sleep(self.think_s)
        finally:
            self.in_flight -= 1
        done = sum(m["role"] == "tool" for m in messages)
        usage = Usage(self.tokens, self.tokens, 0.0)
        if done < self.steps:
            return ModelResponse("", (ToolCall(f"c{done}", "noop", {"n": done}),), usage)
        return ModelResponse("done", (), usage)


@tool(name="noop")
async def noop(n: int) -> int:
    return n


def definition(model: CountingModel, name: str = "limited", **kw) -> AgentDefinition:
    return AgentDefinition(name=name, model=model, tools=[noop], **kw)


async def run_everywhere(url: str, runtimes: int, per_runtime: int, defn: AgentDefinition, **rt_kw) -> list[str]:
    """Start ``per_runtime`` agents on each of ``runtimes`` runtimes of one store; wait for all; return their ids."""
    ids: list[str] = []
    async with anyio.create_task_group() as tg:
        for r in range(runtimes):

            async def one_runtime(r: int = r) -> None:
                async with Runtime(url, agents=[defn], lease_ttl=5.0, **rt_kw) as rt:
                    handles = []
                    for i in range(per_runtime):
                        ids.append(f"a{r}-{i}")
                        handles.append(await rt.start(defn, f"a{r}-{i}", "task"))
                    for handle in handles:
                        assert (await handle.wait()).status == "finished"

            tg.start_soon(one_runtime)
    return ids


async def responded_at(url: str, ids: list[str]) -> list[float]:
    """When each ``model_responded`` record of these agents was journaled, sorted."""
    found: list[float] = []
    async with Runtime(url) as rt:
        for agent_id in ids:
            found += [e.at async for e in rt.history(agent_id, kinds=["model_responded"])]
    return sorted(found)


def store_urls(tmp_path: Path, backend: str, pg: PostgresTestServer | None) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/limits.db"
    assert pg is not None
    return pg.url()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/limits.db"
    return request.getfixturevalue("pg_server").url()


async def test_three_runtimes_never_exceed_a_concurrency_limit_together(url):
    model = CountingModel("overlap-model", steps=2, think_s=0.05)
    limit = Limit(key="model:overlap-model", concurrency=2)
    with anyio.fail_after(120):
        await run_everywhere(url, 3, 3, definition(model), limits=[limit])
    assert model.calls == 9 * 3
    assert model.most <= 2, f"{model.most} model calls were in flight at once under a limit of 2"
    assert model.most == 2, "the agents never ran two calls at once: the limit was not what held them"


async def test_a_definitions_own_limit_holds_across_runtimes(tmp_path):
    url = f"sqlite:///{tmp_path}/limits.db"
    model = CountingModel("any-model", steps=1, think_s=0.05)
    defn = definition(model, limits=[Limit(key="team-quota", concurrency=1)])
    with anyio.fail_after(120):
        await run_everywhere(url, 2, 3, defn)
    assert model.calls == 6 * 2
    assert model.most == 1


async def test_a_requests_per_minute_limit_spreads_the_calls_of_two_runtimes(url):
    model = CountingModel("rpm-model", steps=1, think_s=0.0)
    window = 2.0
    limit = Limit(key="model:rpm-model", requests_per_minute=90, window_s=window)  # 3 calls in any 2 s
    assert limit.requests_in_window == 3
    with anyio.fail_after(120):
        ids = await run_everywhere(url, 2, 2, definition(model), limits=[limit])
    at = await responded_at(url, ids)
    assert len(at) == 8
    # A call is journaled a little after it was admitted; 0.6 s covers that delay on a loaded machine.
    for first, fourth in zip(at, at[3:], strict=False):
        assert fourth - first >= window - 0.6, f"4 calls within {fourth - first:.2f} s under 3 per {window} s"


async def test_a_tokens_per_minute_limit_holds_the_next_call_until_spent_tokens_leave_the_window(tmp_path):
    url = f"sqlite:///{tmp_path}/limits.db"
    model = CountingModel("tpm-model", steps=3, think_s=0.0, tokens=10)  # 20 tokens a reply
    window = 2.0
    limit = Limit(key="model:tpm-model", tokens_per_minute=1200, window_s=window)  # 40 tokens in any 2 s
    with anyio.fail_after(120):
        ids = await run_everywhere(url, 1, 1, definition(model), limits=[limit])
    at = await responded_at(url, ids)
    assert len(at) == 4
    # Two replies spend the window's 40 tokens: the third call waits until the first's 20 leave it.
    assert at[2] - at[0] >= window - 0.6
    assert at[3] - at[1] >= window - 0.6


async def test_a_token_limit_reserves_an_estimate_so_calls_in_flight_cannot_overshoot_it(tmp_path):
    url = f"sqlite:///{tmp_path}/limits.db"
    model = CountingModel("big-model", steps=0, think_s=0.3, tokens=10)
    task = "x" * 400  # the conversation's JSON is about 110 tokens by the estimate (characters / 4)
    # 250 tokens in any 2 s: two reservations fit, a third waits (charged after the reply, all four would start).
    limit = Limit(key="model:big-model", tokens_per_minute=7500, window_s=2.0)
    defn = definition(model)
    async with Runtime(url, agents=[defn], limits=[limit]) as rt:
        handles = [await rt.start(defn, f"a{i}", task) for i in range(4)]
        with anyio.fail_after(60):
            for handle in handles:
                assert (await handle.wait()).status == "finished"
    assert model.calls == 4
    assert model.most == 2, f"{model.most} calls in flight under a token limit two reservations fill"
    async with open_store(url) as store:
        rate_log = Limiter(store, "reader", (limit,))._log(limit)
        await rate_log.refresh()
    # Every reservation was taken back: what stays charged is the replies' 20 tokens each.
    assert sum(entry[2] for entry in rate_log.entries) == 4 * 20


async def test_the_rate_stream_stays_short_and_counts_right_across_compaction(tmp_path):
    url = f"sqlite:///{tmp_path}/limits.db"
    limit = Limit(key="model:busy", requests_per_minute=600, window_s=60.0)
    agent = StreamId("default", "a")
    async with open_store(url) as store_a, open_store(url) as store_b:
        a = Limiter(store_a, "worker-a", (limit,))
        b = Limiter(store_b, "worker-b", (limit,))

        async def admit(limiter: Limiter) -> None:
            for _ in range(25):
                async with limiter.admitted([limit], agent):
                    pass

        async with anyio.create_task_group() as tg:  # four agents of each worker at once
            for limiter in (a, b) * 4:
                tg.start_soon(admit, limiter)
        stream = StreamId(LIMITS_NAMESPACE, "rate/model:busy")
        assert await store_a.last_seq(stream) == 200
        left = [r async for r in store_a.read(stream)]
        assert len(left) < 70, f"{len(left)} records left: the stream was not compacted"
        for limiter in (a, b):  # each worker's own view, read and written by its four agents at once
            rate_log = limiter._log(limit)
            await rate_log.refresh()
            requests, _, _ = rate_log.used(time.time())
            assert requests == 200


async def test_a_waiting_agent_says_which_limit_it_waits_for(tmp_path):
    url = f"sqlite:///{tmp_path}/limits.db"
    model = CountingModel("slow-model", steps=0, think_s=0.0)
    limit = Limit(key="model:slow-model", requests_per_minute=1, window_s=60.0)  # one call a minute
    seen = []
    async with Runtime(url, agents=[definition(model)], limits=[limit]) as rt:
        first = await rt.start(definition(model), "first", "task")
        assert (await first.wait()).status == "finished"
        await rt.start(definition(model), "second", "task")
        with anyio.fail_after(30):
            while not (await rt.describe("second")).waiting_for:
                await anyio.sleep(0.05)
        seen.append((await rt.describe("second")).waiting_for)
        result = subprocess.run(
            [sys.executable, "-m", "durably", "show", "second", "--store", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
    wait = seen[0]
    assert wait["limit"] == "model:slow-model" and wait["kind"] == "rate"
    assert wait["until"] > time.time() + 30
    assert "waiting for rate limit 'model:slow-model' until ~" in result.stdout, result.stdout + result.stderr
    # The runtime stopped while the call waited: no call made, the agent runnable, the wait no longer shown.
    async with Runtime(url) as rt:
        after = await rt.describe("second")
    assert after.status == "running" and after.waiting_for is None and after.steps == 0
    assert model.calls == 1


async def test_a_sigkilled_workers_concurrency_slot_frees_itself(url, tmp_path):
    entered = tmp_path / "entered"
    worker = subprocess.Popen([sys.executable, str(WORKER), url, str(entered)])
    try:
        with anyio.fail_after(60):
            while not entered.exists():
                await anyio.sleep(0.05)
        slot = StreamId(LIMITS_NAMESPACE, "slot/model:hang-model/0")
        async with open_store(url) as store:
            held = await store.get_lease(slot)
            assert held is not None and held.owner.startswith("limit-worker#")
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
            dead = await store.get_lease(slot)  # its last renewal: the slot is the dead worker's until then
        assert dead is not None and dead.owner == held.owner
        model = CountingModel("hang-model", steps=0, think_s=0.0)
        limit = Limit(key="model:hang-model", concurrency=1)
        async with Runtime(url, agents=[definition(model)], limits=[limit]) as rt:
            with anyio.fail_after(60):  # the dead worker's slot lapses after its 2 s ttl
                handle = await rt.start(definition(model), "after-kill", "task")
                assert (await handle.wait()).status == "finished"
        assert model.calls == 1
        assert model.entered[0] >= dead.expires_at - 0.05, "the call ran while the dead worker's slot was live"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


async def test_a_call_waiting_for_a_slot_says_so_while_the_slot_is_held(tmp_path):
    url = f"sqlite:///{tmp_path}/limits.db"
    release = anyio.Event()

    class Gate:
        name = "gate-model"
        calls = 0

        async def respond(self, messages, tools):
            Gate.calls += 1
            await release.wait()
            return ModelResponse("done")

    gated = AgentDefinition(name="gated", model=Gate())
    limit = Limit(key="model:gate-model", concurrency=1)
    async with Runtime(url, agents=[gated], limits=[limit], lease_ttl=1.0) as rt:
        first = await rt.start(gated, "first", "task")
        second = await rt.start(gated, "second", "task")
        with anyio.fail_after(30):
            while not (await rt.describe("second")).waiting_for:
                await anyio.sleep(0.05)
        await anyio.sleep(1.5)  # past the wait's first word (a third of the ttl): still said, still waiting
        wait = (await rt.describe("second")).waiting_for
        assert wait is not None and wait["kind"] == "concurrency" and wait["until"] is None
        assert Gate.calls == 1
        release.set()
        with anyio.fail_after(30):
            assert (await first.wait()).status == "finished"
            assert (await second.wait()).status == "finished"
        assert (await rt.describe("second")).waiting_for is None
    assert Gate.calls == 2


def test_two_worker_processes_share_a_definitions_concurrency_limit(pg_server: PostgresTestServer, tmp_path):
    url = pg_server.url()
    os.environ["WORKER_EFFECTS"] = str(tmp_path / "effects.jsonl")
    try:
        ids = [f"agent-{i}" for i in range(8)]

        async def hand_over() -> None:
            (defn,) = limit_agents.limited()
            async with Runtime(url, agents=[defn]) as rt:
                for agent_id in ids:
                    await rt.submit(defn, agent_id, "task")

        workers = [
            spawn_worker(url, tmp_path, name, agents="limit_agents:limited", steps=2, step_seconds=0.1)
            for name in ("w1", "w2")
        ]
        try:
            # The agents come once both workers heartbeat: a worker that sees no other takes
            # them all (a fair share is split among the live workers), and under load the
            # second process may start seconds after the first.
            wait_for(
                lambda: {w["worker_id"] for w in workers_json(url, 30)["workers"] if w["status"] == "live"},
                60,
                "both workers heartbeat",
                done=lambda live: live >= {"w1", "w2"},
                poll=0.2,
            )
            anyio.run(hand_over)

            async def all_finished() -> bool:
                async with Runtime(url) as rt:
                    return [(await rt.status(a)).status for a in ids] == ["finished"] * len(ids)

            deadline = time.monotonic() + 120
            while not anyio.run(all_finished):
                assert time.monotonic() < deadline, "the agents did not finish"
                assert all(w.poll() is None for w in workers), "a worker exited"
                time.sleep(0.2)
        finally:
            stop(*workers)
    finally:
        os.environ.pop("WORKER_EFFECTS", None)
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert sum(c["event"] == "enter" for c in calls) == 8 * 3
    assert len({c["pid"] for c in calls}) == 2, "both workers made calls"
    # A slot is given back after its call's exit line is written, and taken before the next enter line.
    running = most = 0
    for call in sorted(calls, key=lambda c: (c["at"], c["event"] == "enter")):
        running += 1 if call["event"] == "enter" else -1
        most = max(most, running)
    assert most <= 2, f"{most} calls in flight at once across the workers under a limit of 2"


async def test_each_wait_is_measured_by_the_limit_wait_histogram(tmp_path):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    url = f"sqlite:///{tmp_path}/limits.db"
    model = CountingModel("measured-model", steps=2, think_s=0.0)
    limit = Limit(key="model:measured-model", requests_per_minute=60, window_s=1.0)  # one call a second
    defn = definition(model)
    async with Runtime(url, agents=[defn], limits=[limit], meter_provider=MeterProvider([reader])) as rt:
        with anyio.fail_after(60):
            assert (await (await rt.start(defn, "a", "task")).wait()).status == "finished"
    points = [
        p
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "durably.limit.wait.duration"
        for p in metric.data.data_points
    ]
    assert len(points) == 1 and points[0].attributes["durably.limit.key"] == "model:measured-model"
    assert points[0].count == 2  # the second and third calls each waited for the window
    assert points[0].sum >= 1.0


def test_bad_limits_are_refused_with_typed_errors():
    with pytest.raises(InvalidArgumentError, match="key must not be empty"):
        Limit(key=" ", concurrency=1)
    with pytest.raises(ArgumentTypeError):
        Limit(key=3, concurrency=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="give requests_per_minute"):
        Limit(key="model:x")
    with pytest.raises(InvalidArgumentError):
        Limit(key="model:x", concurrency=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        Limit(key="model:x", concurrency=0)
    with pytest.raises(InvalidArgumentError):
        Limit(key="model:x", requests_per_minute=float("nan"))
    with pytest.raises(InvalidArgumentError):
        Limit(key="model:x", tokens_per_minute=-5)
    with pytest.raises(InvalidArgumentError, match="allow no call"):
        Limit(key="model:x", requests_per_minute=3, window_s=10)
    with pytest.raises(InvalidArgumentError, match="covers no call"):
        Runtime("memory://", limits=[Limit(key="gpt-4o", concurrency=1)])
    with pytest.raises(InvalidArgumentError, match="share the key"):
        Runtime("memory://", limits=[Limit(key="model:a", concurrency=1), Limit(key="model:a", concurrency=2)])
    with pytest.raises(ArgumentTypeError):
        Runtime("memory://", limits=Limit(key="model:a", concurrency=1))  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        Runtime("memory://", limits=["model:a"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="share the key"):
        definition(CountingModel("m"), limits=[Limit(key="q", concurrency=1), Limit(key="q", concurrency=1)])
