"""The output contracts of ``durably``: one parseable JSON document even when a journal is damaged
part-way, no purge nobody confirmed, and ``--happened`` only for a call that did start."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from privacy_support import ScriptModel

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._cli.main import main as cli_main


def durably(*argv: str) -> subprocess.CompletedProcess:
    """The command in a child process whose stdin is not a terminal (a script, a cron job)."""
    return subprocess.run(
        [sys.executable, "-m", "durably._cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def _counting(steps: int) -> AgentDefinition:
    @tool(name="count")
    async def count(n: int) -> int:
        return n

    script = [
        ModelResponse(f"step {n}", (ToolCall(f"c{n}", "count", {"n": n}),), Usage(1, 1, 0.0)) for n in range(steps)
    ]
    return AgentDefinition(
        name="counting", model=ScriptModel([*script, ModelResponse("done", (), Usage(1, 1, 0.0))]), tools=[count]
    )


def _gated(block: anyio.Event | None = None) -> AgentDefinition:
    @tool(name="wire", requires_approval=True)
    async def wire(amount: int) -> dict:
        if block is not None:
            block.set()
            await anyio.sleep_forever()
        return {"sent": amount}

    script = [
        ModelResponse("", (ToolCall("w1", "wire", {"amount": 5}),), Usage(1, 1, 0.0)),
        ModelResponse("ok", (), Usage(1, 1, 0.0)),
    ]
    return AgentDefinition(name="wiring", model=ScriptModel(script), tools=[wire])


def test_history_json_of_a_journal_damaged_part_way_is_one_document_with_its_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"

    async def run() -> int:
        async with Runtime(url, agents=[_counting(4)]) as rt:
            return (await rt.run("counting", "a1", "task")).last_seq

    last = anyio.run(run)
    assert last > 8
    with sqlite3.connect(tmp_path / "a.db") as db:  # a torn record in the middle of the journal
        db.execute("UPDATE records SET data = substr(data, 1, 5) WHERE seq = 6")
    proc = durably("history", "a1", "--store", url, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    document = json.loads(proc.stdout)  # one document, not half of one and then another
    assert [r["seq"] for r in document["records"]] == [1, 2, 3, 4, 5]
    assert document["error"]["type"] == "TruncatedRecordError" and "seq 6" in document["error"]["message"]
    sound = durably("history", "a1", "--store", url, "--json", "--after", "6")
    assert sound.returncode == 0 and [r["seq"] for r in json.loads(sound.stdout)["records"]][0] == 7


def test_purge_and_sweep_without_a_terminal_need_yes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"

    async def run() -> None:
        async with Runtime(url, agents=[_counting(1)]) as rt:
            await rt.run("counting", "a1", "task")

    anyio.run(run)
    for argv in (["purge", "a1"], ["sweep", "--default", "0s"]):
        refused = durably(*argv, "--store", url)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "not confirmed" in refused.stdout and "--yes" in refused.stdout
        assert durably("show", "a1", "--store", url).returncode == 0  # nothing deleted
    dry = durably("purge", "a1", "--store", url, "--dry-run")
    assert dry.returncode == 0 and "would purge a1" in dry.stdout
    gone = durably("purge", "a1", "--store", url, "--yes")
    assert gone.returncode == 0 and durably("show", "a1", "--store", url).returncode == 1


def test_it_happened_is_refused_for_a_call_that_never_started(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"

    async def park() -> str:
        async with Runtime(url, agents=[_gated()]) as rt:
            state = await rt.run("wiring", "a1", "task")
            assert state.status == "waiting_approval"
            (approval,) = state.open_approvals()
            return str(approval["approval_id"])

    approval_id = anyio.run(park)
    status = cli_main(
        ["approve", "a1", approval_id, "--store", url, "--happened", "--result", '{"sent": 5}', "--by", "ops"]
    )
    out = capsys.readouterr().out
    assert status == 1 and "never started" in out, out
    assert cli_main(["show", "a1", "--store", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "waiting_approval"  # nothing recorded


async def test_it_happened_answers_a_call_whose_outcome_is_unknown_after_a_crash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    started = anyio.Event()
    async with Runtime(url, agents=[_gated(started)]) as rt:
        state = await rt.run("wiring", "a1", "task")
        await rt.approve("a1", state.open_approvals()[0]["approval_id"], by="ops")
        with anyio.fail_after(30):
            await started.wait()  # the intent is durable; the runtime then stops as a crash would
    async with Runtime(url, agents=[_gated()]) as rt:
        for handle in await rt.resume_all():
            await handle.wait()
        (question,) = (await rt.status("a1")).open_approvals()
        assert "unknown after a crash" in question["reason"]
    status = await anyio.to_thread.run_sync(
        cli_main,
        [
            "approve",
            "a1",
            question["approval_id"],
            "--store",
            url,
            "--happened",
            "--result",
            '{"sent": 5}',
            "--by",
            "ops",
        ],
    )
    assert status == 0
    async with Runtime(url) as rt:
        decided = (await rt.status("a1")).approvals[question["approval_id"]]["decision"]
    assert decided["result"] == {"sent": 5}
