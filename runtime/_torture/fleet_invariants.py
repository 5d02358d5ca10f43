"""The fleet judge: the invariants of a fleet torture run, from the external ledgers and the final states.

* **No two activations of one agent overlap.** Every append a worker got
  acknowledged is in the acknowledgement ledger with the fencing token it
  carried; in seq order an agent's tokens never go down (a record accepted from
  an activation after a later activation's first record is an overlap), every
  append is fenced, and every token was granted (grants ledger) to the process
  that used it, and to that process only.
* **Every effect exactly once.** No idempotency key twice in the effects
  ledger, and a finished agent made each of its effects.
* **Every acknowledged approval acted on.** Each approval the operator got
  acknowledged is decided (approved) in the agent's final state, which finished.
* **Nothing stuck.** Every agent finished, with the result of an uninterrupted run.
* **No worker exited** but those the chaos loop stopped (checked by the harness).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from durably._loop.state import FINISHED, AgentState


def check_activations(acks: list[dict[str, Any]], grants: list[dict[str, Any]]) -> list[str]:
    """Violations of "no two activations of one agent overlap", from the acknowledgement and grant ledgers."""
    violations = []
    granted: dict[tuple[str, int], set[int]] = {}
    for grant in grants:
        if grant["kind"] == "grant":
            granted.setdefault((grant["agent"], grant["token"]), set()).add(grant["pid"])
    for (agent, token), pids in granted.items():
        if len(pids) > 1:
            violations.append(f"{agent}: token {token} granted to {len(pids)} processes {sorted(pids)}")
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for entry in acks:
        by_agent.setdefault(entry["agent"], []).append(entry)
    for agent, entries in by_agent.items():
        highest: dict[str, Any] | None = None
        for entry in sorted(entries, key=lambda e: e["first"]):
            fence = entry.get("fence")
            if fence is None:
                violations.append(f"{agent} seq {entry['first']}: appended by {entry['worker']} without a fence")
                continue
            if entry.get("pid") not in granted.get((agent, fence), set()):
                violations.append(
                    f"{agent} seq {entry['first']}: token {fence} used by a process it was not granted to"
                )
            if highest is not None and fence < highest["fence"]:
                violations.append(
                    f"{agent} seq {entry['first']}: accepted from token {fence} ({entry['worker']}) after seq "
                    f"{highest['first']} of the later token {highest['fence']} ({highest['worker']}): overlap"
                )
            if highest is None or fence > highest["fence"]:
                highest = entry
    return violations


def check_effects_once(effects: list[dict[str, Any]], states: dict[str, AgentState], steps: int) -> list[str]:
    """Violations of "every effect exactly once": a key twice, or a finished agent missing one."""
    violations = [f"effect {key} happened {n} times" for key, n in Counter(e["key"] for e in effects).items() if n > 1]
    per_agent = Counter(e["agent"] for e in effects)
    for agent, state in states.items():
        if state.status == FINISHED and per_agent[agent] != steps:
            violations.append(f"{agent}: finished with {per_agent[agent]} effects, not {steps}")
    return violations


def check_approvals(approvals: list[dict[str, Any]], states: dict[str, AgentState]) -> list[str]:
    """Violations of "every acknowledged approval acted on": an approval not decided, or its agent not finished."""
    violations = []
    for entry in approvals:
        state = states.get(entry["agent"])
        if state is None:
            violations.append(f"{entry['agent']}: approval {entry['approval']} acknowledged, the agent is gone")
            continue
        decision = state.approvals.get(entry["approval"], {}).get("decision")
        if not decision or not decision.get("approved"):
            violations.append(f"{entry['agent']}: approval {entry['approval']} acknowledged, not in its journal")
        elif state.status != FINISHED:
            violations.append(f"{entry['agent']}: approval {entry['approval']} acknowledged, agent {state.status}")
    return violations


def check_finished(states: dict[str, AgentState], agents: list[str], expected: str) -> list[str]:
    """Violations of "nothing stuck": an agent not finished with ``expected`` as its result."""
    violations = []
    for agent in agents:
        state = states.get(agent)
        if state is None:
            violations.append(f"{agent}: no journal at the end of the run")
        elif state.status != FINISHED or state.result != expected:
            violations.append(f"{agent}: ended {state.status} {state.result!r} {state.reason!r}, not {expected!r}")
    return violations
