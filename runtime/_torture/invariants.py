"""The judge: the invariants of a torture run, checked from the external ledgers and the store.

* **Equal to an uninterrupted run**: a ``reconcile`` agent ends ``finished`` with
  the result of a run that was never killed; a ``fail`` agent ends so too, or
  ``failed`` because a call's outcome was unknown after a crash (its policy).
* **No duplicate effect**: no idempotency key twice in the effects ledger, under
  either policy; and a finished agent's every call took effect exactly once.
* **No acknowledged record lost**: every record in the acknowledgement ledger is
  stored byte-identical, unless compaction deleted it behind a snapshot that
  covers it.
* **Nothing stuck**: every agent reached a terminal status (checked by the
  harness: a final worker that is never killed must end them all, in time).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from durably._loop.state import FAILED, FINISHED, AgentState
from durably.storage._spi import Store, StreamId


def expected_result(steps: int) -> str:
    """The result of an uninterrupted run of the scripted model (see ``agents.ScriptedModel``)."""
    return f"done {[n * 10 for n in range(1, steps + 1)]}"


def check_states(states: dict[str, AgentState], policies: dict[str, str], steps: int) -> list[str]:
    """Violations of "equal to an uninterrupted run" and "nothing stuck" among the final ``states``."""
    violations = []
    for agent_id, policy in policies.items():
        state = states.get(agent_id)
        if state is None:
            violations.append(f"{agent_id}: no journal at the end of the run")
            continue
        if state.status == FINISHED and state.result == expected_result(steps):
            continue
        if policy == "fail" and state.status == FAILED and "outcome unknown after a crash" in state.reason:
            continue  # the fail policy at work: it refuses to guess
        violations.append(
            f"{agent_id} ({policy}): ended {state.status} {state.result!r} {state.reason!r}, "
            f"not as an uninterrupted run ({expected_result(steps)!r})"
        )
    return violations


def check_effects(effects: list[dict[str, Any]], states: dict[str, AgentState], steps: int) -> list[str]:
    """Violations of "no duplicate effect" (any key twice) and, for finished agents, "exactly once"."""
    violations = [
        f"effect {key} happened {count} times" for key, count in Counter(e["key"] for e in effects).items() if count > 1
    ]
    per_agent = Counter(e["agent"] for e in effects)
    for agent_id, state in states.items():
        if state.status == FINISHED and per_agent[agent_id] != steps:
            violations.append(f"{agent_id}: finished with {per_agent[agent_id]} effects, not {steps}")
    return violations


async def check_acknowledged(store: Store, namespace: str, acks: list[dict[str, Any]]) -> list[str]:
    """Violations of "no acknowledged record lost": each ledger record stored byte-identical (or compacted)."""
    violations = []
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for entry in acks:
        by_agent.setdefault(entry["agent"], []).append(entry)
    for agent_id, entries in by_agent.items():
        stream = StreamId(namespace, agent_id)
        stored = {r.seq: hashlib.sha256(r.data).hexdigest() async for r in store.read(stream)}
        lowest = min(stored, default=None)
        snapshot = await store.get_snapshot(stream)
        for entry in entries:
            for offset, digest in enumerate(entry["sha"]):
                seq = entry["first"] + offset
                found = stored.get(seq)
                if found == digest:
                    continue
                compacted = (
                    found is None and (lowest is None or seq < lowest) and snapshot is not None and snapshot.seq >= seq
                )
                if not compacted:
                    what = "missing" if found is None else "altered"
                    violations.append(f"{agent_id} seq {seq}: acknowledged to {entry['worker']}, now {what}")
    return violations


def count_takeovers(acks: list[dict[str, Any]]) -> int:
    """How often an agent's next acknowledged append came from another worker slot than its previous one.

    Worker ids are ``w<slot>.<incarnation>``: a restart in the same slot is not a takeover.
    """
    last: dict[str, str] = {}
    takeovers = 0
    for entry in acks:
        slot = entry["worker"].split(".", 1)[0]
        previous = last.get(entry["agent"])
        if previous is not None and previous != slot:
            takeovers += 1
        last[entry["agent"]] = slot
    return takeovers
