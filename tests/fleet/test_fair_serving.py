"""Serving workers share the agents instead of the first scan taking them all.

Three worker processes serve one store with ``max_agents=4``; twelve runnable
agents end up spread over all three (without a share, one worker of eight took
969 of 1,000 tool effects). ``FairShare`` alone (no cap) splits what it has seen evenly.
"""

from __future__ import annotations

import signal
from collections import Counter

from serve_worker import slow_file_agent
from support_agents import read_lines
from test_dead_holders import spawn, until

from durably import Runtime


async def test_three_serving_workers_split_twelve_agents(tmp_path):
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"
    definition = slow_file_agent(4, effects, 0.2)
    async with Runtime(f"sqlite:///{db}", agents=[definition]) as setup:
        for i in range(12):
            await setup.start(definition, f"agent-{i}", "count")
        await setup.drain(0)  # stop them at once: runnable, and nobody runs them
    workers = [spawn(db, effects, "--steps", "4", "--step-seconds", "0.2", "--max-agents", "4") for _ in range(3)]
    try:
        await until(
            lambda: (
                len({e["agent"] for e in read_lines(effects) if e["phase"] == "done" and e["n"] == 4}) == 12
                or any(w.poll() is not None for w in workers)
            ),
            timeout=60,
        )
        assert all(w.poll() is None for w in workers), [w.stderr.read() for w in workers if w.poll() is not None]
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    ran_by: dict[str, int] = {}
    for e in read_lines(effects):
        if e["phase"] == "start" and e["pid"] in {w.pid for w in workers}:
            ran_by.setdefault(e["agent"], e["pid"])
    per_worker = Counter(ran_by.values())
    assert len(per_worker) == 3 and min(per_worker.values()) >= 2, per_worker  # main: one worker took them


def test_fair_share_splits_what_it_has_seen():
    from durably._fleet.scan import FairShare, ScanResult

    fair = FairShare()
    assert fair.limit(0) == 1  # first scan: one, until the others are seen
    fair.observed(ScanResult(holders=Counter({"w2": 6, "w3": 5})))
    assert fair.limit(1) == 4  # (1 + 11 + 1) over 3 workers is 5 each; 1 runs here already
    fair.observed(ScanResult())
    assert fair.limit(3) is None  # alone, as far as it can see
    capped = FairShare(max_agents=4)
    capped.observed(ScanResult())
    assert capped.limit(3) == 1 and capped.limit(4) == 0


def test_fair_share_counts_live_workers_and_what_the_scan_lists():
    from durably._fleet.scan import FairShare, ScanResult

    burst = [f"a{i}" for i in range(7)]
    fair = FairShare()
    fair.observed(ScanResult())  # no lease held anywhere: an idle fleet
    fair.peers(["w2"])  # but a second worker's heartbeat says it serves the same definitions
    assert fair.limit(0, listed=burst) == 4  # 7 runnable over 2 workers
    assert fair.limit(4, listed=burst[4:]) == 0  # at its share: the peer below its share takes the rest
    fair.observed(ScanResult(listed=burst[4:]))
    assert fair.limit(4, listed=burst[4:]) == 1  # still waiting a whole poll later: one more, nothing starves
    fair.peers(["w2"], running=burst[4:])
    assert fair.limit(4, listed=burst[4:]) == 0  # the peer runs them (its heartbeat lists them)
    fair.peers([])
    assert fair.limit(0, listed=burst) is None  # alone: everything
    assert FairShare(max_agents=2).share(0)(None) == 1  # the first scan takes one


async def test_a_serving_loop_looks_at_its_peers_again_only_after_a_while_once_it_sees_some(monkeypatch):
    from durably._fleet import serving

    looks: list[float] = []
    seen: list[list[str]] = [[], ["w2"], ["w2"]]

    async def peers(activations: object) -> list[str]:
        looks.append(clock[0])
        return seen[min(len(looks) - 1, len(seen) - 1)]

    clock = [100.0]
    monkeypatch.setattr(serving, "_peers", peers)
    view = serving.PeerView(object(), clock=lambda: clock[0])  # type: ignore[arg-type]
    assert await view.peers() == []
    assert await view.peers() == ["w2"]  # none seen: looked again at once
    clock[0] += serving.PEERS_TTL / 2
    assert await view.peers() == ["w2"] and len(looks) == 2  # some seen: the view is reused
    clock[0] += serving.PEERS_TTL / 2
    await view.peers()
    assert len(looks) == 3  # past the TTL: looked again
