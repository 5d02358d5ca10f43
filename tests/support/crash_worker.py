"""A worker process for the crash tests: runs N agents of S steps on a SQLite
file and SIGKILLs itself at one named boundary.

Boundaries (``--crash NAME --at K``, K counts occurrences in this process):
  before_intent   a tool_intent append is about to be committed
  before_effect   the intent is durable, the tool has not acted yet
  after_effect    the tool acted, its result is not journaled
  result_staged   its result is staged (folded, in the next model call's view), not durable
  model_answered  the model answered; its response and intents (with the staged result,
                  unless that was committed while the model thought) are about to be committed
  after_result    a commit holding a tool_result was acknowledged
  snapshot        as SQLite starts writing a snapshot, before it commits
  group_commit    as SQLite starts writing a group commit's records, before it commits

``--think S``: the model takes S seconds per answer (it waits), so a staged
result is committed while it thinks instead of with its answer.

Every acknowledged append is logged to ``--acks`` (fsynced) with a digest of
each frame, so the test can check no acknowledged record was lost.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import append_line, file_agent

from durably import AgentExistsError, Runtime, SnapshotPolicy
from durably._journal.writer import AgentJournal
from durably.schemas._records import Kind
from durably.storage._group_commit import GroupCommitter

counts: dict[str, int] = {}
acked: list[int] = []  # seqs acknowledged so far in this process
args: argparse.Namespace


def hit(boundary: str) -> None:
    """Count an occurrence of ``boundary``; die at the K-th one if it is the chosen one."""
    counts[boundary] = counts.get(boundary, 0) + 1
    if args.crash == boundary and counts[boundary] == args.at:
        os.kill(os.getpid(), signal.SIGKILL)


def install_hooks() -> None:
    original_append = AgentJournal.append

    async def append(self, *entries):
        kinds = {kind for kind, _ in entries}
        if Kind.TOOL_INTENT in kinds:
            hit("before_intent")
        if Kind.MODEL_RESPONDED in kinds:
            hit("model_answered")
        await original_append(self, *entries)

    AgentJournal.append = append

    original_stage = AgentJournal.stage

    def stage(self, entry):
        original_stage(self, entry)
        hit("result_staged")

    AgentJournal.stage = stage

    original_append_once = AgentJournal._append_once

    async def append_once(self, entries):
        results = self.staged or any(kind == Kind.TOOL_RESULT for kind, _ in entries)
        await original_append_once(self, entries)
        if results:
            hit("after_result")

    AgentJournal._append_once = append_once

    original_commit_append = GroupCommitter.append

    async def committer_append(self, stream, expected_seq, records, index=None, *, fence=None):
        seq = await original_commit_append(self, stream, expected_seq, records, index=index, fence=fence)
        for offset, frame in enumerate(records, start=1):
            line = {"agent": stream.agent_id, "seq": expected_seq + offset, "sha": hashlib.sha256(frame).hexdigest()}
            append_line(Path(args.acks), line)
        acked.append(seq)
        return seq

    GroupCommitter.append = committer_append

    # Inside SQLite itself: the trace callback runs as a statement starts, on
    # aiosqlite's thread, so dying there leaves the transaction uncommitted.
    original_connect = sqlite3.connect

    def connect(*args, **kwargs):
        connection = original_connect(*args, **kwargs)

        def trace(statement: str) -> None:
            text = statement.lstrip().upper()
            if not acked:
                return  # count from the first acknowledged append, whatever the adapter's statements
            if text.startswith("INSERT INTO SNAPSHOTS"):
                hit("snapshot")
            elif text.startswith("INSERT INTO RECORDS"):
                hit("group_commit")

        connection.set_trace_callback(trace)
        return connection

    sqlite3.connect = connect


async def main() -> None:
    effects = Path(args.effects)

    def on_effect(phase: str, n: int) -> None:
        hit(f"{phase}_effect")

    definition = file_agent(args.steps, effects, on_effect=on_effect, per_turn=args.per_turn, think_s=args.think)
    policy = SnapshotPolicy(every_records=4, tail_ratio=0.0)
    results: dict[str, dict] = {}
    async with Runtime(f"sqlite:///{args.db}", agents=[definition], snapshot_policy=policy) as rt:

        async def run_one(agent_id: str) -> None:
            try:
                handle = await rt.start(definition, agent_id, "count")
            except AgentExistsError:
                handle = await rt.resume(agent_id)
            state = await handle.wait() if handle else await rt.status(agent_id)
            results[agent_id] = {"status": state.status, "result": state.result, "reason": state.reason}

        async with anyio.create_task_group() as tg:
            for i in range(args.agents):
                tg.start_soon(run_one, f"agent-{i}")
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--acks", required=True)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--per-turn", type=int, default=1)  # tool calls per model turn, run concurrently
    parser.add_argument("--think", type=float, default=0.0)  # seconds the model takes per answer
    parser.add_argument("--crash")
    parser.add_argument("--at", type=int, default=1)
    args = parser.parse_args()
    install_hooks()
    anyio.run(main)
