"""An agent id is text someone chose: in a log line or an error it shows escaped, so it
cannot forge another log line or rewrite an operator's terminal."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably.storage._spi import StreamId

pytestmark = pytest.mark.anyio
FORGED = "a1\n2026-12-06 WARNING durably: operator approved wire_money\x1b[2K\u202e"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_str_of_a_stream_escapes_what_is_not_printable() -> None:
    shown = str(StreamId("ns", FORGED))
    assert "\n" not in shown and "\x1b" not in shown and "\u202e" not in shown
    assert shown == "ns/a1\\x0a2026-12-06 WARNING durably: operator approved wire_money\\x1b[2K\\u202e"
    assert str(StreamId("ns", "plain/é ok")) == "ns/plain/é ok"  # printable text stays as it is


async def test_a_log_line_about_an_agent_is_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    policy = SnapshotPolicy(every_records=3, tail_ratio=0.0)
    async with Runtime(url, agents=[list_agent(3, [])], snapshot_policy=policy) as rt:
        await rt.run("list-agent", FORGED, "task")
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("UPDATE snapshots SET data = X'00'").rowcount > 0  # restore falls back, and says so
    caplog.set_level(logging.WARNING, logger="durably")
    async with Runtime(url) as rt:
        assert (await rt.status(FORGED)).status == "finished"
    lines = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert lines, [r.getMessage() for r in caplog.records]
    for line in lines:
        assert "\n" not in line and "\x1b" not in line and "\u202e" not in line and "a1\\x0a2026" in line
