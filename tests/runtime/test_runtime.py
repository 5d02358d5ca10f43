"""The runtime in one process: the step loop, tool policies, approvals, budgets,
fencing, snapshots and restore, on the memory and SQLite stores."""

from __future__ import annotations

import uuid

import anyio
import pytest
from lease_partition import lease_partitionable
from support_agents import StepModel, list_agent

from durably import (
    AgentDefinition,
    AgentLeasedError,
    AgentLeaseLostError,
    Budget,
    InvalidCommandError,
    Runtime,
    SnapshotPolicy,
    tool,
)
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably.storage import CorruptRecordError, StreamId, open_store


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request, tmp_path):
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    return f"sqlite:///{tmp_path}/agents.db"


async def kinds(url: str, agent_id: str, namespace: str = "default") -> list[str]:
    codec = RecordCodec()
    async with open_store(url) as store:
        stream = StreamId(namespace, agent_id)
        return [record.kind async for record in JournalReader(store, codec, stream).records()]


async def wait_status(rt: Runtime, agent_id: str, *statuses: str) -> None:
    with anyio.fail_after(10):
        while (await rt.status(agent_id)).status not in statuses:
            await anyio.sleep(0.01)


async def test_run_journals_every_step_in_order(store_url):
    effects: list = []
    async with Runtime(store_url, agents=[list_agent(3, effects)]) as rt:
        state = await rt.run("list-agent", "a1", "count to three")
    assert state.status == "finished"
    assert state.result == "done [10, 20, 30]"
    assert [n for _, n in effects] == [1, 2, 3]
    assert len({key for key, _ in effects}) == 3  # one idempotency key per call
    assert await kinds(store_url, "a1") == [
        "started",
        *(["model_responded", "tool_intent", "tool_result"] * 3),
        "model_responded",
        "finished",
    ]
    assert state.usage["steps"] == 4 and state.usage["input_tokens"] == 40


async def test_restart_resumes_without_repeating_model_calls_or_tools(store_url):
    effects: list = []
    definition = list_agent(2, effects)
    async with Runtime(store_url, agents=[definition]) as rt:
        await rt.run(definition, "a1", "task")
    calls = definition.model.calls
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")  # exists: resumed, already finished
        assert state.status == "finished"
    assert definition.model.calls == calls and len(effects) == 2


async def intent_without_result(url: str, policy: str, agent_id: str = "a1") -> None:
    """Leave ``agent_id`` with a tool intent and no result, as a crash mid-tool would.

    The tool has the same signature as the one resumed with (same ``policy``), so
    the agent definition's digest is unchanged across the "restart"."""
    started = anyio.Event()

    async def nothing_happened(ctx):
        return None

    reconcile = nothing_happened if policy == "reconcile" else None

    @tool(name="effect", on_unknown_outcome=policy, reconcile=reconcile)
    async def hang(n: int, *, ctx) -> int:
        started.set()
        await anyio.sleep_forever()

    definition = AgentDefinition(name="list-agent", model=StepModel(1), tools=[hang])
    async with Runtime(url, agents=[definition]) as rt:
        await rt.start(definition, agent_id, "task")
        await started.wait()
    assert (await kinds(url, agent_id))[-1] == "tool_intent"


async def test_unknown_outcome_retry_reruns_with_the_same_key(store_url):
    await intent_without_result(store_url, "retry")
    effects: list = []
    async with Runtime(store_url, agents=[list_agent(1, effects, policy="retry")]) as rt:
        handle = await rt.resume("a1")
        state = await handle.wait()
    assert state.status == "finished" and len(effects) == 1
    (entry,) = state.ledger.values()
    assert entry["attempts"] == 2 and effects[0][0] == state.approvals.get("x", {}).get("key", effects[0][0])
    assert (await kinds(store_url, "a1")).count("tool_intent") == 2


async def test_unknown_outcome_reconcile_does_not_rerun_what_happened(store_url):
    from durably import Reconciled

    await intent_without_result(store_url, "reconcile")
    ran: list = []

    async def happened(ctx):
        return Reconciled(10)

    @tool(name="effect", on_unknown_outcome="reconcile", reconcile=happened)
    async def effect(n: int, *, ctx) -> int:
        ran.append(n)
        return n * 10

    definition = AgentDefinition(name="list-agent", model=StepModel(1), tools=[effect])
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await (await rt.resume("a1")).wait()
    assert ran == [] and state.status == "finished" and state.result == "done [10]"
    assert next(iter(state.ledger.values()))["reconciled"] is True


async def test_unknown_outcome_fail_stops_the_agent(store_url):
    await intent_without_result(store_url, "fail")
    effects: list = []
    async with Runtime(store_url, agents=[list_agent(1, effects, policy="fail")]) as rt:
        state = await (await rt.resume("a1")).wait()
    assert state.status == "failed" and "outcome unknown" in state.reason and effects == []


async def test_unknown_outcome_ask_parks_until_a_human_decides(store_url):
    await intent_without_result(store_url, "ask")
    effects: list = []
    definition = list_agent(1, effects, policy="ask")
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await (await rt.resume("a1")).wait()
        assert state.status == "waiting_approval" and effects == []
        (approval,) = state.open_approvals()
        await rt.approve("a1", approval["approval_id"], by="ops")
        await wait_status(rt, "a1", "finished")
    assert len(effects) == 1


async def test_approval_gate_parks_and_holds_no_memory(store_url):
    effects: list = []
    definition = list_agent(1, effects, requires_approval=True)
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")
        assert state.status == "waiting_approval" and effects == []
        assert rt._activations.live == {}  # parked: nothing of the agent is kept in memory
        with pytest.raises(InvalidCommandError):
            await rt.approve("a1", "no-such-approval")
        await rt.approve("a1", "c1", approved=False, by="alice", note="not today")
        await wait_status(rt, "a1", "finished")
        state = await rt.status("a1")
        with pytest.raises(InvalidCommandError):
            await rt.approve("a1", "c1")  # finished: nothing to decide
    assert effects == []
    assert state.messages[-2]["content"] == "denied by alice: not today"


async def test_budget_suspends_and_extension_resumes(store_url):
    effects: list = []
    definition = list_agent(5, effects)
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task", budget=Budget(steps=2))
        assert state.status == "suspended" and "steps" in state.reason and len(effects) == 2
        await rt.extend_budget("a1", steps=1)
        await wait_status(rt, "a1", "suspended")
        assert len(effects) == 3
        await rt.extend_budget("a1", steps=10)
        await wait_status(rt, "a1", "finished")
    assert len(effects) == 5


async def test_token_and_cost_budgets(store_url):
    async with Runtime(store_url, agents=[list_agent(5, [])]) as rt:
        state = await rt.run("list-agent", "tokens", "task", budget=Budget(tokens=45))
        assert state.status == "suspended" and "tokens" in state.reason and state.usage["steps"] == 3
        state = await rt.run("list-agent", "cost", "task", budget=Budget(cost_usd=0.015))
        assert state.status == "suspended" and "cost_usd" in state.reason and state.usage["steps"] == 2


async def test_cancel_and_send_message(store_url):
    async with Runtime(store_url, agents=[list_agent(1, [], requires_approval=True)]) as rt:
        await rt.run("list-agent", "a1", "task")
        await rt.send("a1", "please hurry")
        state = await rt.cancel("a1", "no longer needed")
        assert state.status == "cancelled"
        with pytest.raises(InvalidCommandError):
            await rt.send("a1", "too late")
    assert (await kinds(store_url, "a1"))[-2:] == ["message_received", "cancelled"]


async def test_stale_writer_is_fenced_and_acts_no_more(store_url):
    # The old worker is cut off from the store's leases while its tool runs: its lease
    # lapses, a second worker waits for it (resume(force=True)) and takes the agent over.
    # When the old worker's call returns, it acts no more: its lease is lost.
    effects: list = []
    gate = anyio.Event()

    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(n: int, *, ctx) -> int:
        effects.append((ctx.idempotency_key, n))
        if len(effects) == 1:  # only the old worker's first call hangs
            await gate.wait()
        return n

    definition = AgentDefinition(name="list-agent", model=StepModel(3), tools=[effect])
    old_store = lease_partitionable(store_url)
    async with old_store, Runtime(old_store, agents=[definition], worker_id="old", lease_ttl=0.6) as old:
        handle = await old.start(definition, "a1", "task")
        while not effects:
            await anyio.sleep(0.01)
        async with Runtime(store_url, agents=[definition], worker_id="new") as new:
            with pytest.raises(AgentLeasedError):
                await new.resume("a1")  # the old worker still holds the agent's lease
            old_store.cut = True  # its renewals fail from now on: its lease lapses
            state = await (await new.resume("a1", force=True)).wait()
            assert state.status == "finished"
        gate.set()
        with pytest.raises(AgentLeaseLostError):
            await handle.wait()
    # Call 1 ran twice (same key: the policy is retry), calls 2 and 3 once each.
    assert sorted(n for _, n in effects) == [1, 1, 2, 3]
    assert len({k for k, n in effects if n == 1}) == 1


async def test_unstorable_tool_result_fails_the_agent_with_its_path_and_marks_the_call_done(store_url):
    # A result that cannot be stored is not replaced by an error string: the agent fails
    # naming the tool, the call and the field, and the ledger marks the effect done (a
    # retry never repeats it).
    class Opaque:
        pass

    effects = []

    @tool(name="effect")
    async def effect(n: int, *, ctx):
        effects.append(n)
        return {"when": Opaque()}

    definition = AgentDefinition(name="list-agent", model=StepModel(1), tools=[effect])
    async with Runtime(store_url, agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "task")
        assert state.status == "failed"
        assert (
            "tool effect call c1" in state.reason
            and "tool_result.data.result.when: Opaque is not supported" in state.reason
        )
        (entry,) = state.ledger.values()
        assert entry["done"] and entry["result"] is None and effects == [1]
    told = [m["content"] for m in state.messages if m["role"] == "tool"]
    assert len(told) == 1 and "could not be stored" in told[0] and "will not run again" in told[0]


async def test_model_error_fails_the_agent_with_the_reason(store_url):
    class Broken:
        name = "broken"

        async def respond(self, messages, tools):
            raise RuntimeError("provider down")

    async with Runtime(store_url, agents=[AgentDefinition(name="b", model=Broken())]) as rt:
        state = await rt.run("b", "a1", "task")
    assert state.status == "failed" and "provider down" in state.reason


@pytest.mark.parametrize("compact", [False, True])
async def test_snapshot_plus_tail_equals_full_replay(store_url, compact):
    policy = SnapshotPolicy(every_records=7, tail_ratio=0.0, compact=compact)
    async with Runtime(store_url, agents=[list_agent(20, [])], snapshot_policy=policy) as rt:
        final = await rt.run("list-agent", "a1", "task")
    stream = StreamId("default", "a1")
    async with open_store(store_url) as store:
        snapshot = await store.get_snapshot(stream)
        assert snapshot is not None and snapshot.seq > 7
        if compact:
            previous = await store.get_snapshot(stream, snapshot.seq - 1)  # two are kept
            assert previous is not None and await store.get_snapshot(stream, previous.seq - 1) is None
            # Compacted through the older kept snapshot, so restore can still fall back to it.
            assert [r.seq async for r in store.read(stream)][0] == previous.seq + 1
        restored = await restore(store, RecordCodec(), stream)
    assert restored.snapshot_seq == snapshot.seq
    assert restored.state.to_wire() == final.to_wire()


async def test_corrupt_record_stops_resume_and_leaves_bytes(tmp_path):
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(
        url, agents=[list_agent(3, [], requires_approval=True)], snapshot_policy=SnapshotPolicy(every_records=0)
    ) as rt:
        await rt.run("list-agent", "a1", "task")
    import sqlite3

    with sqlite3.connect(tmp_path / "a.db") as db:
        (data,) = db.execute("SELECT data FROM records WHERE seq = 2").fetchone()
        damaged = data[:-1] + bytes([data[-1] ^ 0x01])
        db.execute("UPDATE records SET data = ? WHERE seq = 2", (damaged,))
    async with Runtime(url, agents=[list_agent(3, [])]) as rt:
        with pytest.raises(CorruptRecordError, match="checksum"):
            await rt.approve("a1", "c1")
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("SELECT data FROM records WHERE seq = 2").fetchone()[0] == damaged
        assert db.execute("SELECT max(seq) FROM records").fetchone()[0] == 3


async def test_body_exception_is_not_wrapped():
    with pytest.raises(KeyError):
        async with Runtime("memory://"):
            raise KeyError("mine")


async def test_many_agents_share_group_commits(tmp_path):
    effects: list = []
    async with Runtime(f"sqlite:///{tmp_path}/a.db", agents=[list_agent(5, effects)]) as rt:
        handles = [await rt.start("list-agent", f"a{i}", "task") for i in range(20)]
        states = [await h.wait() for h in handles]
        committer = rt._activations.services.committer
    assert all(s.status == "finished" for s in states) and len(effects) == 100
    appends = sum(s.last_seq for s in states) // 1  # upper bound on appends (one record each or more)
    assert committer.batches < appends / 2  # grouped: far fewer commits than appends


async def test_resume_all_skips_an_unreadable_journal(tmp_path, caplog):
    import sqlite3

    url = f"sqlite:///{tmp_path}/a.db"
    effects: list = []
    definition = list_agent(1, effects, requires_approval=True)
    async with Runtime(url, agents=[definition]) as rt:
        for agent_id in ("bad", "good"):
            await rt.run(definition, agent_id, "task")
    async with Runtime(url) as operator:  # no definitions: decisions are only appended
        for agent_id in ("bad", "good"):
            await operator.approve(agent_id, "c1")
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute(
            "UPDATE records SET data = X'00' WHERE seq = 2 AND stream_id = "
            "(SELECT id FROM streams WHERE agent_id = 'bad')"
        )
    async with Runtime(url, agents=[definition]) as rt:
        handles = await rt.resume_all()
        assert [h.agent_id for h in handles] == ["good"]
        assert (await handles[0].wait()).status == "finished"
    assert "bad" in caplog.text and "unreadable" in caplog.text and len(effects) == 1


async def test_agents_lists_an_unreadable_journal_among_the_others(tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[list_agent(1, [])]) as rt:
        for agent_id in ("bad", "good"):
            await rt.run("list-agent", agent_id, "task")
    with sqlite3.connect(tmp_path / "a.db") as db:
        db.execute(
            "UPDATE records SET data = X'00' WHERE seq = 1 AND stream_id = "
            "(SELECT id FROM streams WHERE agent_id = 'bad')"
        )
    async with Runtime(url) as rt:
        states = {s.agent_id: s for s in await rt.agents()}
    assert states["good"].status == "finished"
    assert states["bad"].status == "unreadable" and "TruncatedRecordError" in states["bad"].reason
