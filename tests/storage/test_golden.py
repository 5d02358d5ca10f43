"""Golden checkpoints: bytes written by earlier builds must stay readable by this one.

``tests/golden/<set>/`` holds a SQLite store and raw frames written by the
build of that schema version (``tests/golden/make_golden.py``, run by hand,
never by CI). Every run decodes each frame, validates it against the CDDL of
its own version, restores the agent from a copy of the database and runs it to
completion. A format change that breaks any of it fails here. Sets are never
regenerated; a new version adds a new set beside the old ones (as does a format
added within a version: ``record-v5-snapshot-v6-chained`` holds pages that
continue earlier ones, which its own tests below open and restore).
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
from durably._journal import page_reader
from durably._journal.records import RecordCodec
from durably.errors import CorruptRecordError
from durably.schemas._records import CURRENT_VERSIONS, RECORD_SCHEMA_ID, SCHEMA_NAMES, SNAPSHOT_SCHEMA_ID, Kind
from durably.storage import open_store
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


# Chained pages: a page compressed as the continuation of earlier pages of its snapshot
# (snapshot-v6.cddl, page-ref "base"). The set below was written once, after chains came:
# its snapshot names conversation pages that continue the ones before them and a ledger
# page that continues the conversation pages holding its calls' results.

CHAINED = GOLDEN / "record-v5-snapshot-v6-chained"


@pytest.fixture
def chained_database(tmp_path: Path):
    """A copy of the chained set's database (the checked-in file is never opened)."""
    info = manifest(CHAINED)["database"]
    source = CHAINED / info["file"]
    assert sha256(source) == info["sha256"], "the checked-in golden database was modified"
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    return copy


async def stored_chain(database: Path) -> tuple[dict[str, Any], page_reader.Chain]:
    """The golden snapshot's state as stored (page references included) and the ``Chain`` of
    its pages (conversation, then ledger) with their stored bytes, each checked against its digest."""
    info = manifest(CHAINED)["database"]
    stream, codec = StreamId(info["namespace"], info["agent_id"]), RecordCodec()
    async with open_store(f"sqlite:///{database}") as store:
        snapshot = await store.get_snapshot(stream)
        assert snapshot is not None and snapshot.seq == info["facts"]["snapshot_seq"]
        _, wire, _ = codec.decode_snapshot(snapshot, stream)
        refs = wire["pages"] + wire["ledger_pages"]
        blobs = {ref["digest"]: await store.get_blob(stream, ref["digest"]) for ref in refs}
    assert all(hashlib.sha256(data).hexdigest() == digest for digest, data in blobs.items())
    return wire, page_reader.Chain(refs, blobs, codec, stream, snapshot.seq)


async def test_the_chained_set_pages_are_stored_as_recorded_and_open_after_their_bases(chained_database: Path) -> None:
    paged = manifest(CHAINED)["database"]["paged"]
    wire, chain = await stored_chain(chained_database)
    conversation, ledger = wire["pages"], wire["ledger_pages"]
    assert (conversation, ledger) == (paged["pages"], paged["ledger_pages"])  # digests and bases, as written
    # What makes the set chained: each later conversation page continues the ones before it,
    # and a ledger page continues conversation pages.
    digests = [ref["digest"] for ref in conversation]
    assert "base" not in conversation[0]
    assert all(ref["base"] == digests[:i] for i, ref in enumerate(conversation[1:], start=1))
    assert any(ref.get("base") and set(ref["base"]) <= set(digests) for ref in ledger)
    found = chain.payloads(chain.refs)
    items = {section: [] for section in ("pages", "ledger_pages")}
    for section, refs in (("pages", conversation), ("ledger_pages", ledger)):
        for ref in refs:
            page = chain.codec.page_items(found[ref["digest"]], ref["s"], chain.stream)
            assert len(page) == ref["count"]
            items[section].extend(page)
    middle = paged["middle_message"]
    assert middle["index"] < len(items["pages"]), "the middle message is in a page"
    assert items["pages"][middle["index"]] == middle["message"]
    assert items["ledger_pages"] == paged["ledger"][: len(items["ledger_pages"])]


async def test_the_chained_set_restores_its_conversation_and_ledger(chained_database: Path) -> None:
    info = manifest(CHAINED)["database"]
    paged = info["paged"]
    async with Runtime(f"sqlite:///{chained_database}", namespace=info["namespace"]) as rt:
        assert (await rt.store.get_snapshot(rt.stream(info["agent_id"]))).seq == info["facts"]["snapshot_seq"]
        state = await rt.status(info["agent_id"])
    assert len(state.messages) == info["facts"]["messages"]
    assert state.messages[paged["middle_message"]["index"]] == paged["middle_message"]["message"]
    assert state.messages[-1] == paged["last_message"]
    assert [[key, entry] for key, entry in state.ledger.items()] == paged["ledger"]


@pytest.mark.parametrize("wrong", ["no base", "bases reordered", "a base left out"])
async def test_a_chained_golden_page_opened_with_the_wrong_base_bytes_is_refused(
    chained_database: Path, wrong: str
) -> None:
    wire, chain = await stored_chain(chained_database)
    found = chain.payloads(chain.refs)  # every page, each opened after its own bases
    for ref in (wire["pages"][-1], *[r for r in wire["ledger_pages"] if r.get("base")]):
        bases = [found[digest] for digest in ref["base"]]
        assert len(bases) >= 2, "each page tried continues two pages or more"
        prefix = {"no base": b"", "bases reordered": b"".join(bases[::-1]), "a base left out": b"".join(bases[1:])}[
            wrong
        ]
        with pytest.raises(CorruptRecordError):  # zstd's content checksum: refused, not misread
            chain.codec.open_page(chain.blobs[ref["digest"]], ref["s"], chain.stream, prefix)
        # The same through the chain, with the reference naming its bases wrongly.
        if wrong != "no base":
            named = ref["base"][::-1] if wrong == "bases reordered" else ref["base"][1:]
            refs = [{**r, "base": named} if r is ref else r for r in chain.refs]
            with pytest.raises(CorruptRecordError):
                page_reader.Chain(refs, chain.blobs, chain.codec, chain.stream, chain.seq).payloads([ref])
