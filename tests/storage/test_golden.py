"""Golden checkpoints: bytes written by earlier builds must stay readable by this one.

``tests/golden/<set>/`` holds a SQLite store and raw frames written by the
build of that schema version (``tests/golden/make_golden.py``, run by hand,
never by CI). Every run decodes each frame, validates it against the CDDL of
its own version, restores the agent from a copy of the database and runs it to
completion. A format change that breaks any of it fails here. Sets are never
regenerated; a new version adds a new set beside the old ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from schema_wire import validate_frame

from durably import AgentState, Runtime
from durably._cli.demo.survey import survey_agent
from durably._journal.records import RecordCodec
from durably.schemas._records import CURRENT_VERSIONS, RECORD_SCHEMA_ID, SCHEMA_NAMES, SNAPSHOT_SCHEMA_ID, Kind
from durably.storage._codec import Codec
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SETS = sorted(path.parent for path in GOLDEN.glob("*/manifest.json"))


def manifest(golden: Path) -> dict[str, Any]:
    return json.loads((golden / "manifest.json").read_text(encoding="utf-8"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=SETS, ids=lambda path: path.name)
def golden(request) -> Path:
    return request.param


@pytest.fixture
def database(golden: Path, tmp_path: Path):
    """A copy of the set's database in ``tmp_path`` (the checked-in file is never opened for writing)."""
    source = golden / manifest(golden)["database"]["file"]
    assert sha256(source) == manifest(golden)["database"]["sha256"], "the checked-in golden database was modified"
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    yield copy
    assert sha256(source) == manifest(golden)["database"]["sha256"]


def test_a_golden_set_exists_for_the_current_versions() -> None:
    current = {SCHEMA_NAMES[k]: v for k, v in CURRENT_VERSIONS.items()}
    assert SETS and (GOLDEN / "v1") in SETS
    assert any(manifest(golden)["schema_versions"] == current for golden in SETS), (
        f"no golden set for {current}: run tests/golden/make_golden.py and commit its output"
    )


def test_every_golden_frame_decodes_to_what_was_written(golden: Path) -> None:
    kinds = set()
    database = manifest(golden)["database"]
    stream = StreamId(database["namespace"], database["agent_id"])  # where every frame of the set was written
    for entry in manifest(golden)["frames"]:
        data = (golden / entry["file"]).read_bytes()
        header = validate_frame(data)  # against the CDDL of the version it was written at
        frame = Codec().decode(data, stream=stream, seq=entry["seq"])
        assert (
            (frame.schema_id, frame.schema_version)
            == (entry["schema_id"], entry["version"])
            == (header["schema-id"], header["schema-version"])
        ), entry["file"]
        assert bool(header["flags"] & 1) == entry["compressed"], entry["file"]
        assert frame.value == entry["value"], entry["file"]  # as stored, before any upcasting
        # ... and this build reads it, through the upcasters when it is older.
        if frame.schema_id == RECORD_SCHEMA_ID:
            record = RecordCodec().decode_record(StoredRecord(entry["seq"], data), stream)
            assert (record.seq, record.kind) == (entry["seq"], entry["kind"])
            kinds.add(record.kind)
        else:
            assert frame.schema_id == SNAPSHOT_SCHEMA_ID
            seq, wire, _ = RecordCodec().decode_snapshot(StoredSnapshot(entry["seq"], data), stream)
            # Pages (snapshot v6) are blobs in the set's database, read by the restore below.
            state = AgentState.from_wire({k: v for k, v in wire.items() if k not in ("pages", "ledger_pages")})
            assert (seq, state.agent_id, state.last_seq) == (entry["seq"], "survey", entry["seq"])
    assert kinds <= {k.value for k in Kind}
    if golden == SETS[-1]:
        assert kinds == {k.value for k in Kind}, "the newest golden set must hold a record of every kind"


def facts_of(state: AgentState) -> dict[str, Any]:
    """The facts make_golden.py recorded, computed from a restored state."""
    (approval,) = state.open_approvals()
    return {
        "status": state.status,
        "last_seq": state.last_seq,
        "run_id": state.run_id,
        "task": state.task,
        "definition": state.definition,
        "ledger_done": sum(1 for e in state.ledger.values() if e["done"]),
        "approval_id": approval["approval_id"],
        "approval_tool": approval["tool"],
        "usage_steps": state.usage["steps"],
        "messages": len(state.messages),
        "report_title": approval["arguments"]["title"],
    }


def drop_snapshots(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM snapshots")


async def test_the_golden_database_restores_to_the_recorded_facts(golden: Path, database: Path) -> None:
    info = manifest(golden)["database"]
    async with Runtime(f"sqlite:///{database}", namespace=info["namespace"]) as rt:
        from_snapshot = await rt.status(info["agent_id"])
        stream = rt.stream(info["agent_id"])
        assert (await rt.store.get_snapshot(stream)).seq == info["facts"]["snapshot_seq"] < from_snapshot.last_seq
    assert facts_of(from_snapshot) == {k: v for k, v in info["facts"].items() if k != "snapshot_seq"}
    assert from_snapshot.status == "waiting_approval" and len(from_snapshot.ledger) == 3 * len(info["modules"])
    assert all(f"`{module}`" in from_snapshot.task for module in info["modules"])
    # The snapshot is the fold of its records: a replay of the whole journal agrees.
    await anyio.to_thread.run_sync(drop_snapshots, database)
    async with Runtime(f"sqlite:///{database}", namespace=info["namespace"]) as rt:
        assert (await rt.status(info["agent_id"])).to_wire() == from_snapshot.to_wire()


async def test_the_golden_agent_finishes_after_its_approval(golden: Path, database: Path, tmp_path: Path) -> None:
    info = manifest(golden)["database"]
    work = tmp_path / "work"
    # Whatever the demo agent became since the set was written, this resume runs on with it.
    agent = dataclasses.replace(survey_agent(work, latency=0), on_definition_change="continue")
    async with Runtime(f"sqlite:///{database}", agents=[agent], namespace=info["namespace"]) as rt:
        await rt.approve(info["agent_id"], info["facts"]["approval_id"], by="golden test")
        handle = await rt.resume(info["agent_id"])
        state = await handle.wait() if handle is not None else await rt.status(info["agent_id"])
    assert state.status == "finished" and state.result.startswith(f"Survey of {len(info['modules'])} modules")
    report = (work / "report.md").read_text(encoding="utf-8")
    assert report.startswith(f"# {info['facts']['report_title']}")
    assert all(f"| {module} |" in report for module in info["modules"])
    effects = [json.loads(line) for line in (work / "effects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["tool"] for e in effects] == ["publish_report"]  # nothing recorded as done ran again
