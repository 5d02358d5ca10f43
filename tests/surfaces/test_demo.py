"""`durably demo` end to end, as the README runs it (fewer modules, for time)."""

from __future__ import annotations

import subprocess
import sys

from durably._cli.demo.run import surveyed
from durably._cli.demo.survey import CANDIDATES, report, survey_task, task_modules


def test_demo_crashes_resumes_and_verifies(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "durably._cli", "demo", "--modules", "6", "--seed", "7"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "all 9 checks passed" in proc.stdout
    assert (tmp_path / "durably.db").exists()
    assert len(list((tmp_path / "durably-demo" / "run" / "summaries").glob("*.md"))) == 6
    # Run twice on the same database: the demo starts its agent afresh. Seed 0 asks for base64,
    # a name with digits, which the scripted model once never read (and the reference run neither).
    again = subprocess.run(
        [sys.executable, "-m", "durably._cli", "demo", "--modules", "3", "--seed", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-4000:]
    assert "base64" in again.stdout and "every module surveyed" in again.stdout
    summaries = {p.stem for p in (tmp_path / "durably-demo" / "run" / "summaries").glob("*.md")}
    assert len(summaries) == 3 and "base64" in summaries


def test_the_scripted_model_reads_every_module_name_of_its_task():
    assert task_modules(survey_task(["logging", "numbers", "base64"])) == ["logging", "numbers", "base64"]
    assert task_modules(survey_task(CANDIDATES)) == CANDIDATES
    assert task_modules(survey_task(["xml.dom", "_py_abc"])) == ["xml.dom", "_py_abc"]


def test_the_demo_fails_a_run_that_skipped_a_module(tmp_path):
    (tmp_path / "summaries").mkdir()
    facts = [{"module": m, "lines": 1, "functions": [], "classes": [], "sha256": "0"} for m in ("logging", "numbers")]
    for fact in facts:
        (tmp_path / "summaries" / f"{fact['module']}.md").write_text("x")
    (tmp_path / "report.md").write_text(report(facts))
    check = surveyed(tmp_path, ["logging", "numbers", "base64"])
    assert not check.ok and "missing: base64" in check.detail
    (tmp_path / "summaries" / "base64.md").write_text("x")
    (tmp_path / "report.md").write_text(report([*facts, {**facts[0], "module": "base64"}]))
    assert surveyed(tmp_path, ["logging", "numbers", "base64"]).ok
