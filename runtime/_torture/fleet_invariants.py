"""The fleet judge: the invariants of a fleet torture run, from the external ledgers and the final states.

* **No two activations of one agent overlap.** Every append a worker got
  acknowledged is in the acknowledgement ledger with the fencing token it
  carried; in seq order an agent's tokens never go down (a record accepted from
  an activation after a later activation's first record is an overlap), every
  append is fenced, and every token was granted (grants ledger) to the process
  that used it, and to that process only.
* **Every effect exactly once.** No idempotency key twice in the effects
  ledger, and a finished agent made each of its effects. One case is told
  apart: a worker paused (SIGSTOP) after its last lease check and before its
  effect wakes past its lease and makes the effect a second time, after the new
  holder reconciled and made it. No worker-side check can close that window
  (the pause may land between any check and the act); the resource must, by the
  call's idempotency key (the same on both runs, as a payment API dedupes it) or
  by the fencing token. Such a run is a *replay* the key absorbs, counted and
  reported; a key twice with no pause of the later run's process is a violation.
* **Every acknowledged approval acted on.** Each approval the operator got
  acknowledged is decided (approved) in the agent's final state, which finished.
* **Nothing stuck.** Every agent finished, with the result of an uninterrupted run.
* **No worker exited** but those the chaos loop stopped (checked by the harness).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
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


def check_effects_once(
    effects: list[dict[str, Any]],
    states: dict[str, AgentState],
    steps: int,
    stops: Sequence[dict[str, Any]] = (),
) -> tuple[list[str], int]:
    """Violations of "every effect exactly once" (a key twice, or a finished agent missing one),
    and the count of replays: a key made again by another process, one of the two having been
    paused by the chaos loop (``stops``: its ``{"pid", ...}`` entries), the window only the key
    closes. (Which of the two ran second is not told by their clocks: the paused one took its
    time stamp before the pause.)"""
    violations, replays = [], 0
    paused = {stop["pid"] for stop in stops}
    by_key: dict[str, list[dict[str, Any]]] = {}
    for effect in effects:
        by_key.setdefault(effect["key"], []).append(effect)
    for key, runs in by_key.items():
        pids = [run.get("pid") for run in runs]
        if len(runs) == 1:
            continue
        if len(runs) == 2 and pids[0] != pids[1] and paused & set(pids):
            replays += 1
        else:
            violations.append(f"effect {key} happened {len(runs)} times")
    per_agent = Counter(e["agent"] for e in {e["key"]: e for e in effects}.values())
    for agent, state in states.items():
        if state.status == FINISHED and per_agent[agent] != steps:
            violations.append(f"{agent}: finished with {per_agent[agent]} effects, not {steps}")
    return violations, replays


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
