"""The read/operate API without a running agent: history, state_at, fork, describe, wait and watch."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably._cli.demo.survey import survey_agent, survey_task
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably.errors import (
    AgentExistsError,
    AgentNotFoundError,
    InvalidCommandError,
    SeqOutOfRangeError,
    WaitTimeoutError,
)
from durably.schemas._records import Kind, Record

WORKER = Path(__file__).resolve().parents[1] / "support" / "approval_worker.py"


async def parked_survey(url: str, work: Path) -> AgentState:
    agent = survey_agent(work, latency=0)
    async with Runtime(url, agents=[agent], snapshot_policy=SnapshotPolicy(every_records=4, tail_ratio=0)) as rt:
        return await rt.run(agent, "survey", survey_task(["colorsys", "bisect"]))


def rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT * FROM records ORDER BY 1, 2, 3").fetchall()


async def test_history_yields_typed_records_with_times_summaries_and_payloads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    before = time.time()
    state = await parked_survey(url, tmp_path / "work")
    async with Runtime(url) as rt:
        entries = [e async for e in rt.history("survey")]
        assert [e.seq for e in entries] == list(range(1, state.last_seq + 1))
        assert entries[0].kind == Kind.STARTED and "stdlib-survey" in entries[0].summary and entries[0].payload is None
        assert all(before - 1 <= e.at <= time.time() + 1 for e in entries)
        asked = entries[-1]
        assert asked.kind == Kind.APPROVAL_REQUESTED and "publish_report(" in asked.summary
        results = [e async for e in rt.history("survey", kinds=["tool_result"], after_seq=3, payload=True)]
        assert results and all(e.kind == "tool_result" and e.seq > 3 and e.payload["key"] for e in results)
        assert results[0].to_json()["payload"] == results[0].payload
        with pytest.raises(InvalidCommandError, match="unknown record kind 'nope'"):
            [e async for e in rt.history("survey", kinds=["nope"])]
        with pytest.raises(InvalidCommandError):
            [e async for e in rt.history("survey", after_seq=-1)]
        with pytest.raises(AgentNotFoundError):
            [e async for e in rt.history("ghost")]


async def test_history_streams_100k_records_with_flat_memory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'long.db'}"
    total = 100_000
    async with Runtime(url) as rt:
        codec, stream = RecordCodec(), rt.stream("long")
        start = {
            "namespace": "default",
            "agent_id": "long",
            "run_id": "r" * 32,
            "task": "t",
            "definition": {"name": "d", "version": "1", "digest": "0" * 16},
            "instructions": "",
            "budget": {"steps": None, "tokens": None, "cost_usd": None},
            "worker": "w",
        }
        seq = 0
        while seq < total:
            frames = []
            for _ in range(2000):
                seq += 1
                kind, data = (
                    (Kind.STARTED, start)
                    if seq == 1
                    else (Kind.MESSAGE_RECEIVED, {"role": "user", "content": f"m{seq} " * 8})
                )
                frames.append(codec.encode_record(Record(seq, kind, data, 1.0 + seq), stream))
            await rt.store.append(stream, seq - len(frames), frames)
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            count = last = 0
            async for entry in rt.history("long", payload=True):
                count, last = count + 1, entry.seq
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
    assert (count, last) == (total, total)
    # Holding the entries would take ~100 MB; a page of 512 decoded records is a few hundred KB.
    assert peak < 8 * 2**20, f"history held {peak / 2**20:.1f} MiB"


async def test_state_at_is_the_fold_of_the_records_up_to_that_seq(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    state = await parked_survey(url, tmp_path / "work")
    async with Runtime(url) as rt:
        assert (await rt.store.get_snapshot(rt.stream("survey"))) is not None  # restore starts from one
        folded = AgentState()
        async for stored, record in JournalReader(rt.store, rt.codec, rt.stream("survey")).rows():
            apply(folded, record)
            at = await rt.state_at("survey", stored.seq)
            assert at.to_wire() == folded.to_wire(), stored.seq
        assert (await rt.state_at("survey", state.last_seq)).to_wire() == state.to_wire()
        for bad in (0, state.last_seq + 1, "3"):
            with pytest.raises(SeqOutOfRangeError):
                await rt.state_at("survey", bad)
        with pytest.raises(AgentNotFoundError):
            await rt.state_at("ghost", 1)


async def test_a_fork_copies_the_history_leaves_the_source_alone_and_runs_anew(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    url = f"sqlite:///{path}"
    effects: list = []
    agent = list_agent(3, effects)
    async with Runtime(url, agents=[agent]) as rt:
        source = await rt.run(agent, "src", "count")
    assert source.status == "finished" and len(effects) == 3
    source_rows = await anyio.to_thread.run_sync(rows, path)
    async with Runtime(url, agents=[agent]) as rt:
        # seq 5 is the first call's result: the fork goes on from the second model turn.
        records = [e async for e in rt.history("src", payload=True)]
        at = next(e.seq for e in records if e.kind == Kind.TOOL_RESULT)
        fork = await rt.fork("src", at, "fork-1")
        assert fork.status == "running" and fork.agent_id == "fork-1" and fork.run_id != source.run_id
        assert fork.forked_from == {"namespace": "default", "agent_id": "src", "run_id": source.run_id, "seq": at}
        forked = [e async for e in rt.history("fork-1", payload=True)]
        assert [e.kind for e in forked[:-1]] == [e.kind for e in records[:at]] and forked[-1].kind == Kind.FORKED
        assert [e.at for e in forked[:-1]] == [e.at for e in records[:at]]  # the copy keeps the times
        with pytest.raises(AgentExistsError):
            await rt.fork("src", at, "fork-1")
        with pytest.raises(SeqOutOfRangeError):
            await rt.fork("src", source.last_seq + 1, "fork-2")
        with anyio.fail_after(20):
            serving = anyio.create_task_group()
            async with serving:
                serving.start_soon(rt.serve, 0.05)
                done = await rt.wait("fork-1", until="finished", timeout=15)
                serving.cancel_scope.cancel()
    assert done.status == "finished" and done.forked_from["seq"] == at
    assert await anyio.to_thread.run_sync(rows, path) != source_rows
    after = [r for r in await anyio.to_thread.run_sync(rows, path) if r[1] == "src"]
    assert after == [r for r in source_rows if r[1] == "src"]  # the source is never written
    # The calls after the fork ran again, under new keys; the one before it was not repeated.
    source_keys = [key for key, _ in effects[:3]]
    fork_effects = effects[3:]
    assert [n for _, n in fork_effects] == [2, 3]
    assert not {key for key, _ in fork_effects} & set(source_keys)


@pytest.mark.parametrize("policy, expected", [("retry", "finished"), ("fail", "failed")])
async def test_a_fork_at_an_intent_without_result_follows_the_tool_policy(tmp_path: Path, policy, expected) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    effects: list = []
    agent = list_agent(2, effects, policy=policy)
    async with Runtime(url, agents=[agent]) as rt:
        await rt.run(agent, "src", "count")
        intent = [e async for e in rt.history("src", payload=True) if e.kind == Kind.TOOL_INTENT][0]
        fork = await rt.fork("src", intent.seq, "fork")
        assert fork.ledger[intent.payload["key"]]["done"] is False
        handle = await rt.resume("fork")
        state = await handle.wait()
    assert state.status == expected, state.reason
    if policy == "retry":  # run again with the same key: an external system deduplicates it
        assert effects[2] == (intent.payload["key"], 1)


async def test_describe_names_the_lease_holder_times_approvals_and_budget(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    state = await parked_survey(url, tmp_path / "work")
    async with Runtime(url) as rt:
        info = await rt.describe("survey")
        assert (info.status, info.seq, info.steps, info.definition["name"]) == (
            "waiting_approval",
            state.last_seq,
            state.usage["steps"],
            "stdlib-survey",
        )
        assert info.definition["digest"] and info.created_at <= info.last_activity_at <= time.time()
        (approval,) = info.open_approvals
        assert approval["tool"] == "publish_report" and "title" in approval["arguments"]
        assert info.pending_calls[0]["tool"] == "publish_report" and not info.pending_calls[0]["started"]
        assert info.leases_supported and info.lease is None and info.forked_from is None
        assert set(info.budget_left) == {"steps", "tokens", "cost_usd"}
        shape = info.to_json()
        assert "state" not in shape and shape["lease"] is None and shape["agent_id"] == "survey"
        # A runtime holding the lease is named, with its expiry.
        claim, _ = await rt._activations.leases.claim_or_holder(rt.stream("survey"))
        assert claim is not None and claim.lease is not None
        held = await rt.describe("survey")
        assert (
            held.lease.owner == claim.lease.owner == rt._activations.leases.owner
            and held.lease.expires_at > time.time()
        )
        assert held.lease.dead is False
        assert [d.agent_id for d in await rt.describe_all()] == ["survey"]
        with pytest.raises(AgentNotFoundError):
            await rt.describe("ghost")


async def test_wait_and_watch_follow_an_agent_run_by_another_process(tmp_path: Path) -> None:
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"
    argv = [sys.executable, str(WORKER), "--db", str(db), "--effects", str(effects), "--approval"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert first.returncode == 0, first.stderr
    async with Runtime(f"sqlite:///{db}") as rt:
        parked = await rt.wait("a1", timeout=5)
        assert parked.status == "waiting_approval"
        with pytest.raises(WaitTimeoutError) as caught:
            await rt.wait("a1", until="finished", timeout=0.3)
        assert caught.value.state.status == "waiting_approval"
        with pytest.raises(InvalidCommandError):
            await rt.wait("a1", until="done")
        seen = []

        async def follow() -> None:
            async for change in rt.watch("a1", poll_interval=0.05):
                seen.append(change)
                if change.event == "finished":
                    return

        namespace_seen = []

        async def follow_namespace() -> None:
            async for change in rt.watch_namespace(poll_interval=0.05):
                namespace_seen.append(change)
                if change.event == "finished":
                    return

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                tg.start_soon(follow_namespace)
                await anyio.sleep(0.3)
                # Each approval is given by this process; another process runs the agent on.
                for _ in range(2):
                    state = await rt.wait("a1", timeout=30)
                    if state.status != "waiting_approval":
                        break
                    await rt.approve("a1", state.open_approvals()[0]["approval_id"], by="test")
                    run = await anyio.run_process(argv, check=True)
                    assert b"status" in run.stdout
    events = [c.event for c in seen]
    assert events[:2] == ["approval_decided", "resumed"] and "approval_requested" in events and events[-1] == "finished"
    assert seen[-1].status == "finished" and all(c.agent_id == "a1" for c in seen)
    assert [c.event for c in namespace_seen] == events
