"""A worker process for the two-process S3 tests: runs N agents of S steps on an
``s3://`` store, and either SIGKILLs itself at a named boundary or holds at one
until the test lets it go on.

Boundaries (``--crash NAME --at K``, K counts occurrences in this process):
  before_intent   a tool_intent append is about to be committed
  before_effect   the intent is durable, the tool has not acted yet
  after_effect    the tool acted, its result is not journaled
  after_result    a commit holding a tool_result was acknowledged
  put_landed      a record batch's conditional PUT is on S3, its append is not
                  acknowledged yet (other streams' PUTs of the same group
                  commit may still be in flight)
  snapshot        a snapshot upload is about to start (in the background writer)

Hold (``--hold model|tool --hold-at K``): at the K-th model call (before the
model answers) or the K-th tool call (after its side effect, before its result
is journaled), wait until no snapshot upload is pending or in flight, print
``HELD`` on stdout and block until a line arrives on stdin. The test freezes
the process there (SIGSTOP), lets another worker take the agent over, then
releases and continues it: it must find itself fenced.

Every acknowledged append is logged to ``--acks`` (fsynced) with a digest of
each frame. The last stdout line is JSON: per agent, its status, result and
reason, or ``{"status": "fenced", ...}`` when another writer took it over.
Credentials come from the environment (botocore's chain).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from support_agents import StepModel, append_line, read_lines

from durably import (
    AgentDefinition,
    AgentExistsError,
    AgentFencedError,
    AgentLeasedError,
    AgentLeaseLostError,
    ModelResponse,
    Reconciled,
    Runtime,
    SnapshotPolicy,
    tool,
)
from durably._journal.snapshots import SnapshotWriter
from durably._journal.writer import AgentJournal
from durably.adapters.s3 import S3Store
from durably.schemas._records import Kind
from durably.storage._group_commit import GroupCommitter

counts: dict[str, int] = {}
snapshot_writers: list[SnapshotWriter] = []
args: argparse.Namespace


def hit(boundary: str) -> None:
    """Count an occurrence of ``boundary``; die at the K-th one if it is the chosen one."""
    counts[boundary] = counts.get(boundary, 0) + 1
    if args.crash == boundary and counts[boundary] == args.at:
        os.kill(os.getpid(), signal.SIGKILL)


async def hold(phase: str, agent_id: str) -> None:
    """Block at the ``--hold-at``-th occurrence of ``phase`` until the test writes a line to stdin."""
    key = f"hold:{phase}"
    counts[key] = counts.get(key, 0) + 1
    if args.hold != phase or counts[key] != args.hold_at:
        return
    # Nothing of ours may still be on its way to the bucket while we are frozen,
    # so that whatever reaches it after the release is our next append alone.
    for writer in snapshot_writers:
        await writer.flush()
    print("HELD " + json.dumps({"phase": phase, "agent": agent_id, "pid": os.getpid()}), flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)


class HoldingModel(StepModel):
    """``StepModel`` that may hold at its K-th call, before it answers (a slow model call)."""

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        await hold("model", "")
        return await super().respond(messages, tools)


def effects_agent(steps: int, effects: Path) -> AgentDefinition:
    """An agent whose tool 'sends' by appending a line to ``effects``; reconciles by key on an unknown outcome."""

    async def sent(ctx) -> Reconciled | None:
        found = [e for e in await anyio.to_thread.run_sync(read_lines, effects) if e["key"] == ctx.idempotency_key]
        return Reconciled(found[0]["n"] * 10) if found else None

    @tool(name="effect", on_unknown_outcome="reconcile", reconcile=sent)
    async def effect(n: int, *, ctx) -> int:
        hit("before_effect")
        line = {"key": ctx.idempotency_key, "n": n, "agent": ctx.agent_id, "pid": os.getpid()}
        await anyio.to_thread.run_sync(append_line, effects, line)
        hit("after_effect")
        await hold("tool", ctx.agent_id)
        return n * 10

    return AgentDefinition(name="s3-effects-agent", model=HoldingModel(steps), tools=[effect])


def install_hooks() -> None:
    """Wrap the runtime and adapter at the boundaries above, and log acknowledged appends."""
    original_append = AgentJournal.append

    async def append(self, *entries):
        kinds = {kind for kind, _ in entries}
        if Kind.TOOL_INTENT in kinds:
            hit("before_intent")
        await original_append(self, *entries)

    AgentJournal.append = append

    # A staged tool result is committed by a later append (one commit per step): the
    # boundary is a commit holding a result, whatever append carried it.
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
        return seq

    GroupCommitter.append = committer_append

    original_put_batch = S3Store._put_batch

    async def put_batch(self, *a, **kw):
        etag = await original_put_batch(self, *a, **kw)
        hit("put_landed")
        return etag

    S3Store._put_batch = put_batch

    original_put_snapshot = S3Store.put_snapshot

    async def put_snapshot(self, stream, seq, data, *, fence=None):
        hit("snapshot")
        await original_put_snapshot(self, stream, seq, data, fence=fence)

    S3Store.put_snapshot = put_snapshot

    original_writer_init = SnapshotWriter.__init__

    def writer_init(self, *a, **kw):
        original_writer_init(self, *a, **kw)
        snapshot_writers.append(self)

    SnapshotWriter.__init__ = writer_init


async def main() -> None:
    definition = effects_agent(args.steps, Path(args.effects))
    policy = SnapshotPolicy(every_records=args.snapshot_every, tail_ratio=0.0)
    results: dict[str, dict] = {}
    async with Runtime(args.store, agents=[definition], snapshot_policy=policy, lease_ttl=args.lease_ttl) as rt:

        async def run_one(agent_id: str) -> None:
            try:
                try:
                    handle = await rt.start(definition, agent_id, "count")
                except AgentExistsError:
                    # A live (e.g. paused) holder's lease must lapse before we may take over.
                    with anyio.fail_after(60):
                        while True:
                            try:
                                handle = await rt.resume(agent_id)
                                break
                            except AgentLeasedError:
                                await anyio.sleep(0.2)
                state = await handle.wait() if handle else await rt.status(agent_id)
            except (AgentFencedError, AgentLeaseLostError) as exc:
                # Another worker owns the agent now: stop it here, write nothing more.
                results[agent_id] = {"status": "fenced", "error": str(exc)}
                return
            results[agent_id] = {
                "status": state.status,
                "result": state.result,
                "reason": state.reason,
                "last_seq": state.last_seq,
            }

        async with anyio.create_task_group() as tg:
            for i in range(args.agents):
                tg.start_soon(run_one, f"agent-{i}")
    for agent_id, outcome in sorted(results.items()):
        if outcome["status"] == "fenced":
            print(f"{agent_id} fenced: {outcome['error']}", flush=True)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True, help="s3://bucket/prefix?endpoint_url=...&path_style=1")
    parser.add_argument("--effects", required=True)
    parser.add_argument("--acks", required=True)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--snapshot-every", type=int, default=4)
    parser.add_argument("--crash")
    parser.add_argument("--at", type=int, default=1)
    parser.add_argument("--hold", choices=["model", "tool"])
    parser.add_argument("--hold-at", type=int, default=1)
    parser.add_argument(
        "--lease-ttl", type=float, default=2.0, help="seconds; short, so a paused worker's lease lapses"
    )
    args = parser.parse_args()
    install_hooks()
    anyio.run(main)
