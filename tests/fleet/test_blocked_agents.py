"""An agent no registered definition may run (definition changed, policy stop) is visible as such.

A worker that meets it marks it ``needs_migration`` in the status index (the
journal stays untouched) and logs it once at WARNING; ``durably agents``,
``durably show`` and the console (``describe``) show it with the reason; a
deploy of a definition that accepts it resumes it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from durably import Runtime
from durably.storage._registry import open_store
from durably.storage._spi import StreamId
from tests.runtime.test_definition_versions import definition, kinds, parked

pytestmark = pytest.mark.anyio


def durably_cli(*args: str) -> dict:
    command = Path(sys.executable).parent / "durably"
    done = subprocess.run([str(command), *args, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
async def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'agents.db'}"


async def test_a_blocked_agent_is_marked_logged_once_shown_and_runs_after_a_fitting_deploy(sqlite_url, caplog) -> None:
    async with open_store(sqlite_url) as store:
        await parked(store)
        journal_before = await kinds(store)
        changed = definition("v2 prompt", version="2")
        with caplog.at_level(logging.WARNING, logger="durably.serve"):
            async with Runtime(store, agents=[changed]) as worker:
                for _ in range(3):  # three scans of one worker
                    assert await worker.resume_all() == []
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "w1" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        assert "version '1' -> '2'" in warnings[0].getMessage() and "stop" in warnings[0].getMessage()
        entry = await store.get_index(StreamId("default", "w1"))
        assert entry is not None and entry.status == "needs_migration"
        assert await kinds(store) == journal_before  # the journal is untouched

        async with Runtime(store) as console:  # no definitions: what the CLI and console see
            (described,) = await console.describe_all()
            assert described.status == "needs_migration" and "policy stop" in described.reason
            assert "'1'" in described.reason

    listed = durably_cli("agents", "--store", sqlite_url)
    assert [(a["agent_id"], a["status"]) for a in listed["agents"]] == [("w1", "needs_migration")]
    shown = durably_cli("show", "w1", "--store", sqlite_url)
    assert shown["status"] == "needs_migration" and "policy stop" in shown["reason"]

    async with open_store(sqlite_url) as store:
        accepting = definition("v2 prompt", version="2", on_definition_change="continue")
        async with Runtime(store, agents=[accepting]) as worker:
            (handle,) = await worker.resume_all()
            state = await handle.wait()
        assert state.status == "finished"
        entry = await store.get_index(StreamId("default", "w1"))
        assert entry is not None and entry.status == "finished"


async def test_the_recorded_definition_back_resumes_a_blocked_agent(sqlite_url) -> None:
    async with open_store(sqlite_url) as store:
        await parked(store)
        async with Runtime(store, agents=[definition("v2 prompt", version="2")]) as worker:
            assert await worker.resume_all() == []
        async with Runtime(store, agents=[definition()]) as worker:
            (handle,) = await worker.resume_all()
            assert (await handle.wait()).status == "finished"
        async with Runtime(store) as console:
            (described,) = await console.describe_all()
            assert described.status == "finished"
