"""Crash torture, bounded for CI: real workers SIGKILLed at every journal boundary, the invariants judged.

The long runs are in the README ("Crash torture"). Here: >= 200 kills on SQLite,
>= 50 on file:// and on S3 (the local server), two workers each so agents are
taken over between them; the judge catches a store that acknowledges from a
cache; the invariants themselves on hand-made ledgers; the CLI's exit status.
"""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

import broken_adapters
from durably.cli.main import main
from durably.runtime.state import AgentState
from durably.runtime.torture import TortureError, run_torture
from durably.runtime.torture.invariants import check_effects, check_states, count_takeovers, expected_result
from durably.runtime.torture.testing import TortureConformance

try:
    from .s3_server import s3_server  # noqa: F401 - a fixture
except ImportError:
    from s3_server import s3_server  # noqa: F401


class TestSQLiteUnderTorture(TortureConformance):
    torture_kills = 200

    def store_url(self, tmp_path):
        return f"sqlite:///{tmp_path / 'tortured.db'}"


class TestFileSystemUnderTorture(TortureConformance):
    torture_kills = 50

    def store_url(self, tmp_path):
        return (tmp_path / "tortured").as_uri()


class TestS3UnderTorture(TortureConformance):
    torture_kills = 50
    torture_agents, torture_steps = 2, 4  # every request goes through moto, in this process: less work per kill

    @pytest.fixture(autouse=True)
    def _local_s3(self, s3_server) -> None:  # noqa: F811
        self.server = s3_server

    def store_url(self, tmp_path):
        return self.server.url(f"torture-{tmp_path.name}", max_attempts=5, deadline=15)


def test_the_judge_catches_acknowledgements_from_a_cache(tmp_path) -> None:
    report = anyio.run(lambda: run_torture((tmp_path / "cached").as_uri(), kills=12, workers=1, seed=3,
                                           store_class=broken_adapters.WritesBehind))
    lost = [v for v in report.violations if "acknowledged to" in v and ("now missing" in v or "now altered" in v)]
    assert lost, f"a write-behind cache loses acknowledged appends on SIGKILL, and the judge must say so: {report.summary()}"


def test_a_single_process_store_is_refused() -> None:
    with pytest.raises(TortureError, match="single-process"):
        anyio.run(lambda: run_torture("memory://torture", kills=1))
    with pytest.raises(ValueError):
        anyio.run(lambda: run_torture("memory://torture", kills=0))


def _state(status: str, result=None, reason: str = "") -> AgentState:
    return AgentState(status=status, result=result, reason=reason)


def test_the_invariants_on_hand_made_outcomes() -> None:
    steps, done = 2, expected_result(2)
    policies = {"r": "reconcile", "f": "fail", "gone": "reconcile"}
    states = {"r": _state("finished", done), "f": _state("failed", reason="tool effect call call-1: outcome unknown "
                                                                         "after a crash (policy fail)")}
    assert check_states(states, policies, steps) == ["gone: no journal at the end of the run"]
    assert check_states({**states, "gone": _state("running")}, policies, steps)[0].startswith("gone (reconcile): ended running")
    assert check_states({"r": _state("failed", reason="outcome unknown after a crash")}, {"r": "reconcile"}, steps), (
        "a reconcile agent must not give up"
    )
    effects = [{"key": "k1", "agent": "r"}, {"key": "k2", "agent": "r"}, {"key": "k1", "agent": "r"}]
    found = check_effects(effects, {"r": _state("finished", done)}, steps)
    assert found == ["effect k1 happened 2 times", "r: finished with 3 effects, not 2"]
    acks = [{"agent": "a", "worker": "w0.1"}, {"agent": "a", "worker": "w0.2"}, {"agent": "a", "worker": "w1.1"}]
    assert count_takeovers(acks) == 1, "a restart in the same slot is no takeover; another slot's append is"


def test_the_command_line_reports_and_exits_zero(tmp_path, capsys) -> None:
    assert main(["torture", "--store", f"sqlite:///{tmp_path / 'cli.db'}", "--kills", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "0 violations" in out and "SIGKILLs" in out


def test_the_fork_server_reads_botocore_models_once_for_every_worker() -> None:
    """Workers fork from a server that imported ``durably.runtime.torture.preload``: it read botocore's
    S3 models, so a worker's S3 session shares them instead of reading and parsing them again."""
    check = ("import sys, durably.runtime.torture.preload; from durably.adapters import s3_requests; "
             "sys.exit(0 if s3_requests._shared_loader is not None else 1)")
    assert subprocess.run([sys.executable, "-c", check]).returncode == 0, "the preload did not read the models"

    from durably.adapters import s3_requests

    s3_requests.preload_models()
    loader = s3_requests._shared_loader
    s3_requests.preload_models()  # once loaded, a no-op
    assert s3_requests._shared_loader is loader
    session = anyio.run(s3_requests.new_session)
    assert session.get_component("data_loader") is loader, "a new session must share the preloaded models"
