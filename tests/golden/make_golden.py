"""Write a golden set: checkpoints in this build's wire format, read by every CI run from then on.

How to run it, by hand (never from CI), from the repository root with the
project's venv (it needs the ``otel`` extra, as the dev install has)::

    .venv/bin/python tests/golden/make_golden.py                       # tests/golden/<versions>/
    .venv/bin/python tests/golden/make_golden.py --out tests/golden/NAME
    .venv/bin/python tests/golden/make_golden.py --out /tmp/scratch    # a look, nothing committed

It writes ``tests/golden/v<N>/`` (``record-v<R>-snapshot-v<S>`` when the two
schema versions differ) for the current versions, or the directory ``--out``
names, and refuses a directory that exists: a released set's golden files never
change, and a format change that cannot read them is a bug, not a reason to
regenerate. ``--force`` replaces it (only for a set no release wrote, or a
scratch directory). A format added within a schema version (chained pages) gets
a set of its own under a new name (``--out``), beside the older ones. Then run
``tests/storage/test_golden.py`` and commit the directory.

A set holds:

* ``survey.sqlite3``: a SQLite store (the ``sqlite://`` adapter's layout) where the
  demo survey agent surveyed three standard-library modules and now waits for
  the approval of its ``publish_report`` call; snapshots every 4 records, so
  restore reads a snapshot and a tail; its rows are as this build stores them
  (a commit of several records as a group frame and member rows), and its
  snapshot names conversation and ledger pages (4 items each, 2 kept inline),
  blobs in the same database;
* ``frames/*.bin``: raw frames, one record of every kind (those the run wrote,
  plus hand-built ones for the kinds no runtime path writes) and a snapshot.
  Each is one record's frame that decodes alone: a record the run committed in
  a group is exported as the frame this build writes for it committed alone;
* ``manifest.json``: what each frame decodes to and the facts of the agent's
  state as the run saw them (``database.facts``; ``database.paged``: a middle
  and the last message, the ledger in order, and the page references of the
  stored snapshot as written), which ``tests/storage/test_golden.py`` checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import sqlite3
import sys
import tempfile
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import anyio
from opentelemetry.sdk.trace import TracerProvider

from durably import Runtime, SnapshotPolicy
from durably._journal import page_writer
from durably._cli.demo.survey import survey_agent, survey_task
from durably.schemas._records import CURRENT_VERSIONS, RECORD_SCHEMA_ID, SCHEMA_NAMES, SNAPSHOT_SCHEMA_ID, Kind, Record
from durably.storage._codec import Codec
from durably._journal.records import RecordCodec
from durably.storage._registry import open_store
from durably.storage._group_frames import is_group, is_member
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

HERE = Path(__file__).resolve().parent
MODULES = ["colorsys", "bisect", "fnmatch"]
AGENT_ID = "survey"
NAMESPACE = "default"
AT = 1_760_000_000.5  # a fixed time for hand-built records

#: Records of the kinds the survey run does not write, shaped as the runtime writes them.
EXTRA: dict[Kind, dict[str, Any]] = {
    Kind.RESUMED: {"worker": "golden:1", "pid": 1, "trace": {"trace_id": "0af7651916cd43dd8448eb211c80319c",
                                                              "span_id": "b7ad6b7169203331"}},
    Kind.MESSAGE_RECEIVED: {"role": "user", "content": "Keep it short."},
    Kind.PLAN_UPDATED: {"plan": ["read", "publish"]},
    Kind.ARTIFACT_STORED: {"name": "report.md", "digest": "0" * 64, "size": 1234},
    Kind.APPROVAL_DECIDED: {"approval_id": "t10", "approved": True, "by": "ops", "note": "fine"},
    Kind.BUDGET_EXCEEDED: {"limit": "steps", "allowed": 10, "spent": 10},
    Kind.BUDGET_EXTENDED: {"budget": {"steps": 20, "tokens": None, "cost_usd": 1.5}},
    Kind.HISTORY_COMPACTED: {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "summary"}]},
    Kind.FINISHED: {"result": {"modules": 3, "ok": True}},
    Kind.FAILED: {"reason": "model error: TimeoutError"},
    Kind.CANCELLED: {"reason": "operator"},
    Kind.DEFINITION_CHANGED: {
        "previous": {"name": "stdlib-survey", "version": "1", "digest": "0011223344556677"},
        "definition": {"name": "stdlib-survey", "version": "2", "digest": "8899aabbccddeeff"},
        "policy": "migrate", "state": {"plan": ["publish"]},
    },
    Kind.FORKED: {"namespace": "default", "agent_id": "survey-source", "run_id": "0" * 32, "seq": 7,
                  "keys": {"1" * 32: "2" * 32}},
    Kind.MODEL_FAILED: {"attempt": 1, "error": "TimeoutError", "transient": True, "retry_in": 0.75},
    Kind.RETRIED: {"worker": "golden:1", "reason": "model error: TimeoutError"},
    Kind.TOOL_FAILED: {"key": "3" * 32, "call_id": "t3", "tool": "read_module", "attempt": 1,
                       "error_type": "ConnectionError", "error": "ConnectionError: upstream reset",
                       "timed_out": False, "retry_in": 1.25, "retry_at": 1_700_000_001.5},
    Kind.TOOL_HEARTBEAT: {"key": "3" * 32, "call_id": "t3", "tool": "read_module", "attempt": 2,
                          "details": {"lines": 120}},
    Kind.TIMER_SET: {"wake_at": 1767323045.5, "call_id": "t11"},
    Kind.TIMER_FIRED: {"wake_at": 1767323045.5},
    Kind.CHILD_STARTED: {"key": "c" * 32, "call_id": "h1", "tool": "helper", "agent_id": "survey/h1",
                         "definition": "helper"},
    Kind.CHILD_ENDED: {"key": "c" * 32, "call_id": "h1", "tool": "helper", "agent_id": "survey/h1",
                       "status": "finished", "result": "found it", "error": None},
}


def set_name() -> str:
    """``v<N>`` when both schemas are at version N, else ``record-v<R>-snapshot-v<S>``."""
    record, snapshot = CURRENT_VERSIONS[RECORD_SCHEMA_ID], CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID]
    return f"v{record}" if record == snapshot else f"record-v{record}-snapshot-v{snapshot}"


async def run_survey(url: str, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the survey to its approval; return the facts of its live state, and its
    conversation and ledger facts (a middle and the last message, the ledger in order)."""
    agent = survey_agent(workdir, latency=0)
    # Traced (an SDK provider that exports nowhere), so the started record holds its trace reference.
    async with Runtime(url, agents=[agent], snapshot_policy=SnapshotPolicy(every_records=4, tail_ratio=0),
                       tracer_provider=TracerProvider()) as rt:
        state = await rt.run(agent, AGENT_ID, survey_task(MODULES))
    assert state.status == "waiting_approval", state.status
    (approval,) = state.open_approvals()
    facts = {
        "status": state.status, "last_seq": state.last_seq, "run_id": state.run_id, "task": state.task,
        "definition": state.definition, "ledger_done": sum(1 for e in state.ledger.values() if e["done"]),
        "approval_id": approval["approval_id"], "approval_tool": approval["tool"], "usage_steps": state.usage["steps"],
        "messages": len(state.messages), "report_title": approval["arguments"]["title"],
    }
    middle = len(state.messages) // 2
    paged = {
        "middle_message": {"index": middle, "message": state.messages[middle]},
        "last_message": state.messages[-1],
        "ledger": [[key, entry] for key, entry in state.ledger.items()],  # pairs: the order is a fact too
    }
    return facts, paged


def record_frames(codec: RecordCodec, stored: StoredRecord, stream: StreamId) -> list[tuple[Record, bytes]]:
    """Each record a stored row holds, with the frame of that record alone.

    A one-record commit's row is that frame itself. A commit of several records is
    stored as one group frame (format 4) and member rows (format 5), which hold no
    record of their own: the group's records come with the frames this build writes
    for each of them committed alone, so every frame of the set decodes by itself,
    as the frames of the sets before group frames did. A member row yields nothing
    (its record came with its group frame)."""
    if is_member(stored.data):
        return []
    if is_group(stored.data):
        return [(record, codec.encode_record(record, stream)) for record in codec.decode_group(stored, stream)]
    return [(codec.decode_record(stored, stream), stored.data)]


async def export_frames(url: str, out: Path) -> tuple[list[dict[str, Any]], StoredSnapshot]:
    """Write one frame per record kind of the run, its latest snapshot and the EXTRA records;
    return the manifest's entries and that snapshot."""
    stream, codec, raw = StreamId(NAMESPACE, AGENT_ID), RecordCodec(), Codec()
    entries, seen = [], set()
    async with open_store(url) as store:
        async for stored in store.read(stream):
            for record, data in record_frames(codec, stored, stream):
                if record.kind not in seen:
                    seen.add(record.kind)
                    entries.append((f"record-{record.seq:03d}-{record.kind}.bin", data, record.seq, record.kind))
        snapshot = await store.get_snapshot(stream)
    assert snapshot is not None, "the run wrote no snapshot"
    entries.append((f"snapshot-{snapshot.seq:03d}.bin", snapshot.data, snapshot.seq, None))
    for seq, (kind, data) in enumerate(sorted(EXTRA.items()), start=1):
        if kind.value not in seen:
            record = Record(seq, kind.value, data, AT)
            entries.append((f"record-extra-{kind.value}.bin", codec.encode_record(record, stream), seq, kind.value))
    out.mkdir()
    manifest = []
    for name, data, seq, kind in entries:
        (out / name).write_bytes(data)
        frame = raw.decode(data, stream=stream, seq=seq)  # format 2 frames are bound to their place
        manifest.append({"file": f"frames/{name}", "schema": SCHEMA_NAMES[frame.schema_id], "schema_id": frame.schema_id,
                         "version": frame.schema_version, "seq": seq, "kind": kind, "compressed": bool(data[3] & 1),
                         "value": frame.value})
    return manifest, snapshot


def copy_database(source: Path, target: Path) -> None:
    """A self-contained copy of ``source`` (no -wal file), in rollback-journal mode."""
    with sqlite3.connect(source) as db:
        db.execute("VACUUM INTO ?", (str(target),))
    db = sqlite3.connect(target)
    try:
        db.execute("PRAGMA journal_mode = DELETE")
    finally:
        db.close()


async def main(force: bool, out: Path | None = None) -> Path:
    """Write the set into ``out`` (default: ``tests/golden/`` and the versions' name); return its path."""
    # Small pages, so the survey's snapshots hold conversation and ledger pages (snapshot v6).
    page_writer.PAGE, page_writer.KEEP = 4, 2
    target = HERE / set_name() if out is None else out.resolve()
    if target.exists():
        if not force:
            sys.exit(f"{target} exists: golden files of a released version never change (use --force for an unreleased one)")
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        url = f"sqlite:///{work / 'survey.sqlite3'}"
        facts, paged = await run_survey(url, work / "effects")
        target.mkdir(parents=True)
        frames, snapshot = await export_frames(url, target / "frames")
        copy_database(work / "survey.sqlite3", target / "survey.sqlite3")
    facts["snapshot_seq"] = snapshot.seq
    _, state, _ = RecordCodec().decode_snapshot(snapshot, StreamId(NAMESPACE, AGENT_ID))
    for _, section in page_writer.SECTIONS:  # the references as stored, a page's base in order
        paged[section] = state.get(section, [])
    manifest = {
        "schema_versions": {SCHEMA_NAMES[k]: v for k, v in sorted(CURRENT_VERSIONS.items())},
        "written_by": {"durably": package_version("durably"), "python": platform.python_version()},
        "database": {"file": "survey.sqlite3", "sha256": hashlib.sha256((target / "survey.sqlite3").read_bytes()).hexdigest(),
                     "namespace": NAMESPACE, "agent_id": AGENT_ID, "modules": MODULES, "facts": facts, "paged": paged},
        "frames": frames,
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the set's directory (default: tests/golden/ and the versions' name)")
    parser.add_argument("--force", action="store_true", help="replace an existing set (only for an unreleased version)")
    args = parser.parse_args()
    print(anyio.run(main, args.force, args.out))
