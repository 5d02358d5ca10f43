"""Schema evolution end to end: a journal of this build's version (NOW) resumed by the next
version's build (NEXT), ``durably migrate``, and a journal from a newer durably that this
build must refuse without touching it.

The next version is simulated with temporary registrations: the plan, a list of
strings in version NOW, becomes a list of ``{"step", "done"}`` maps in records
(``model_responded``, ``plan_updated``) and in snapshots. (The names ``v1_*`` and
``v2_*`` below are from when NOW was 1; both schemas moved to 2 with forks.)
"""

from __future__ import annotations

import copy
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from schema_wire import header_fields

from durably import Runtime, SnapshotPolicy
from durably._cli.demo.survey import survey_agent, survey_task
from durably._cli.main import main
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._upkeep.migrate import migrate_store
from durably.schemas import _records as schemas
from durably.schemas._records import RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID
from durably.storage._errors import UnknownSchemaVersionError
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

MODULES = ["colorsys", "bisect", "fnmatch"]
NOW = schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID]  # what this build writes (records)
NEXT = NOW + 1
SNAP_NOW = schemas.CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID]  # ... and snapshots (versions of their own)
SNAP_NEXT = SNAP_NOW + 1
STREAM = StreamId("default", "survey")


def plan_steps(plan: list) -> list[dict[str, Any]]:
    """Version 2 of a plan: every step a map with a done flag."""
    return [{"step": p, "done": False} if isinstance(p, str) else p for p in plan]


def record_plan_v1_to_v2(value: dict) -> dict:
    """Record upcaster 1 -> 2: the plan of model_responded and plan_updated becomes steps."""
    data = value["d"]
    if value["k"] in ("model_responded", "plan_updated") and data.get("plan") is not None:
        return {**value, "d": {**data, "plan": plan_steps(data["plan"])}}
    return value


def snapshot_plan_v1_to_v2(value: dict) -> dict:
    """Snapshot upcaster 1 -> 2: the state's plan becomes steps."""
    return {**value, "state": {**value["state"], "plan": plan_steps(value["state"]["plan"])}}


def test_the_v2_upcasters_are_pure_and_only_touch_the_plan() -> None:
    record = {
        "s": 2,
        "k": "model_responded",
        "t": 1.0,
        "d": {"text": "", "tool_calls": [], "plan": ["a"], "model": "m"},
    }
    before = copy.deepcopy(record)
    assert record_plan_v1_to_v2(record)["d"]["plan"] == [{"step": "a", "done": False}]
    assert record == before
    unchanged = {"s": 3, "k": "model_responded", "t": 1.0, "d": {"plan": None}}
    assert record_plan_v1_to_v2(unchanged) is unchanged
    snapshot = {"s": 4, "state": {"plan": ["a", "b"], "task": "t"}}
    lifted = snapshot_plan_v1_to_v2(snapshot)
    assert lifted["state"] == {"plan": [{"step": "a", "done": False}, {"step": "b", "done": False}], "task": "t"}
    assert snapshot["state"]["plan"] == ["a", "b"]


@pytest.fixture
def v2_build(monkeypatch: pytest.MonkeyPatch):
    """Turn this process into a build whose record and snapshot schemas are at version 2."""

    def enable() -> None:
        monkeypatch.setitem(schemas.CURRENT_VERSIONS, RECORD_SCHEMA_ID, NEXT)
        monkeypatch.setitem(schemas.CURRENT_VERSIONS, SNAPSHOT_SCHEMA_ID, SNAP_NEXT)
        monkeypatch.setitem(schemas.UPCASTERS, (RECORD_SCHEMA_ID, NOW), record_plan_v1_to_v2)
        monkeypatch.setitem(schemas.UPCASTERS, (SNAPSHOT_SCHEMA_ID, SNAP_NOW), snapshot_plan_v1_to_v2)

    return enable


async def write_v1_survey(url: str, workdir: Path) -> Any:
    """The survey agent on MODULES, parked on its publish approval, written by today's build."""
    agent = survey_agent(workdir, latency=0)
    async with Runtime(url, agents=[agent], snapshot_policy=SnapshotPolicy(every_records=4)) as rt:
        state = await rt.run(agent, "survey", survey_task(MODULES))
    assert state.status == "waiting_approval" and state.plan[0].startswith("read, summarise")
    return state


def rows(path: Path) -> dict[str, list[tuple]]:
    """Every row of the SQLite store, read with the sqlite3 module (not durably)."""
    with sqlite3.connect(path) as db:
        return {
            table: db.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("streams", "records", "snapshots")
        }


async def frame_versions(url: str) -> tuple[dict[int, int], dict[int, int]]:
    """seq -> schema version of every record and snapshot of the survey stream."""
    async with open_store(url) as store:
        records: dict[int, int] = {}
        async for r in store.read(STREAM):
            # A group's member row (format 5) holds no record: its version is its group frame's.
            records[r.seq] = records[r.seq - 1] if r.data[2] == 5 else header_fields(r.data)["schema-version"]
        snapshots, snap = {}, await store.get_snapshot(STREAM)
        while snap is not None:
            snapshots[snap.seq] = header_fields(snap.data)["schema-version"]
            snap = await store.get_snapshot(STREAM, snap.seq - 1) if snap.seq > 1 else None
    return records, snapshots


async def test_a_v1_agent_resumes_correctly_under_a_v2_state_schema(tmp_path: Path, v2_build) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    v1_state = await write_v1_survey(url, tmp_path / "work")
    v1_records, v1_snapshots = await frame_versions(url)
    assert set(v1_records.values()) == {NOW} and set(v1_snapshots.values()) == {SNAP_NOW}
    v1_rows = await anyio.to_thread.run_sync(rows, tmp_path / "agents.db")

    v2_build()
    agent = survey_agent(tmp_path / "work", latency=0)
    # tail_ratio 0: a snapshot every 4 records whatever their size (the policy weighs raw bytes, and
    # the survey's short tail after the resume never reaches half of its state's raw size).
    async with Runtime(url, agents=[agent], snapshot_policy=SnapshotPolicy(every_records=4, tail_ratio=0.0)) as rt:
        restored = await rt.status("survey")
        assert restored.plan == plan_steps(v1_state.plan)  # lifted from the v1 snapshot and records
        assert restored.ledger == v1_state.ledger and restored.open_approvals() == v1_state.open_approvals()
        await rt.approve("survey", restored.open_approvals()[0]["approval_id"], by="test")
        handle = await rt.resume("survey")
        state = await handle.wait() if handle is not None else await rt.status("survey")

    assert state.status == "finished" and state.result.startswith(f"Survey of {len(MODULES)} modules")
    assert state.plan == plan_steps(v1_state.plan)
    assert (tmp_path / "work" / "report.md").exists()
    records, snapshots = await frame_versions(url)
    # Old frames stay exactly as written; everything this build wrote is version 2.
    assert all(records[seq] == NOW for seq in v1_records) and all(
        v == NEXT for s, v in records.items() if s not in v1_records
    )
    assert max(snapshots) > max(v1_snapshots) and snapshots[max(snapshots)] == SNAP_NEXT
    after = await anyio.to_thread.run_sync(rows, tmp_path / "agents.db")
    assert after["records"][: len(v1_rows["records"])] == v1_rows["records"]


async def test_migrate_dry_run_reports_and_migrate_rewrites_only_snapshots(tmp_path: Path, v2_build) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    await write_v1_survey(url, tmp_path / "work")
    v1_records, v1_snapshots = await frame_versions(url)
    v2_build()
    before = await anyio.to_thread.run_sync(rows, tmp_path / "agents.db")
    async with open_store(url) as store:
        expected = (await restore(store, RecordCodec(), STREAM)).state.to_wire()
        (report,) = await migrate_store(store, "default", dry_run=True)
    assert await anyio.to_thread.run_sync(rows, tmp_path / "agents.db") == before  # a dry run writes nothing
    assert report.changes and report.record_versions == {NOW: len(v1_records)} and not report.problems
    line = report.describe(dry_run=True)
    assert f"snapshot seq {max(v1_snapshots)} v{SNAP_NOW} would be rewritten as v{SNAP_NEXT}" in line
    assert f"{len(v1_records)} records at v{NOW} stay as written (upcast to v{NEXT} on read)" in line

    async with open_store(url) as store:
        (report,) = await migrate_store(store, "default", dry_run=False)
        assert report.rewritten == len(v1_snapshots)
        assert (await restore(store, RecordCodec(), STREAM)).state.to_wire() == expected
        (again,) = await migrate_store(store, "default", dry_run=False)
    assert not again.changes and again.rewritten == 0
    after = await anyio.to_thread.run_sync(rows, tmp_path / "agents.db")
    assert after["records"] == before["records"] and after["streams"] == before["streams"]
    records, snapshots = await frame_versions(url)
    assert records == v1_records and set(snapshots) == set(v1_snapshots) and set(snapshots.values()) == {SNAP_NEXT}


async def cli(argv: list[str]) -> int:
    """``durably ARGV`` in a worker thread (the command runs its own event loop)."""
    return await anyio.to_thread.run_sync(main, argv)


async def write_from_the_future(url: str, v2_build) -> int:
    """Have a 'newer durably' (version NEXT, identity upcasters) append one record; return its seq."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(schemas.CURRENT_VERSIONS, RECORD_SCHEMA_ID, NEXT)
        patch.setitem(schemas.UPCASTERS, (RECORD_SCHEMA_ID, NOW), lambda value: value)
        async with Runtime(url) as newer:
            state = await newer.send("survey", "written by durably 2")
    return state.last_seq


async def test_a_record_from_a_newer_durably_stops_the_agent_and_leaves_its_bytes(tmp_path: Path, v2_build) -> None:
    url, path = f"sqlite:///{tmp_path / 'agents.db'}", tmp_path / "agents.db"
    state = await write_v1_survey(url, tmp_path / "work")
    async with Runtime(url) as operator:  # approved elsewhere: the agent is runnable
        await operator.approve("survey", state.open_approvals()[0]["approval_id"])
    future_seq = await write_from_the_future(url, v2_build)
    before = await anyio.to_thread.run_sync(rows, path)

    agent = survey_agent(tmp_path / "work", latency=0)
    async with Runtime(
        url, agents=[agent], snapshot_policy=SnapshotPolicy(every_records=1, keep=1, compact=True)
    ) as rt:
        with pytest.raises(UnknownSchemaVersionError) as caught:
            await rt.resume("survey")
        with pytest.raises(UnknownSchemaVersionError):
            await rt.status("survey")
    error = caught.value
    assert (error.stream, error.seq, error.version, error.supported) == (STREAM, future_seq, NEXT, NOW)
    assert f"default/survey at seq {future_seq}" in str(error) and f"version {NEXT}" in str(error)
    assert await anyio.to_thread.run_sync(rows, path) == before  # nothing appended, snapshotted or compacted

    assert await cli(["migrate", "--dry-run", "--store", url, "--namespace", "default"]) == 1
    assert await cli(["migrate", "--store", url, "--namespace", "default"]) == 1
    assert await anyio.to_thread.run_sync(rows, path) == before


async def test_the_migrate_command_reports_per_stream(tmp_path: Path, v2_build, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    await write_v1_survey(url, tmp_path / "work")
    assert await cli(["migrate", "--dry-run", "--store", url, "--namespace", "default"]) == 0
    out = capsys.readouterr().out
    assert "default/survey: up to date" in out and "1 streams in namespace 'default'; 0 would change" in out

    v2_build()
    assert await cli(["migrate", "--dry-run", "--store", url, "--namespace", "default"]) == 0
    out = capsys.readouterr().out
    assert (
        f"would be rewritten as v{SNAP_NEXT}" in out
        and f"records at v{NOW} stay as written" in out
        and "1 would change" in out
    )
    assert await cli(["migrate", "--store", url, "--namespace", "default"]) == 0
    out = capsys.readouterr().out
    assert f"rewritten as v{SNAP_NEXT}" in out and "would be" not in out and "1 changed" in out
    assert await cli(["migrate", "--store", url, "--namespace", "elsewhere"]) == 0
    assert "0 streams in namespace 'elsewhere'" in capsys.readouterr().out


async def test_a_snapshot_from_a_newer_durably_over_compacted_records_is_named(tmp_path: Path) -> None:
    url, path = f"sqlite:///{tmp_path / 'agents.db'}", tmp_path / "agents.db"
    state = await write_v1_survey(url, tmp_path / "work")
    with pytest.MonkeyPatch.context() as patch:  # a newer durably snapshots at SNAP_NEXT and compacts
        patch.setitem(schemas.CURRENT_VERSIONS, SNAPSHOT_SCHEMA_ID, SNAP_NEXT)
        patch.setitem(schemas.UPCASTERS, (SNAPSHOT_SCHEMA_ID, SNAP_NOW), lambda value: value)
        async with Runtime(
            url, snapshot_policy=SnapshotPolicy(every_records=1, tail_ratio=0.0, keep=1, compact=True)
        ) as newer:
            await newer.approve("survey", state.open_approvals()[0]["approval_id"])
    before = await anyio.to_thread.run_sync(rows, path)
    assert all(seq > 1 for _, seq, _ in before["records"])  # the start of the journal is gone

    async with Runtime(url, agents=[survey_agent(tmp_path / "work", latency=0)]) as rt:
        with pytest.raises(UnknownSchemaVersionError) as caught:
            await rt.resume("survey")
    error = caught.value
    assert (error.stream, error.version, error.supported) == (STREAM, SNAP_NEXT, SNAP_NOW)
    assert error.seq == before["snapshots"][-1][1] and f"durably.snapshot version {SNAP_NEXT}" in str(error)
    assert await anyio.to_thread.run_sync(rows, path) == before
