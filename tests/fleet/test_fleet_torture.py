"""Fleet torture, sized for CI: four serving workers under SIGKILL, SIGSTOP past the lease, SIGTERM
and (on PostgreSQL) database restarts, an operator approving as agents park; the fleet judge.

The judge is tested first on hand-made ledgers and states: a planted overlap, a
duplicate effect, a lost approval and a stuck agent each make it fail.
"""

from __future__ import annotations

import anyio
import pytest
from pg_server import PostgresTestServer

from durably._cli.main import main
from durably._loop.state import AgentState
from durably._torture.fleet import run_fleet_torture
from durably._torture.fleet_agents import fleet_result
from durably._torture.fleet_invariants import check_activations, check_approvals, check_effects_once, check_finished

#: Agents per store in CI (the Done-when line asks for >= 2,000).
AGENTS = 2000


def _state(agent: str, status: str = "finished", result: str | None = None, approvals=None) -> AgentState:
    state = AgentState(agent_id=agent, status=status, result=result if result is not None else fleet_result(1))
    state.approvals = approvals or {}
    return state


def _ack(agent: str, first: int, fence: int | None, pid: int, worker: str = "w0.1") -> dict:
    return {"agent": agent, "first": first, "fence": fence, "pid": pid, "worker": worker, "sha": ["x"]}


def _grant(agent: str, token: int, pid: int) -> dict:
    return {"kind": "grant", "agent": agent, "token": token, "pid": pid, "owner": f"h:{pid}", "worker": "w"}


def test_the_judge_passes_a_clean_handover_between_activations() -> None:
    grants = [_grant("a", 1, 100), _grant("a", 2, 200)]
    acks = [_ack("a", 1, 1, 100), _ack("a", 2, 1, 100), _ack("a", 3, 2, 200)]
    assert check_activations(acks, grants) == []


def test_the_judge_catches_a_record_from_an_activation_after_a_later_ones() -> None:
    grants = [_grant("a", 1, 100), _grant("a", 2, 200)]
    # The paused holder (token 1) had an append accepted after its successor's resumed record.
    acks = [_ack("a", 1, 1, 100), _ack("a", 2, 2, 200), _ack("a", 3, 1, 100)]
    violations = check_activations(acks, grants)
    assert len(violations) == 1 and "overlap" in violations[0], violations


def test_the_judge_catches_a_token_granted_twice_an_unfenced_append_and_a_borrowed_token() -> None:
    grants = [_grant("a", 1, 100), _grant("a", 1, 200)]
    acks = [_ack("a", 1, None, 100), _ack("a", 2, 1, 300)]
    violations = check_activations(acks, grants)
    assert any("granted to 2 processes" in v for v in violations), violations
    assert any("without a fence" in v for v in violations), violations
    assert any("not granted" in v for v in violations), violations


def test_the_judge_catches_a_duplicate_effect_and_a_missing_one() -> None:
    effects = [{"key": "k1", "agent": "a", "n": 1}, {"key": "k1", "agent": "a", "n": 1}]
    violations, replays = check_effects_once(effects, {"a": _state("a"), "b": _state("b")}, steps=1)
    assert "effect k1 happened 2 times" in violations and replays == 0
    assert any(v.startswith("b: finished with 0 effects") for v in violations), violations


def test_the_judge_tells_a_paused_workers_replay_from_a_duplicate() -> None:
    # Process 2 was paused (SIGSTOP) and made k1 again after process 1 made it: the window only the
    # idempotency key closes, counted as a replay. k2 made by processes 1 and 3, neither paused, is a violation.
    states = {"a": _state("a"), "b": _state("b")}
    stops = [{"fault": "stop", "pid": 2, "at": 1.0}]
    replayed = [{"key": "k1", "agent": "a", "pid": 1, "at": 3.0}, {"key": "k1", "agent": "a", "pid": 2, "at": 5.0}]
    other = [{"key": "k2", "agent": "b", "pid": 1, "at": 3.0}]
    assert check_effects_once(replayed + other, states, steps=1, stops=stops) == ([], 1)
    duplicated = [{"key": "k2", "agent": "b", "pid": 3, "at": 4.0}]
    violations, replays = check_effects_once(replayed + other + duplicated, states, steps=1, stops=stops)
    assert violations == ["effect k2 happened 2 times"] and replays == 1


def test_the_judge_catches_a_lost_approval() -> None:
    decided = {"gate-1": {"approval_id": "gate-1", "decision": {"approved": True}}}
    lost = {"gate-1": {"approval_id": "gate-1", "decision": None}}
    approvals = [{"agent": "a", "approval": "gate-1"}, {"agent": "b", "approval": "gate-1"}]
    states = {"a": _state("a", approvals=decided), "b": _state("b", "waiting_approval", "", lost)}
    violations = check_approvals(approvals, states)
    assert violations == ["b: approval gate-1 acknowledged, not in its journal"]
    assert check_approvals([{"agent": "c", "approval": "gate-1"}], states) == [
        "c: approval gate-1 acknowledged, the agent is gone"
    ]


def test_the_judge_catches_a_stuck_agent() -> None:
    states = {"a": _state("a"), "b": _state("b", "running", "")}
    violations = check_finished(states, ["a", "b", "c"], fleet_result(1))
    assert [v.split(":")[0] for v in violations] == ["b", "c"]


def _assert_clean(report) -> None:
    detail = f"{report.summary()}\n" + "\n".join(report.violations[:30])
    assert not report.violations, detail
    for fault in ("kill", "stop", "term"):
        assert report.faults.get(fault, 0) > 0, detail
    assert report.takeovers > 0, detail
    assert report.approvals >= report.agents, detail


@pytest.mark.timeout(900)  # under a minute on a loaded 2-core machine; the run's own timeout is 600 s
def test_a_fleet_on_sqlite_keeps_every_invariant(tmp_path) -> None:
    report = anyio.run(
        lambda: run_fleet_torture(
            f"sqlite:///{tmp_path / 'fleet.db'}",
            workers=4,
            agents=AGENTS,
            steps=1,
            seed=0,
            ledger=tmp_path / "ledger",
            timeout=600,
        )
    )
    print(report.summary())
    _assert_clean(report)


@pytest.mark.timeout(900)
def test_a_fleet_on_postgres_keeps_every_invariant_through_database_restarts(
    tmp_path, pg_server: PostgresTestServer
) -> None:
    def restart(immediate: bool) -> None:
        pg_server.restart(immediate=immediate)

    report = anyio.run(
        lambda: run_fleet_torture(
            pg_server.url(),
            workers=4,
            agents=AGENTS,
            steps=2,  # long enough (about a minute) for database restarts, at least 15 s apart
            seed=0,
            ledger=tmp_path / "ledger",
            chaos_interval=1.5,
            restart_database=restart,
            timeout=600,
        )
    )
    print(report.summary())
    _assert_clean(report)
    assert report.faults.get("db-fast", 0) + report.faults.get("db-immediate", 0) > 0, report.summary()


def _fleet_cli(tmp_path, capsys, *, workers: int, agents: int, steps: int, chaos_interval: float) -> tuple[int, str]:
    """``durably torture --fleet`` on a fresh SQLite file (seed 1): its exit status and output."""
    status = main(
        ["torture", "--fleet", "--store", f"sqlite:///{tmp_path / 'cli.db'}", "--workers", str(workers)]
        + ["--agents", str(agents), "--steps", str(steps), "--seed", "1", "--chaos-interval", str(chaos_interval)]
    )
    return status, capsys.readouterr().out


def test_the_cli_runs_the_fleet_mode_and_exits_0_on_a_clean_run(tmp_path, capsys) -> None:
    # Sized so faults are dealt: a worker gets its first only after SETTLE seconds up, and 20 agents
    # of 1 step finish sooner than that; this run lasts several seconds even on an idle machine.
    status, out = _fleet_cli(tmp_path, capsys, workers=2, agents=200, steps=2, chaos_interval=0.2)
    assert status == 0, out
    assert "fleet torture of" in out and "0 violations" in out, out
    assert "faults: none" not in out and "INVALID" not in out, out


def test_the_cli_calls_a_fleet_run_that_dealt_no_fault_invalid_and_exits_1(tmp_path, capsys) -> None:
    # The first fault is due after at least 300 s: a handful of agents finish long before it.
    status, out = _fleet_cli(tmp_path, capsys, workers=1, agents=3, steps=1, chaos_interval=600)
    assert status == 1, out
    assert "faults: none" in out and "0 violations" in out, out
    assert "INVALID RUN: no fault was dealt, so it tested nothing" in out, out


def test_the_cli_help_says_fleet_ignores_kills(capsys) -> None:
    assert main(["torture", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "ignored by --fleet" in help_text, help_text


def test_the_cli_refuses_fleet_only_options_without_fleet(tmp_path, capsys) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    for option in (["--timeout", "30"], ["--chaos-interval", "2"]):
        assert main(["torture", "--store", store, *option]) == 2
        assert "apply to --fleet only" in capsys.readouterr().err
    assert not (tmp_path / "cli.db").exists()  # refused before anything ran
