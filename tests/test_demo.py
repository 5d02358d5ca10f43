"""`durably demo` end to end, as the README runs it (fewer modules, for time)."""

from __future__ import annotations

import subprocess
import sys


def test_demo_crashes_resumes_and_verifies(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "durably.cli", "demo", "--modules", "6", "--seed", "7"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "all 8 checks passed" in proc.stdout
    assert (tmp_path / "durably.db").exists()
    assert len(list((tmp_path / "durably-demo" / "run" / "summaries").glob("*.md"))) == 6
    # Run twice on the same database: the demo starts its agent afresh.
    again = subprocess.run([sys.executable, "-m", "durably.cli", "demo", "--modules", "3", "--seed", "7"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-4000:]
