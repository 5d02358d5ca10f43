"""A fleet upgraded one worker at a time: what this build writes must be read by the previous release.

The previous release (0.1, ``previous_release.PREVIOUS_RELEASE`` in this repository's history)
reads frame formats 1 to 3 and snapshots up to version 5. Its code is taken
from git and run in its own process on the very SQLite file this build wrote,
as an old worker taking over an agent would: restore, ``durably verify``,
approve and run to the end. With ``write_compat="0.1"`` it all reads back;
without it the old release refuses the agent and leaves its bytes as they are.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from previous_release import old, previous_release_tree  # noqa: F401 - the fixture
from schema_wire import validate_frame

from durably import Runtime, SnapshotPolicy
from durably._cli.demo.survey import survey_agent, survey_task
from durably._cli.main import cli
from durably._cli.output import Output
from durably._cli.worker import _warn_of_older_readers
from durably._fleet.workers import WORKERS_NAMESPACE, list_workers
from durably._journal import page_writer
from durably._journal.records import RecordCodec
from durably._journal.write_formats import NEWEST, RELEASES, write_formats
from durably.errors import ArgumentTypeError, InvalidArgumentError, UnencodableValueError
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._spi import StreamId

MODULES = ["colorsys", "bisect", "fnmatch"]
AGENT = "survey"

#: Run by the previous release: restore the agent as a worker taking it over does, approve
#: its open approval, run it to the end, and print what it saw.
OLD_WORKER = """
import json, sys
from pathlib import Path
import anyio, durably
assert durably.__file__.startswith(sys.argv[1]), durably.__file__
from durably import Runtime
from durably._cli.demo.survey import survey_agent

async def main(url, workdir):
    agent = survey_agent(Path(workdir), latency=0)
    async with Runtime(url, agents=[agent]) as rt:
        restored = await rt.status("survey")
        if sys.argv[4] == "restore-only":
            print(json.dumps({"status": restored.status}))
            return
        (approval,) = restored.open_approvals()
        await rt.approve("survey", approval["approval_id"], by="ops")
        handle = await rt.resume("survey")
        if handle is not None:
            await handle.wait()
        final = await rt.wait("survey", "finished", timeout=60)
        print(json.dumps({"restored": restored.status, "seq": restored.last_seq, "final": final.status,
                          "final_seq": final.last_seq, "result": final.result}))

anyio.run(main, sys.argv[2], sys.argv[3])
"""


async def write_survey(db: Path, workdir: Path, write_compat: str | None) -> int:
    """Run the survey with this build up to its approval; small pages, so the newest formats would page."""
    agent = survey_agent(workdir, latency=0)
    policy = SnapshotPolicy(every_records=4, tail_ratio=0)
    async with Runtime(f"sqlite:///{db}", agents=[agent], snapshot_policy=policy, write_compat=write_compat) as rt:
        state = await rt.run(agent, AGENT, survey_task(MODULES))
    assert state.status == "waiting_approval"
    return state.last_seq


def stored(db: Path) -> tuple[list[bytes], list[bytes], int]:
    """The agent's record rows in seq order, its snapshot frames, and how many blobs the file holds."""
    with sqlite3.connect(db) as conn:
        records = [row[0] for row in conn.execute("SELECT data FROM records ORDER BY stream_id, seq")]
        snapshots = [row[0] for row in conn.execute("SELECT data FROM snapshots ORDER BY seq")]
        blobs = conn.execute("SELECT count(*) FROM blobs").fetchone()[0]
    return records, snapshots, blobs


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_writer, "PAGE", 4)
    monkeypatch.setattr(page_writer, "KEEP", 2)


@pytest.mark.usefixtures("small_pages")
async def test_by_default_a_commit_is_a_group_frame_and_snapshots_are_paged(tmp_path: Path) -> None:
    await write_survey(tmp_path / "new.db", tmp_path, None)
    records, snapshots, blobs = stored(tmp_path / "new.db")
    assert {4, 5} <= {row[2] for row in records}
    assert snapshots and all(int.from_bytes(frame[5:7], "big") == 6 for frame in snapshots)
    assert blobs > 0


@pytest.mark.usefixtures("small_pages")
async def test_write_compat_writes_one_frame_per_record_and_unpaged_v5_snapshots(tmp_path: Path) -> None:
    db = tmp_path / "compat.db"
    last = await write_survey(db, tmp_path, "0.1")
    records, snapshots, blobs = stored(db)
    assert len(records) == last and {row[2] for row in records} <= {1, 2, 3}
    assert snapshots and blobs == 0
    for frame in snapshots:
        header = validate_frame(frame)  # against snapshot-v5.cddl: what the previous release reads
        assert (header["schema-id"], header["schema-version"]) == (2, 5)
    for frame in records[:3]:
        validate_frame(frame)
    # This build reads it all back, snapshot and tail, and agrees with the journal alone.
    async with Runtime(f"sqlite:///{db}") as rt:
        state = await rt.status(AGENT)
    assert (state.status, state.last_seq) == ("waiting_approval", last)


@pytest.mark.usefixtures("small_pages")
async def test_the_previous_release_takes_over_an_agent_written_under_write_compat(
    tmp_path: Path, previous_release: Path
) -> None:
    db = tmp_path / "fleet.db"
    last = await write_survey(db, tmp_path / "new", "0.1")
    url = f"sqlite:///{db}"

    checked = old(previous_release, "-m", "durably", "verify", "--store", url, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "every frame reads back" in checked.stdout

    ran = old(
        previous_release, "-c", OLD_WORKER, str(previous_release), url, str(tmp_path / "old"), "run", cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr
    assert "unreadable" not in ran.stderr and "newer than this build" not in ran.stderr
    seen = json.loads(ran.stdout.splitlines()[-1])
    assert (seen["restored"], seen["seq"], seen["final"]) == ("waiting_approval", last, "finished")

    # And back: this build reads what the old worker appended, to the same end.
    async with Runtime(url) as rt:
        state = await rt.status(AGENT)
    assert (state.status, state.last_seq, state.result) == ("finished", seen["final_seq"], seen["result"])


@pytest.mark.usefixtures("small_pages")
async def test_without_write_compat_the_previous_release_refuses_the_agent_and_leaves_its_bytes(
    tmp_path: Path, previous_release: Path
) -> None:
    db = tmp_path / "new.db"
    await write_survey(db, tmp_path, None)
    before = stored(db)
    url = f"sqlite:///{db}"

    ran = old(
        previous_release, "-c", OLD_WORKER, str(previous_release), url, str(tmp_path), "restore-only", cwd=tmp_path
    )
    assert ran.returncode != 0
    assert "CorruptRecordError: unknown frame format version 4" in ran.stderr
    checked = old(previous_release, "-m", "durably", "verify", "--store", url, cwd=tmp_path)
    assert checked.returncode == 1 and "DAMAGED" in checked.stdout  # what an operator of the old release sees

    assert stored(db) == before  # nothing rewritten, nothing lost
    async with Runtime(url) as rt:
        assert (await rt.status(AGENT)).status == "waiting_approval"


@pytest.mark.usefixtures("small_pages")
async def test_switched_on_late_a_v5_snapshot_over_the_group_frames_lets_the_previous_release_restore(
    tmp_path: Path, previous_release: Path
) -> None:
    db = tmp_path / "late.db"
    await write_survey(db, tmp_path, None)  # group frames and a paged snapshot
    url = f"sqlite:///{db}"
    agent = survey_agent(tmp_path, latency=0)
    policy = SnapshotPolicy(every_records=2, tail_ratio=0)
    async with Runtime(url, agents=[agent], snapshot_policy=policy, write_compat="0.1") as rt:
        (approval,) = (await rt.status(AGENT)).open_approvals()
        await rt.approve(AGENT, approval["approval_id"], by="ops")
        handle = await rt.resume(AGENT)
        if handle is not None:
            await handle.wait()
        final = await rt.wait(AGENT, "finished", timeout=60)
    records, snapshots, blobs = stored(db)
    assert 4 in {row[2] for row in records}  # records are never rewritten ...
    assert [frame[5:7] for frame in snapshots] == [(5).to_bytes(2, "big")] and blobs == 0  # ... the pages went

    ran = old(
        previous_release, "-c", OLD_WORKER, str(previous_release), url, str(tmp_path), "restore-only", cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == {"status": final.status}


@pytest.mark.usefixtures("small_pages")
async def test_a_key_rotation_under_write_compat_writes_unpaged_v5_snapshots(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    last = await write_survey(db, tmp_path, "0.1")
    keys = AESGCMCipher(StaticKeyProvider({"k1": generate_key()}), allow_plaintext=True)
    async with Runtime(f"sqlite:///{db}", encryption=keys, write_compat="0.1") as rt:
        (report,) = await rt.reencrypt()
        assert set(report.after) == {"k1"}
        state = await rt.status(AGENT)
    records, snapshots, blobs = stored(db)
    assert {row[2] for row in records} <= {1, 2, 3} and blobs == 0
    assert snapshots and all(frame[5:7] == (5).to_bytes(2, "big") for frame in snapshots)
    assert (state.status, state.last_seq) == ("waiting_approval", last + 1)  # and the rotation's marker


def test_the_setting_names_a_release(monkeypatch: pytest.MonkeyPatch) -> None:
    assert write_formats(None) is NEWEST and write_formats("") is NEWEST
    assert write_formats("0.1") is RELEASES["0.1"] and write_formats(" 0.1.4 ") is RELEASES["0.1"]
    for bad in ("0.2", "1", "latest", "0.1.x", "v0.1"):
        with pytest.raises(InvalidArgumentError, match="names no release"):
            write_formats(bad)
    with pytest.raises(ArgumentTypeError):
        write_formats(0.1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="write_compat"):
        Runtime("memory://", write_compat="9.9")
    with pytest.raises(ArgumentTypeError, match="write_compat"):
        Runtime("memory://", write_compat=1)  # type: ignore[arg-type]

    monkeypatch.setenv("DURABLY_WRITE_COMPAT", "0.1")
    assert Runtime("memory://").write_formats is RELEASES["0.1"]
    assert Runtime("memory://", write_compat="").write_formats is NEWEST  # an explicit value wins
    monkeypatch.setenv("DURABLY_WRITE_COMPAT", "0.9")
    with pytest.raises(InvalidArgumentError, match=r"\$DURABLY_WRITE_COMPAT"):
        Runtime("memory://")


def test_the_worker_refuses_an_unknown_release_before_it_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["worker", "--agents", "cli_agents:flaky", "--store", f"sqlite:///{tmp_path / 'w.db'}", "--write-compat", "7"],
    )
    assert result.exit_code == 2, result.output
    assert "names no release" in result.output
    assert not (tmp_path / "w.db").exists()


def test_an_unpaged_snapshot_never_names_pages() -> None:
    codec = RecordCodec(formats=RELEASES["0.1"])
    stream = StreamId("default", "a")
    ref = {"digest": "0" * 64, "s": 3, "count": 4}
    with pytest.raises(UnencodableValueError, match="inline"):
        codec.encode_snapshot(3, {"messages": [], "pages": [ref]}, stream)
    records = RecordCodec(formats=RELEASES["0.1"]).commit_frames([b"\xa0", b"\xa0", b"\xa0"], 4, stream)
    assert len(records) == 3 and {row[2] for row in records} <= {2, 3}  # small payloads go uncompressed (format 2)
    assert [row[2] for row in RecordCodec().commit_frames([b"\xa0", b"\xa0", b"\xa0"], 4, stream)] == [4, 5, 5]


def old_beat(worker_id: str) -> bytes:
    """A live heartbeat as the 0.1 release writes it: the same JSON, without ``reads`` or ``writes``."""
    now = time.time()
    fields = {
        "owner": f"{worker_id}/owner",
        "worker_id": worker_id,
        "host": "old-host",
        "pid": 7,
        "namespace": "default",
        "definitions": ["stdlib-survey"],
        "started_at": now - 60,
        "beat_at": now,
        "agents": 0,
        "agent_ids": [],
        "state": "serving",
    }
    return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()


async def test_a_worker_of_the_previous_release_is_named_and_warned_about(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    async with Runtime(url) as rt:
        await rt.store.append(StreamId(WORKERS_NAMESPACE, "old-1"), 0, [old_beat("old-1")])
        out = Output()
        lines: list[str] = []
        out.line = lines.append  # type: ignore[method-assign]
        await _warn_of_older_readers(rt, "default", 5.0, out)
        assert len(lines) == 1 and "old-1 (old-host, pid 7)" in lines[0] and "--write-compat 0.1" in lines[0]
    async with Runtime(url, write_compat="0.1") as rt:
        lines.clear()
        await _warn_of_older_readers(rt, "default", 5.0, out)
        assert lines == []  # what it writes, the old worker reads

    lines.clear()
    await _warn_of_older_readers(rt, "default", 5.0, out)  # its store is closed now: no listing, no warning
    assert lines == []

    result = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(cli, ["workers", "--store", url, "--json"]))
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["workers"]
    assert (row["worker_id"], row["reads"], row["writes"]) == ("old-1", [3, 5], [3, 5])


async def test_the_previous_release_lists_a_worker_of_this_one(tmp_path: Path, previous_release: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    async with Runtime(url, worker_id="new-1", write_compat="0.1") as rt, anyio.create_task_group() as tg:
        tg.start_soon(rt.serve, 0.05)
        heartbeats = rt._activations.leases.heartbeats
        assert heartbeats is not None
        with anyio.fail_after(30):
            while heartbeats.last_written is None:
                await anyio.sleep(0.05)
        listed = await anyio.to_thread.run_sync(
            lambda: old(previous_release, "-m", "durably", "workers", "--store", url, "--json", cwd=tmp_path)
        )
        ours = await list_workers(rt.store, "default")
        tg.cancel_scope.cancel()
    assert listed.returncode == 0, listed.stderr
    assert [(w["worker_id"], w["status"]) for w in json.loads(listed.stdout)["workers"]] == [("new-1", "live")]
    assert [(b.reads, b.writes) for b in ours] == [(NEWEST.levels, RELEASES["0.1"].levels)]
