"""Resuming an agent under a changed definition: the continue, migrate and stop policies."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from durably import AgentDefinition, ModelResponse, Runtime, SnapshotPolicy, ToolCall, Usage, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.agent import OnDefinitionChange
from durably._loop.state import NEEDS_MIGRATION
from durably._upkeep.migrate import definition_change_entries
from durably.errors import DefinitionMigrationError
from durably.storage._registry import open_store
from durably.storage._spi import StreamId


class PlanModel:
    """Asks for one approved ``publish`` call, then finishes with the plan it sees in the system prompt."""

    name = "plan-model"

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        if not any(m["role"] == "tool" for m in messages):
            return ModelResponse(
                "publishing", (ToolCall("p1", "publish", {"title": "t"}),), Usage(3, 2, 0.0), plan=["publish"]
            )
        return ModelResponse(f"done under: {messages[0]['content']}", (), Usage(3, 2, 0.0))


def definition(instructions: str = "v1 prompt", version: str = "1", **policy: Any) -> AgentDefinition:
    """The same agent name, with an approval-gated tool so a run parks mid-way."""

    @tool(requires_approval=True, on_unknown_outcome="retry")
    async def publish(title: str, *, ctx) -> str:
        return f"published {title}"

    return AgentDefinition(
        name="writer", model=PlanModel(), tools=[publish], instructions=instructions, version=version, **policy
    )


@pytest.fixture
async def store():
    async with open_store(f"memory://{uuid.uuid4().hex}") as opened:
        yield opened


async def parked(store, agent_id: str = "w1") -> str:
    """Start ``agent_id`` under the v1 definition and approve its call from a runtime without
    definitions, as an operator's CLI would: the agent is runnable and not running."""
    async with Runtime(store, agents=[definition()]) as rt:
        state = await rt.run("writer", agent_id, "write the report")
        assert state.status == "waiting_approval"
    async with Runtime(store) as cli:
        state = await cli.approve(agent_id, state.open_approvals()[0]["approval_id"], by="ops")
        assert state.status == "running"
    return agent_id


async def stored_bytes(store, agent_id: str = "w1") -> tuple:
    stream = StreamId("default", agent_id)
    records = [(r.seq, r.data) async for r in store.read(stream)]
    snapshot = await store.get_snapshot(stream)
    return await store.last_seq(stream), records, snapshot


async def kinds(store, agent_id: str = "w1") -> list[str]:
    codec, stream = RecordCodec(), StreamId("default", agent_id)
    return [record.kind async for record in JournalReader(store, codec, stream).records()]


async def test_the_same_definition_resumes_without_a_definition_record(store) -> None:
    await parked(store)
    async with Runtime(store, agents=[definition()]) as rt:
        state = await (await rt.resume("w1")).wait()
    assert state.status == "finished" and "definition_changed" not in await kinds(store)


def test_the_default_policy_is_stop_and_migrate_needs_a_hook() -> None:
    assert definition().on_definition_change is OnDefinitionChange.STOP
    assert definition(on_definition_change="continue").on_definition_change is OnDefinitionChange.CONTINUE
    with pytest.raises(ValueError, match="migrate hook"):
        definition(on_definition_change="migrate")
    with pytest.raises(ValueError):
        definition(on_definition_change="guess")


async def test_stop_reports_needs_migration_and_appends_nothing(store) -> None:
    await parked(store)
    before = await stored_bytes(store)
    changed = definition("v2 prompt", version="2")
    async with Runtime(store, agents=[changed], snapshot_policy=SnapshotPolicy(every_records=1)) as rt:
        assert await rt.resume("w1") is None
        assert await rt.resume_all() == []
        state = await rt.status("w1")
        assert state.status == NEEDS_MIGRATION
        assert "version '1' -> '2'" in state.reason and changed.digest() in state.reason and "stop" in state.reason
        # A command is still recorded, but the held state is never snapshotted.
        await rt.send("w1", "any news?")
    after = await stored_bytes(store)
    assert after[1][: len(before[1])] == before[1] and len(after[1]) == len(before[1]) + 1
    assert after[2] == before[2]  # no snapshot carries the in-memory needs_migration status
    # The recorded definition, registered again, resumes it where it was.
    async with Runtime(store, agents=[definition()]) as rt:
        assert (await rt.status("w1")).status == "running"
        state = await (await rt.resume("w1")).wait()
    assert state.status == "finished" and "definition_changed" not in await kinds(store)


async def test_stop_leaves_a_parked_agent_parked(store) -> None:
    async with Runtime(store, agents=[definition()]) as rt:
        await rt.run("writer", "w1", "write")
    async with Runtime(store, agents=[definition("v2 prompt")]) as rt:
        state = await rt.status("w1")
        assert state.status == "waiting_approval"  # nothing would run anyway
        state = await rt.approve("w1", state.open_approvals()[0]["approval_id"])
        assert (await rt.status("w1")).status == NEEDS_MIGRATION


async def test_continue_records_the_switch_and_runs_on(store) -> None:
    await parked(store)
    new = definition("v2 prompt", version="2", on_definition_change="continue")
    async with Runtime(store, agents=[new]) as rt:
        state = await (await rt.resume("w1")).wait()
    assert state.status == "finished" and state.definition == new.info()
    assert state.result == "done under: v1 prompt"  # continue keeps the conversation as it was
    history = await kinds(store)
    assert history[history.index("definition_changed") + 1] == "resumed"
    # The switch is in the journal: the next resume under the same definition is a plain one.
    async with Runtime(store, agents=[new]) as rt:
        assert (await rt.status("w1")).definition == new.info()


def new_prompt(state: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """A migrate hook: the system prompt of v2, and a plan that says where it came from."""
    state["messages"][0] = {"role": "system", "content": f"v2 prompt (was {previous['version']})"}
    state["plan"] = state["plan"] + ["migrated"]
    return state


async def test_migrate_rewrites_the_state_once_and_replays_it(store) -> None:
    await parked(store)
    new = definition("v2 prompt", version="2", on_definition_change="migrate", migrate=new_prompt)
    async with Runtime(store, agents=[new]) as rt:
        state = await (await rt.resume("w1")).wait()
    assert state.status == "finished" and state.result == "done under: v2 prompt (was 1)"
    assert state.plan == ["publish", "migrated"] and state.definition == new.info()
    # The record holds only the rewritten fields, and a fresh restore replays them.
    codec, stream = RecordCodec(), StreamId("default", "w1")
    (record,) = [
        r
        for r in [record async for record in JournalReader(store, codec, stream).records()]
        if r.kind == "definition_changed"
    ]
    assert record.data["policy"] == "migrate" and set(record.data["state"]) == {"messages", "plan"}
    assert record.data["previous"]["version"] == "1" and record.data["definition"] == new.info()
    restored = await restore(store, codec, stream)
    assert restored.state.to_wire() == state.to_wire()


async def test_migrate_hook_sees_a_copy(store) -> None:
    await parked(store)
    seen: list = []

    def mutate_everything(state: dict, previous: dict) -> dict:
        seen.append(previous)
        state["messages"][1]["content"] = "changed in place"
        previous["digest"] = "forged"
        return state

    async with Runtime(
        store, agents=[definition("v2", on_definition_change="migrate", migrate=mutate_everything)]
    ) as rt:
        journal = await rt._activations.restore_journal("w1")
        messages_before = [dict(m) for m in journal.state.messages]
        (entry,) = definition_change_entries(journal.state, rt._definitions["writer"])
        assert journal.state.messages == messages_before  # the live state was not touched
        assert entry[1]["state"]["messages"][1]["content"] == "changed in place"
        assert entry[1]["previous"]["digest"] != "forged"


@pytest.mark.parametrize(
    "hook, problem",
    [
        (lambda s, p: 1 / 0, "raised ZeroDivisionError"),
        (lambda s, p: None, "returned a NoneType"),
        (lambda s, p: {**s, "colour": "blue"}, "unknown state fields"),
        (lambda s, p: {**s, "run_id": "other"}, "the runtime owns"),
        (lambda s, p: {**s, "messages": "flattened"}, "from a list into a str"),
        (lambda s, p: {**s, "result": object()}, "cannot be stored"),  # (a set is stored exactly)
    ],
)
async def test_a_bad_migrate_hook_stops_the_resume_and_writes_nothing(store, hook, problem) -> None:
    await parked(store)
    before = await stored_bytes(store)
    async with Runtime(store, agents=[definition("v2", on_definition_change="migrate", migrate=hook)]) as rt:
        with pytest.raises(DefinitionMigrationError, match=problem) as caught:
            await rt.resume("w1")
        assert caught.value.agent_id == "w1" and caught.value.previous["version"] == "1"
        assert await rt.resume_all() == []  # skipped, like an unregistered definition
    assert await stored_bytes(store) == before
