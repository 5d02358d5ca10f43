"""durably's own tools on the threads DurablySaver writes: ``verify``, ``agents``,
``sweep``, ``show``, ``history``, ``state``, ``reencrypt`` (run as the CLI, in a
subprocess) and the console's thread pages read them as threads, not as damaged
agent journals; real damage in a thread is still reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import anyio
import httpx
import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from langgraph_agent import ScriptedChatModel, build_agent

from durably._console import create_app
from durably._reading.threads import encode_record
from durably._upkeep.reencrypt import key_census
from durably.integrations.langgraph import DurablySaver
from durably.storage import StreamId
from durably.storage._codec import Codec
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._registry import open_store

NS = "langgraph"
K1, K2 = generate_key(), generate_key()


def durably(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "COLUMNS": "250", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "durably._cli", *argv], capture_output=True, text=True, timeout=300, env=environment
    )


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 100}


async def make_threads(url: str, cipher=None) -> None:
    """``done`` (finished, snapshotted and compacted), ``waits`` (at an interrupt), ``long`` (records only)."""
    async with DurablySaver.from_url(url, cipher=cipher, snapshot_min_bytes=2048) as saver:
        graph = build_agent(ScriptedChatModel(steps=6, calls_per_step=2)).compile(checkpointer=saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config("done"))
        gated = build_agent(ScriptedChatModel(steps=1, calls_per_step=1), approval=True).compile(checkpointer=saver)
        await gated.ainvoke({"messages": [HumanMessage("go")]}, config("waits"))
    async with DurablySaver.from_url(url, cipher=cipher, snapshot_min_bytes=1 << 30) as saver:
        graph = build_agent(ScriptedChatModel(steps=2, calls_per_step=1)).compile(checkpointer=saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config("long"))


@pytest.fixture
def threads_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    anyio.run(make_threads, url)
    return url


def test_verify_reads_healthy_threads_as_sound_and_still_reports_damage(threads_url) -> None:
    ok = durably("verify", "--store", threads_url, "--namespace", NS)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "3 streams" in ok.stdout and "every frame reads back" in ok.stdout and "DAMAGED" not in ok.stdout
    report = json.loads(durably("verify", "--store", threads_url, "--namespace", NS, "--json").stdout)
    done = next(s for s in report["streams"] if s["stream"]["agent_id"] == "done")
    assert report["ok"] and done["snapshots"] >= 1

    async def damage() -> None:
        async with open_store(threads_url) as store:
            long, waits = StreamId(NS, "long"), StreamId(NS, "waits")
            await store.append(long, await store.last_seq(long), [b"dy\x02not a frame at all, just bytes"])
            seq = await store.last_seq(waits) + 1
            await store.append(waits, seq - 1, [encode_record(Codec(), {"k": "?", "t": 1.0}, waits, seq)])

    anyio.run(damage)
    bad = durably("verify", "--store", threads_url, "--namespace", NS)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "long: DAMAGED" in bad.stdout and "waits: DAMAGED" in bad.stdout and "done: ok" in bad.stdout
    assert "2 damaged" in bad.stdout


def test_agents_and_sweep_see_threads_with_their_status(threads_url) -> None:
    listed = json.loads(durably("agents", "--store", threads_url, "--namespace", NS, "--json").stdout)["agents"]
    statuses = {a["agent_id"]: a["status"] for a in listed}
    assert statuses == {"done": "finished", "waits": "waiting_approval", "long": "finished"}
    assert all(a["definition"] == "langgraph" for a in listed)
    plain = durably("agents", "--store", threads_url, "--namespace", NS)
    assert plain.returncode == 0 and "unreadable" not in plain.stdout
    swept = durably("sweep", "--store", threads_url, "--namespace", NS, "--ttl", "finished=0s", "--dry-run")
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert "unreadable" not in swept.stdout and "undated" not in swept.stdout
    assert "done: expired [finished" in swept.stdout and "waits: kept [waiting_approval" in swept.stdout
    gone = durably("sweep", "--store", threads_url, "--namespace", NS, "--ttl", "finished=0s", "--yes")
    assert gone.returncode == 0 and "done: purged" in gone.stdout

    async def left() -> list[str]:
        async with open_store(threads_url) as store:
            return [s.agent_id async for s in store.list_streams(NS)]

    assert anyio.run(left) == ["waits"]


def test_show_history_and_state_show_a_thread(threads_url) -> None:
    shown = durably("show", "done", "--store", threads_url, "--namespace", NS)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert (
        "(LangGraph)" in shown.stdout and "checkpoints:" in shown.stdout and "status:        finished" in shown.stdout
    )
    document = json.loads(durably("show", "waits", "--store", threads_url, "--namespace", NS, "--json").stdout)
    assert document["kind"] == "langgraph_thread" and document["status"] == "waiting_approval"
    assert document["checkpoints"] >= 3 and document["writes"] >= 1 and "" in document["latest"]
    history = durably("history", "long", "--store", threads_url, "--namespace", NS)
    assert history.returncode == 0, history.stdout + history.stderr
    assert "checkpoint" in history.stdout and "writes" in history.stdout and "messages" in history.stdout
    records = json.loads(
        durably("history", "long", "--store", threads_url, "--namespace", NS, "--json", "--kind", "checkpoint").stdout
    )["records"]
    assert records and {r["kind"] for r in records} == {"checkpoint"}
    state = durably("state", "done", "--store", threads_url, "--namespace", NS)
    assert state.returncode == 0, state.stdout + state.stderr
    assert "value messages:" in state.stdout and "ai: All done." in state.stdout
    folded = json.loads(durably("state", "done", "--store", threads_url, "--namespace", NS, "--json").stdout)
    assert folded["state"]["values"]["messages"].startswith(
        "20 items"
    )  # go + 6 x (ai + 2 tool messages) + the final answer


async def test_the_consoles_thread_pages_answer(threads_url) -> None:
    app = create_app(threads_url, namespace=NS, allowed_hosts=["console"])
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            index = await client.get("/")
            page = await client.get("/agent", params={"id": "waits"})
            timeline = await client.get("/agent", params={"id": "long"})
            state = await client.get("/state", params={"agent": "done"})
    assert index.status_code == 200 and "waits" in index.text and "status-unreadable" not in index.text
    assert "status-waiting_approval" in index.text
    assert page.status_code == 200, page.text[-2000:]
    assert "waiting_approval" in page.text and "interrupt()" in page.text
    assert timeline.status_code == 200 and "checkpoint" in timeline.text and "writes" in timeline.text
    assert state.status_code == 200, state.text[-2000:]
    assert "checkpoints" in state.text


def test_reencrypt_rewrites_threads_in_place_and_the_saver_reads_them(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    old = AESGCMCipher(StaticKeyProvider({"k1": K1}))
    anyio.run(make_threads, url, old)
    keys = {"DURABLY_KEYS": f"k1={K1.hex()},k2={K2.hex()}", "DURABLY_KEY_ID": "k2"}
    cli = durably("reencrypt", "--store", url, "--namespace", NS, "--wait", "0", env=keys)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "every frame now under key 'k2'" in cli.stdout
    new_only = AESGCMCipher(StaticKeyProvider({"k2": K2}))

    async def check() -> None:
        async with open_store(url) as store:
            for thread in ("done", "waits", "long"):
                records, snapshots = await key_census(store, StreamId(NS, thread))
                assert set(records) | set(snapshots) == {"k2"}, thread
        async with DurablySaver.from_url(url, cipher=new_only) as saver:
            graph = build_agent(ScriptedChatModel(steps=6, calls_per_step=2)).compile(checkpointer=saver)
            state = await graph.aget_state(config("done"))
            assert len(state.values["messages"]) == 20 and state.values["messages"][-1].content == "All done."
            gated = build_agent(ScriptedChatModel(steps=1, calls_per_step=1), approval=True).compile(checkpointer=saver)
            result = await gated.ainvoke(Command(resume="yes"), config("waits"))
            assert result["messages"][-1].content == "All done."

    anyio.run(check)
    verified = durably("verify", "--store", url, "--namespace", NS, env=keys)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_agent_commands_on_a_thread_say_it_is_a_langgraph_thread(threads_url) -> None:
    import durably as d
    from durably.errors import LangGraphThreadError

    for argv in (
        ("approve", "waits", "x"),
        ("approve", "waits", "x", "--deny"),
        ("send", "waits", "hello"),
        ("cancel", "waits"),
        ("retry", "done"),
        ("extend", "waits", "--steps", "1"),
    ):
        said = durably(*argv, "--store", threads_url, "--namespace", NS)
        assert said.returncode != 0, argv
        told = said.stdout + said.stderr
        assert "LangGraphThreadError" in told and "Command(resume=...)" in told, (argv, told)
        assert "CorruptRecordError" not in told and "unreadable" not in told, (argv, told)

    async def commands() -> None:
        async with d.Runtime(threads_url, namespace=NS) as rt:
            for thread in ("waits", "done"):  # "done" is compacted: only its snapshot says what it is
                with pytest.raises(LangGraphThreadError, match="LangGraph thread"):
                    await rt.approve(thread, "x", approved=False)
                with pytest.raises(LangGraphThreadError):
                    await rt.resume(thread)

    anyio.run(commands)
    # Refused, the thread is untouched: LangGraph resumes it from its interrupt.
    shown = json.loads(durably("show", "waits", "--store", threads_url, "--namespace", NS, "--json").stdout)
    assert shown["status"] == "waiting_approval"
