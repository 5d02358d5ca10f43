"""One worker process under torture: runs its agents to the end, or SIGKILLs itself at a boundary.

``process_main(spec, error_path)`` (or ``python -m durably._torture.worker SPEC``,
SPEC as JSON): the store URL (and optionally the adapter class, as module and
qualified name, for one no entry point names), the environment, the ledger directory, the worker's id, the agents (id and tool
policy), steps per agent, the snapshot policy, the lease ttl, and the crash
plan (``boundary`` and ``at``: die at the ``at``-th occurrence of that
boundary in this process; none: run to the end). It starts the agents that do
not exist yet, resumes the others (an explicit resume takes over an agent whose
lease holder is a dead process at once; a live worker's agents are left to it,
and only their leases are read until that worker is gone)
and exits 0 once every agent has stopped for good, printing their states.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import anyio

from durably._fleet.owner import LeaseHolder, Liveness
from durably._journal.snapshots import SnapshotPolicy
from durably._loop.state import TERMINAL
from durably._runtime import Runtime
from durably._torture.agents import NAMESPACE, definition_name, torture_definitions
from durably._torture.ledgered_store import LedgeredStore
from durably.errors import AgentExistsError, AgentFencedError, AgentLeasedError, AgentNotFoundError
from durably.storage._errors import StoreUnavailableError
from durably.storage._registry import open_store
from durably.storage._torture import Ledger
from durably.storage._torture.spawn import load_class

#: Seconds before a worker looks again at an agent another live worker runs.
POLL = 0.2


async def wait_while_held(rt: Runtime, agent_id: str) -> LeaseHolder | None:
    """Wait while a live runtime holds ``agent_id``'s lease; return the holder last read.

    One lease read a look (``Runtime.lease_holder``), not a restore of the
    agent and a claim: a worker may wait here for most of a run, and on a
    remote store (S3) a restore is several requests. Returns a dead holder
    (the caller's resume takes its lease at once) or None: nobody holds it
    (released or lapsed: the agent ended, parked, or was never started; a
    store without leases) or the store blinked.
    """
    while True:
        try:
            holder = await rt.lease_holder(agent_id)
        except StoreUnavailableError:
            return None
        if holder is None or holder.liveness is Liveness.DEAD:
            return holder
        await anyio.sleep(POLL)


class Boundaries:
    """Counts boundaries as they are hit; SIGKILLs this process at the planned occurrence."""

    def __init__(self, boundary: str | None, at: int) -> None:
        self.boundary = boundary
        self.at = at
        self.counts: dict[str, int] = {}

    def hit(self, boundary: str) -> None:
        self.counts[boundary] = self.counts.get(boundary, 0) + 1
        if boundary == self.boundary and self.counts[boundary] == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


async def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec``'s agents until each is finished, failed or cancelled; return their final states."""
    plan = Boundaries(spec.get("boundary"), spec.get("at", 0))
    ledger = Path(spec["ledger"])
    effects, acks = Ledger(ledger / "effects.jsonl"), Ledger(ledger / "acks.jsonl")
    definitions = torture_definitions(spec["steps"], effects, plan.hit)
    policy = SnapshotPolicy(every_records=spec["snapshot_every"], tail_ratio=0.0, compact=spec["compact"])
    inner = load_class(*spec["store_class"])(spec["store"]) if spec.get("store_class") else open_store(spec["store"])
    store = LedgeredStore(inner, acks, spec["worker"], plan.hit)
    final: dict[str, Any] = {}
    async with (
        store,
        Runtime(
            store, agents=definitions, namespace=NAMESPACE, snapshot_policy=policy, lease_ttl=spec["lease_ttl"]
        ) as rt,
    ):
        # The runtime's own owner identity (host:pid): a killed worker's leases are then seen as a
        # dead local holder's, taken over at once by an explicit resume instead of after their ttl.

        async def drive(agent_id: str, tool_policy: str) -> None:
            while True:
                # The lease first: an agent a live worker runs needs no restore here until that
                # worker is gone, and a dead worker's is resumed at once (the resume's restore is
                # the only one). Restores are most of a run's requests on a remote store.
                if await wait_while_held(rt, agent_id) is None:  # nobody runs it
                    try:
                        state = await rt.status(agent_id)
                    except AgentNotFoundError:
                        try:
                            await (await rt.start(definition_name(tool_policy), agent_id, "count to the end")).wait()
                        except (AgentExistsError, AgentFencedError, StoreUnavailableError):
                            pass  # another worker started it first, or the store blinked: look again
                        continue
                    if state.status in TERMINAL:
                        final[agent_id] = {"status": state.status, "result": state.result, "reason": state.reason}
                        return
                try:
                    handle = await rt.resume(agent_id)
                    if handle is not None:
                        await handle.wait()
                        continue
                except AgentLeasedError:
                    continue  # a live worker took it meanwhile: wait on its lease
                except AgentNotFoundError:
                    continue  # its dead holder died starting it: nothing journaled yet, start it
                except (AgentFencedError, StoreUnavailableError):
                    pass  # another worker just took it over, or the store blinked: look again in a while
                await anyio.sleep(POLL)

        async with anyio.create_task_group() as group:
            for agent_id, tool_policy in spec["agents"].items():
                group.start_soon(drive, agent_id, tool_policy)
    return final


def process_main(spec: dict[str, Any], error_path: str) -> None:
    """A worker process's entry (``multiprocessing``): run ``spec``; on an error, its traceback to ``error_path``."""
    # Fenced agents and lost leases are the point of the exercise here, not news.
    logging.getLogger("durably").setLevel(logging.ERROR)
    # The fork server started with the environment of its day; the worker gets today's (credentials...).
    os.environ.clear()
    os.environ.update(spec["environ"])
    try:
        anyio.run(run_worker, spec)
    except BaseException:
        Path(error_path).write_text(traceback.format_exc())
        raise


if __name__ == "__main__":
    print(json.dumps(anyio.run(run_worker, json.loads(sys.argv[1]))), flush=True)
