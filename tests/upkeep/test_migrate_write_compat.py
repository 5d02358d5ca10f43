"""``durably migrate`` during a rolling upgrade writes only what the oldest release running reads.

A fleet upgraded one worker at a time runs with ``write_compat="0.1"`` (the option or
``$DURABLY_WRITE_COMPAT``): the 0.1 release reads snapshots up to version 5. A migrate
run then must not lift snapshots past that, or the old workers skip them as unreadable:
it takes the same setting, lifts older snapshots only to version 5, and leaves newer
ones as written. The 0.1 release, run from this repository's history, restores the
agent from its snapshot afterwards.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from previous_release import old, previous_release_tree  # noqa: F401 - the fixture

from durably import Runtime, SnapshotPolicy
from durably._cli.demo.survey import survey_agent, survey_task
from durably._cli.main import main
from durably._journal.records import RecordCodec
from durably._journal.write_formats import NEWEST, RELEASES, WriteFormats
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

STREAM = StreamId("default", "survey")

#: Run by the 0.1 release: restore the agent and print its status.
OLD_STATUS = """
import json, sys
import anyio
from durably import Runtime

async def main(url):
    async with Runtime(url) as rt:
        print(json.dumps({"status": (await rt.status("survey")).status}))

anyio.run(main, sys.argv[1])
"""


async def write_under_write_compat(url: str, workdir: Path) -> None:
    """The survey up to its approval, as a fleet under ``write_compat="0.1"`` writes it (v5 snapshots, three kept)."""
    agent = survey_agent(workdir, latency=0)
    policy = SnapshotPolicy(every_records=4, tail_ratio=0, keep=3)
    async with Runtime(url, agents=[agent], snapshot_policy=policy, write_compat="0.1") as rt:
        state = await rt.run(agent, "survey", survey_task(["colorsys", "bisect", "fnmatch"]))
    assert state.status == "waiting_approval"


async def restamp_newest_snapshot(url: str, version: int) -> int:
    """Store the newest snapshot again, the same state stamped as ``version`` (4: a snapshot an
    older build wrote; 4 to 6 differ in no field this state holds). Returns its seq."""
    codec = RecordCodec()
    stamped = RecordCodec(formats=WriteFormats(None, group_frames=False, snapshot=version))
    async with open_store(url) as store:
        found = await store.get_snapshot(STREAM)
        assert found is not None
        seq, state, _frame = codec.decode_snapshot(found, STREAM)
        await store.put_snapshot(STREAM, seq, stamped.encode_snapshot(seq, state, STREAM))
    return seq


def stored(db: Path) -> tuple[list[bytes], list[int]]:
    """The record rows in seq order, and the version of every snapshot frame."""
    with sqlite3.connect(db) as conn:
        records = [row[0] for row in conn.execute("SELECT data FROM records ORDER BY stream_id, seq")]
        snapshots = [int.from_bytes(row[0][5:7], "big") for row in conn.execute("SELECT data FROM snapshots")]
    return records, snapshots


async def migrate(*argv: str) -> int:
    """``durably migrate ARGV`` in a worker thread (the command runs its own event loop)."""
    return await anyio.to_thread.run_sync(main, ["migrate", *argv])


@pytest.mark.parametrize("how", ["option", "environment"])
async def test_migrate_under_write_compat_lifts_snapshots_only_to_what_the_previous_release_reads(
    tmp_path: Path, previous_release: Path, how: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    db = tmp_path / "fleet.db"
    url = f"sqlite:///{db}"
    await write_under_write_compat(url, tmp_path / "work")
    seq = await restamp_newest_snapshot(url, 4)
    records, versions = stored(db)
    assert sorted(versions)[0] == 4 and set(versions) == {4, RELEASES["0.1"].snapshot_version}

    if how == "option":
        status = await migrate("--store", url, "--write-compat", "0.1")
    else:
        monkeypatch.setenv("DURABLY_WRITE_COMPAT", "0.1")
        status = await migrate("--store", url)
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"snapshot seq {seq} v4 rewritten as v5" in out and "1 changed" in out, out

    after, versions = stored(db)
    assert after == records  # migrate never writes records
    assert set(versions) == {5}, versions  # main: every v5 snapshot lifted to v6, the old release's skipped

    ran = old(previous_release, "-c", OLD_STATUS, url, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "unreadable" not in ran.stderr, ran.stderr  # restored from the snapshot, none skipped
    assert ran.stdout.strip().endswith('{"status": "waiting_approval"}'), ran.stdout


async def test_migrate_under_write_compat_leaves_a_newer_snapshot_as_written(tmp_path: Path, capsys) -> None:
    db = tmp_path / "mixed.db"
    url = f"sqlite:///{db}"
    await write_under_write_compat(url, tmp_path / "work")
    seq = await restamp_newest_snapshot(url, NEWEST.snapshot_version)  # a new worker's, before the setting
    records, before = stored(db)

    assert await migrate("--store", url, "--write-compat", "0.1.2") == 0
    out = capsys.readouterr().out
    assert f"snapshot seq {seq} v{NEWEST.snapshot_version} left as written" in out and "0 changed" in out, out
    assert stored(db) == (records, before)

    assert await migrate("--store", url, "--write-compat", "0.7") == 2  # no such release: a usage error
    assert await migrate("--store", url) == 0  # unset: this build's newest, as before
    assert set(stored(db)[1]) == {NEWEST.snapshot_version}
