"""The README stays true: its embedding example runs, and its test command is .ci/run's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_embedding_example_runs(tmp_path):
    section = README[README.index("## Embedding it"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    # Without an API key the example uses its stand-in model (never a real provider from CI).
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished Replied to the customer."
    again = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=env)
    assert again.stdout.strip() == "finished Replied to the customer."  # resumed from agents.db, not re-run


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```sh\n(python3 -m venv .*?)\n```", README)
    assert len(commands) == 2, commands
    demo, tests = commands
    assert "durably demo" in demo and "pytest" in tests
    assert tests in (ROOT / ".ci" / "run").read_text()
