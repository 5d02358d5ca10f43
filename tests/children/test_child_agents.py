"""Child agents (``agent_tool``): a parent's call runs another agent in its own stream and
gets its end back as the call's result, exactly once, across crashes of either process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from child_agents import boss_agent, effects, helper_agent

from durably import AgentDefinition, ArgumentTypeError, InvalidArgumentError, InvalidCommandError, Runtime, agent_tool
from durably.schemas._records import Kind

WORKER = Path(__file__).resolve().parents[1] / "support" / "child_agents.py"
DONE = ("finished", "failed", "cancelled")


@pytest.fixture(autouse=True)
def _files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import child_agents

    monkeypatch.setattr(child_agents, "EFFECTS", tmp_path / "effects.jsonl")
    monkeypatch.setattr(child_agents, "GATE", tmp_path / "gate")
    monkeypatch.setenv("CHILD_EFFECTS", str(tmp_path / "effects.jsonl"))
    monkeypatch.setenv("CHILD_GATE", str(tmp_path / "gate"))


async def _kinds(rt: Runtime, agent_id: str) -> list[str]:
    return [entry.kind async for entry in rt.history(agent_id)]


async def test_the_childs_result_is_the_calls_result_once(tmp_path: Path) -> None:
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent(), helper_agent()]) as rt:
        state = await rt.run("boss", "boss-1", "job")
        assert state.status == "finished"
        child = await rt.status("boss-1/h1")
        assert child.status == "finished" and child.parent["agent_id"] == "boss-1"
        tool_messages = [m for m in state.messages if m["role"] == "tool"]
        assert [m["content"] for m in tool_messages] == [child.result]
        assert state.result == f"helpers said [{child.result!r}]"
        kinds = await _kinds(rt, "boss-1")
        assert kinds.count(Kind.CHILD_STARTED) == 1 and kinds.count(Kind.CHILD_ENDED) == 1
        assert len(effects()) == 1
        # Running it again returns the same result and starts nothing.
        again = await rt.run("boss", "boss-1", "job")
        assert again.result == state.result and len(effects()) == 1


async def test_calls_of_one_turn_start_their_children_together(tmp_path: Path) -> None:
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent(fan=3), helper_agent()]) as rt:
        state = await rt.run("boss", "boss-1", "job")
        assert state.status == "finished"
        assert sorted(c["agent_id"] for c in state.children.values()) == ["boss-1/h1", "boss-1/h2", "boss-1/h3"]
        kinds = await _kinds(rt, "boss-1")
        # One append started all three: the parent parked once.
        first = kinds.index(Kind.CHILD_STARTED)
        assert (
            kinds[first : first + 6] == [Kind.TOOL_INTENT, Kind.CHILD_STARTED] * 3
            or kinds[first - 1 : first + 5] == [Kind.TOOL_INTENT, Kind.CHILD_STARTED] * 3
        )
        assert kinds.count(Kind.CHILD_ENDED) == 3 and len(effects()) == 3


async def test_a_failed_child_is_the_calls_error_and_the_parent_goes_on(tmp_path: Path) -> None:
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent(), helper_agent()]) as rt:
        state = await rt.run("boss", "boss-1", "fail")
        assert state.status == "finished"
        child = await rt.status("boss-1/h1")
        assert child.status == "failed"
        [message] = [m for m in state.messages if m["role"] == "tool"]
        assert message["content"].startswith("child agent boss-1/h1 failed: model error")
        assert next(iter(state.children.values()))["status"] == "failed"


async def test_cancel_and_purge_reach_the_children(tmp_path: Path) -> None:
    agents = [boss_agent(fan=2, approval=True), helper_agent(approval=True)]
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=agents) as rt:
        await rt.start("boss", "boss-1", "job")
        await rt.wait("boss-1", until="waiting_child", timeout=30)
        for child_id in ("boss-1/h1", "boss-1/h2"):
            await rt.wait(child_id, until="waiting_approval", timeout=30)
        assert (await rt.status("boss-1")).status == "waiting_child"
        # An unrelated agent whose id shares the prefix is not a child: never touched.
        await rt.submit(helper_agent(approval=True), "boss-1/not-a-child", "other")
        await rt.cancel("boss-1", "changed my mind")
        assert (await rt.status("boss-1")).status == "cancelled"
        for child_id in ("boss-1/h1", "boss-1/h2"):
            child = await rt.status(child_id)
            assert child.status == "cancelled" and "parent boss-1 cancelled" in child.reason
        with pytest.raises(InvalidCommandError):
            await rt.approve("boss-1/h1", "e1")
        assert effects() == []
        assert (await rt.status("boss-1/not-a-child")).status != "cancelled"
        await rt.purge("boss-1")
        ids = {s.agent_id for s in await rt.agents()}
        assert not {"boss-1", "boss-1/h1", "boss-1/h2"} & ids and "boss-1/not-a-child" in ids


async def test_a_child_waits_for_its_own_approval_and_the_parent_waits_for_it(tmp_path: Path) -> None:
    agents = [boss_agent(approval=True), helper_agent(approval=True)]
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=agents) as rt:
        await rt.start("boss", "boss-1", "job")
        await rt.wait("boss-1", until="waiting_child", timeout=30)
        child = await rt.wait("boss-1/h1", until="waiting_approval", timeout=30)
        assert child.open_approvals()[0]["tool"] == "effect"
        assert (await rt.status("boss-1")).status == "waiting_child"
        assert effects() == []
        await rt.approve("boss-1/h1", "e1", by="alice")
        state = await rt.wait("boss-1", until=DONE, timeout=30)
        assert state.status == "finished" and len(effects()) == 1
        assert "did job-1 in" in state.result


async def test_a_purged_child_ends_its_call_as_failed(tmp_path: Path) -> None:
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent(approval=True)]) as rt:
        # helper is not registered here: the child waits for a worker, and is purged meanwhile.
        await rt.start("boss", "boss-1", "job")
        await rt.wait("boss-1", until="waiting_child", timeout=30)
        await rt.purge("boss-1/h1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.serve, 0.05)
            state = await rt.wait("boss-1", until=DONE, timeout=30)
            tg.cancel_scope.cancel()
        [message] = [m for m in state.messages if m["role"] == "tool"]
        assert message["content"] == "child agent boss-1/h1 no longer exists"


def test_bad_input_is_a_typed_error() -> None:
    with pytest.raises(ArgumentTypeError):
        agent_tool("helper")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        agent_tool(AgentDefinition(name="has spaces", model=helper_agent().model))
    with pytest.raises(ArgumentTypeError):
        agent_tool(helper_agent(), description=3)  # type: ignore[arg-type]
    assert agent_tool(AgentDefinition(name="has spaces", model=helper_agent().model), name="ok").name == "ok"


async def test_a_call_without_a_task_is_refused_before_any_child_starts(tmp_path: Path) -> None:
    from durably import ModelResponse, ToolCall

    class NoTask:
        name = "no-task"

        async def respond(self, messages, tools):
            if messages[-1]["role"] == "tool":
                return ModelResponse(f"told: {messages[-1]['content']}")
            return ModelResponse("", (ToolCall("h1", "helper", {"job": "x"}),))

    boss = AgentDefinition(name="boss", model=NoTask(), tools=[agent_tool(helper_agent())])
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss, helper_agent()]) as rt:
        state = await rt.run(boss, "boss-1", "job")
        assert state.status == "finished" and "task" in state.result
        assert not state.children and [s.agent_id for s in await rt.agents()] == ["boss-1"]


# -- real processes ---------------------------------------------------------------------------------


def _spawn(tmp_path: Path, mode: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CHILD_EFFECTS": str(tmp_path / "effects.jsonl"), "CHILD_GATE": str(tmp_path / "gate")}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "a.db"), mode, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


async def _status(tmp_path: Path, agent_id: str) -> str:
    async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
        return (await rt.status(agent_id)).status


async def _wait_for(tmp_path: Path, agent_id: str, status: str) -> None:
    with anyio.fail_after(60):
        while True:
            try:
                if await _status(tmp_path, agent_id) == status:
                    return
            except Exception:  # not started yet
                pass
            await anyio.sleep(0.1)


async def test_sigkill_of_the_parents_process_while_the_child_runs(tmp_path: Path) -> None:
    first = _spawn(tmp_path, "parent", "wait")
    await _wait_for(tmp_path, "boss-1", "waiting_child")
    await _wait_for(tmp_path, "boss-1/h1", "running")
    with anyio.fail_after(60):  # the child is inside its tool: its intent is durable
        while True:
            async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
                if (await rt.status("boss-1/h1")).ledger:
                    break
            await anyio.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert effects() == []  # the child was inside its tool, before its effect
    (tmp_path / "gate").touch()
    # A new process picks both up. The child's tool call has an unknown outcome and the
    # helper's tool has the default policy (ask): an operator decides to run it again.
    second = _spawn(tmp_path, "serve-all")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and second.poll() is None:
        async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
            child = await rt.status("boss-1/h1")
            if child.status == "waiting_approval":
                [request] = child.open_approvals()
                await rt.approve("boss-1/h1", request["approval_id"], by="operator")
        await anyio.sleep(0.2)
    result = _finish(second)
    assert result["status"] == "finished"
    assert len(effects()) == 1  # the effect happened once
    async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
        kinds = await _kinds(rt, "boss-1")
        assert kinds.count(Kind.CHILD_STARTED) == 1 and kinds.count(Kind.CHILD_ENDED) == 1
        parent = await rt.status("boss-1")
        assert [m["content"] for m in parent.messages if m["role"] == "tool"] == [(await rt.status("boss-1/h1")).result]


async def test_sigkill_after_the_child_finished_before_the_parent_woke(tmp_path: Path) -> None:
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent()]) as rt:
        await rt.start("boss", "boss-1", "job")  # helper not registered here: a worker runs it
        await rt.wait("boss-1", until="waiting_child", timeout=30)
    dying = _spawn(tmp_path, "die-at-child-end")
    dying.wait(timeout=120)
    assert dying.returncode == -signal.SIGKILL, dying.stderr.read()[-3000:] if dying.stderr else ""
    async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
        assert (await rt.status("boss-1/h1")).status == "finished"
        assert (await rt.status("boss-1")).status == "waiting_child"  # the end was never delivered
    result = _finish(_spawn(tmp_path, "serve-all"))  # its scan delivers the end and the parent finishes
    assert result["status"] == "finished" and "did job-1 in" in result["result"]
    assert len(effects()) == 1
    async with Runtime(f"sqlite:///{tmp_path}/a.db") as rt:
        assert (await _kinds(rt, "boss-1")).count(Kind.CHILD_ENDED) == 1


async def test_a_child_is_served_by_another_worker(tmp_path: Path) -> None:
    worker = _spawn(tmp_path, "serve-children")
    try:
        # helper is not registered here and nothing here serves: run() waits while the
        # other worker runs the child, then runs the woken parent itself.
        async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent()]) as rt:
            with anyio.fail_after(90):
                state = await rt.run("boss", "boss-1", "job")
        assert state.status == "finished"
        [effect] = effects()
        assert effect["pid"] == worker.pid != os.getpid()  # the child ran in the other process
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


async def test_the_cli_shows_the_tree(tmp_path: Path) -> None:
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[boss_agent(fan=2), helper_agent()]) as rt:
        await rt.run("boss", "boss-1", "job")
        await rt.submit(helper_agent(), "alone", "other")

    def durably(*argv: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "COLUMNS": "250"}
        command = [sys.executable, "-m", "durably._cli", *argv, "--store", f"sqlite:///{tmp_path}/a.db"]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)

    shown = durably("show", "boss-1")
    assert shown.returncode == 0, shown.stderr
    assert "child:         boss-1/h1 (helper) finished, for call h1" in shown.stdout
    assert "child:         boss-1/h2 (helper) finished" in shown.stdout
    child = durably("show", "boss-1/h2", "--json")
    assert json.loads(child.stdout)["parent"] == "boss-1"
    listed = durably("agents", "--tree")
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if "boss-1" in line]
    assert "└" not in lines[0] and "boss-1 " in lines[0]  # the parent first, its children under it
    assert sorted("└ boss-1/h1" in line for line in lines[1:]) == [False, True]
    assert all("└ boss-1/h" in line for line in lines[1:])


async def test_the_console_links_parent_and_children(tmp_path: Path) -> None:
    import httpx

    from durably._console import create_app

    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[boss_agent(fan=2), helper_agent()]) as rt:
        await rt.run("boss", "boss-1", "job")
    app = create_app(url, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            parent = await client.get("/agent?id=boss-1")
            child = await client.get("/agent?id=boss-1%2Fh2")
    assert parent.status_code == 200 and child.status_code == 200
    assert "<dt>children</dt>" in parent.text
    for call in ("h1", "h2"):
        assert f'<a href="/agent?id=boss-1%2F{call}">boss-1/{call}</a> (helper)' in parent.text
    assert '<dt>parent</dt><dd><a href="/agent?id=boss-1">boss-1</a></dd>' in child.text


async def test_a_woken_parent_whose_lease_another_worker_holds_a_moment_is_run_here(tmp_path: Path) -> None:
    # A worker that cannot run the parent still takes its lease for a moment whenever it looks at
    # it (a scan, or the wake-up its child's end published): run() must ask again, not wait forever.
    url = f"sqlite:///{tmp_path}/a.db"
    states: list[str] = []
    async with Runtime(url, agents=[boss_agent()]) as rt, Runtime(url, agents=[helper_agent()]) as other:

        async def run_parent() -> None:
            states.append((await rt.run("boss", "boss-1", "job")).status)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_parent)
                while not [s for s in await rt.agents() if s.agent_id == "boss-1" and s.status == "waiting_child"]:
                    await anyio.sleep(0.05)  # the parent parked: its child waits for a worker that runs helper
                lease = await rt.store.acquire_lease(rt.stream("boss-1"), "w2/n@far-host:1:2:3:4", 30.0)
                assert lease is not None
                handle = await other.resume("boss-1/h1")
                assert handle is not None and (await handle.wait()).status == "finished"
                while (await other.status("boss-1")).status != "running":
                    await anyio.sleep(0.05)  # the child's end is delivered: the parent is woken
                await anyio.sleep(2.0)  # run() finds the lease held (it looks every 0.2 s)
                await rt.store.release_lease(lease)
    assert states == ["finished"]
