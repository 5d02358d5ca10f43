"""What importing the runtime and a plain run load: not the modules only other calls need.

Reading (describe, history, time travel, watch), commands (placement,
dispatch), retries, serving and scans, definition changes, retention and key rotation
import their modules when first called, so neither the import nor running an
agent on ``sqlite://`` pays for them (pydantic comes with the first tool
schema). The heavy dependencies that were lazy already are checked too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "support"

#: Modules a runtime that only runs agents never needs.
LAZY = (
    "durably._reading.describe",
    "durably._reading.history",
    "durably._reading.time_travel",
    "durably._reading.watch",
    "durably._operate.placement",
    "durably._operate.dispatch",
    "durably._fleet.scan",
    "durably._fleet.serving",
    "durably._fleet.wakeups",
    "durably._upkeep.migrate",
    "durably._operate.retry_failed",
    "durably._upkeep.retention",
    "durably._upkeep.reencrypt",
    "durably._reading.verify",
    "durably.storage._crypto",
    "cryptography",
    "pydantic",
    "rich",
    "click",
    "tenacity",
    "opentelemetry",
    "durably._cli",
)


def loaded_after(code: str) -> set[str]:
    """The names in ``sys.modules`` after a fresh interpreter ran ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SUPPORT,
    )
    assert done.returncode == 0, done.stderr
    return set(eval(done.stdout.splitlines()[-1]))  # our own printed list of names


def test_importing_the_runtime_loads_none_of_the_lazy_modules() -> None:
    loaded = loaded_after("import durably._runtime")
    assert "durably._runtime" in loaded  # the check below is of a real import
    assert sorted(loaded & set(LAZY)) == []
    assert "socket" not in loaded  # the event loop imports it when a runtime runs
    assert "hashlib" not in loaded  # the first idempotency key or definition digest imports it


def test_a_plain_run_on_sqlite_loads_none_of_them_either(tmp_path) -> None:
    code = (
        "import anyio\nfrom durably import Runtime\nfrom support_agents import list_agent\n"
        "async def main():\n"
        f"    async with Runtime('sqlite:///{tmp_path / 'a.db'}') as rt:\n"
        "        state = await rt.run(list_agent(2, []), 'a1', 'two steps')\n"
        "        assert state.status == 'finished', state\n"
        "anyio.run(main)"
    )
    loaded = loaded_after(code)
    assert "durably.adapters.sqlite" in loaded
    assert sorted(loaded & (set(LAZY) - {"pydantic"})) == []  # pydantic: the tool's schema, built on first use
