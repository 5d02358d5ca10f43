"""Everything written under ``write_compat="0.1"`` must be read by the 0.1 release.

Tried on what the rolling-upgrade tests leave out: encrypted agents, a parent and its
child agent, a function agent, a conversation compacted by a history policy, snapshots
pruned and compacted behind, and a key rotation (``reencrypt``). The 0.1 release runs from
this repository's history in its own process on the same SQLite file; each agent's
state there must be the state this build reads, restored from its snapshot (not after
skipping it as unreadable).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from previous_release import old, previous_release_tree  # noqa: F401 - the fixture
from support_agents import StepModel, list_agent

from durably import (
    AgentDefinition,
    Budget,
    FunctionAgent,
    ModelResponse,
    Run,
    Runtime,
    SnapshotPolicy,
    ToolCall,
    agent_tool,
)
from durably._journal import page_writer
from durably._loop.agent import HistoryPolicy
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key

K1, K2 = generate_key(), generate_key()

#: Run by the 0.1 release: every agent's state as it restores it, as JSON.
OLD_READER = """
import json, sys
import anyio
from durably import Runtime
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider

async def main(url, keys, ids):
    keys = json.loads(keys)
    cipher = AESGCMCipher(StaticKeyProvider({k: bytes.fromhex(v) for k, v in keys.items()})) if keys else None
    out = {}
    async with Runtime(url, encryption=cipher) as rt:
        for agent_id in ids:
            out[agent_id] = (await rt.status(agent_id)).to_wire()
    print(json.dumps(out, default=repr, sort_keys=True))

anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3:])
"""


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_writer, "PAGE", 4)
    monkeypatch.setattr(page_writer, "KEEP", 2)


def helper() -> AgentDefinition:
    return AgentDefinition(name="helper", model=StepModel(3), tools=list_agent(1, []).tools)


class Delegate:
    name = "delegate"

    async def respond(self, messages: list[dict[str, Any]], tools: Any) -> ModelResponse:
        if messages[-1]["role"] == "tool":
            return ModelResponse(f"told: {messages[-1]['content']}")
        return ModelResponse("", (ToolCall("h1", "helper", {"task": "count"}),))


async def summarize(messages: list[dict[str, Any]]) -> str:
    return f"{len(messages)} messages"


async def body(run: Run, task: str) -> str:
    async def shout(text: str) -> str:
        return text.upper()

    parts = [await run.call(shout, f"{task}{i}") for i in range(12)]
    return "".join(parts)


def definitions() -> list[Any]:
    compacting = list_agent(14, [], name="compacting")
    compacting = AgentDefinition(
        name="compacting",
        model=compacting.model,
        tools=compacting.tools,
        history=HistoryPolicy(max_messages=12, keep_recent=6, summarize=summarize),
    )
    boss = AgentDefinition(name="boss", model=Delegate(), tools=[agent_tool(helper())])
    return [list_agent(14, []), compacting, boss, helper(), FunctionAgent("shouter", body)]


def comparable(wire: dict[str, Any]) -> Any:
    return json.loads(json.dumps(wire, default=repr, sort_keys=True))


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_the_previous_release_reads_every_kind_of_agent_written_under_write_compat(
    tmp_path: Path,
    previous_release: Path,
    encrypted: bool,
) -> None:
    url = f"sqlite:///{tmp_path}/fleet.db"
    first = AESGCMCipher(StaticKeyProvider({"k1": K1})) if encrypted else None
    policy = SnapshotPolicy(every_records=3, tail_ratio=0.0, keep=2, compact=True)
    kw: dict[str, Any] = {"snapshot_policy": policy, "write_compat": "0.1", "agents": definitions()}
    async with Runtime(url, encryption=first, **kw) as rt:
        assert (await rt.run("list-agent", "l1", "count")).status == "finished"
        # Its model counts the tool messages, which compaction drops: a budget ends it.
        assert (await rt.run("compacting", "c1", "count", budget=Budget(steps=14))).status == "suspended"
        assert (await rt.run("boss", "b1", "delegate")).status == "finished"
        assert (await rt.run("shouter", "f1", "x")).status == "finished"
        await rt._activations.services.snapshots.flush()
    ids = ["l1", "c1", "b1", "f1"]
    keys: dict[str, str] = {}
    if encrypted:
        rotated = AESGCMCipher(StaticKeyProvider({"k1": K1, "k2": K2}, current="k2"))
        async with Runtime(url, encryption=rotated, **kw) as rt:
            reports = await rt.reencrypt()
            assert reports
        keys = {"k1": K1.hex(), "k2": K2.hex()}
    cipher = AESGCMCipher(StaticKeyProvider({"k1": K1, "k2": K2}, current="k2")) if encrypted else None
    async with Runtime(url, encryption=cipher, agents=definitions()) as rt:
        ids += [s.agent_id for s in await rt.agents() if s.agent_id not in ids]  # the child agent too
        here = {agent_id: comparable((await rt.status(agent_id)).to_wire()) for agent_id in ids}
    ran = old(previous_release, "-c", OLD_READER, url, json.dumps(keys), *ids, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "unreadable" not in ran.stderr, ran.stderr
    there = json.loads(ran.stdout.splitlines()[-1])
    for agent_id in ids:
        assert there[agent_id] == here[agent_id], agent_id
