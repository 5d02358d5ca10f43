"""Every program in examples/ runs to success as it is, importing only public names."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

from s3_server import S3TestServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: What an example may import from durably: the facade, the adapter authors' SPI, the model adapters.
PUBLIC_MODULES = {
    "durably",
    "durably.storage",
    "durably.storage.conformance",
    "durably.models",
    "durably.models.openai",
    "durably.models.anthropic",
}


def run_example(name: str, *args: str, timeout: float = 180) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_example_is_listed_on_the_examples_page() -> None:
    page = (EXAMPLES.parent / "docs" / "examples.md").read_text(encoding="utf-8")
    unlisted = [path.name for path in sorted(EXAMPLES.glob("*.py")) if f"| `{path.name}` |" not in page]
    assert unlisted == [], f"docs/examples.md does not list {unlisted}"


def test_every_example_imports_only_public_names() -> None:
    examples = sorted(EXAMPLES.glob("*.py"))
    assert len(examples) >= 5
    for path in examples:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [(alias.name, None) for alias in node.names if alias.name.startswith("durably")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("durably"):
                names = [(node.module, alias.name) for alias in node.names]
            else:
                continue
            for module, name in names:
                assert module in PUBLIC_MODULES, f"{path.name} imports the internal module {module}"
                exported = getattr(importlib.import_module(module), "__all__", None)
                assert name is None or exported is None or name in exported, (
                    f"{path.name}: {module}.{name} is not public"
                )
        source = path.read_text(encoding="utf-8")
        for attribute in {
            n.attr
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "durably"
        }:
            assert attribute in importlib.import_module("durably").__all__, (
                f"{path.name}: durably.{attribute} is not public"
            )


def test_support_agent_refunds_once_across_a_sigkill(tmp_path: Path) -> None:
    out = run_example("support_agent.py", str(tmp_path))
    assert "refunds made: 1" in out and "agent finished" in out and "signal 9" in out


def test_approval_from_another_process(tmp_path: Path) -> None:
    out = run_example("approval_elsewhere.py", str(tmp_path))
    assert "worker: agent waiting_approval" in out and "operator: approving deploy" in out
    assert "deploys: ['1.4.0']" in out


def test_budget_suspends_and_extension_finishes(tmp_path: Path) -> None:
    out = run_example("budget_and_extension.py", str(tmp_path))
    assert "suspended" in out and "finished: closed 5 tickets after 6 steps" in out


def test_custom_adapter_runs_an_agent() -> None:
    out = run_example("custom_adapter.py")
    assert out.startswith("finished: 4 words; journal: started,")


def test_two_workers_on_one_s3_bucket(s3_server: S3TestServer, tmp_path: Path) -> None:
    out = run_example(
        "s3_two_workers.py", s3_server.url(f"examples-{uuid.uuid4().hex[:8]}"), str(tmp_path), timeout=240
    )
    assert "distinct keys: 6" in out and "tool calls: 6" in out


def test_a_worker_runs_submitted_tickets_and_drains(tmp_path: Path) -> None:
    out = run_example("fleet.py", str(tmp_path))
    assert out.count("queued: a live worker will run it") == 3 and "tickets answered: 3; worker exited 0" in out


def test_fleet_refuses_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "fleet.py"), str(missing)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "is not a directory" in done.stderr and "Traceback" not in done.stderr
    assert not missing.exists()


def test_child_agents_report_once_across_a_sigkill(tmp_path: Path) -> None:
    out = run_example("child_agents.py", str(tmp_path))
    assert "first process: signal 9" in out and "lookups: 2 for 2 topics" in out
    assert "editor finished: post: found write-ahead logs" in out and out.count(": finished") == 2
    assert "editor sleeping: sleeping until" in out and "published: 1" in out
    assert "retries after ConnectionError: 2" in out
