"""Adversarial tests of two changes: ``SQLiteStore.read_restore`` (a restore's reads in one
statement, one read transaction) and ``resume_all``'s gathering (a chunk's resumes wait up to
``GATHER_SECONDS`` for each other before their ``resumed`` appends).

The restore races another process writing the same file (``restore_race_writer.py``: appends,
snapshots, compaction, snapshot deletion, purges), reads damaged rows, and must always return
the fold of the journal from scratch at some seq of one run, or a typed error for damage.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest
from restore_race_writer import STREAM, fold
from support_agents import StepModel, list_agent

from durably import AgentDefinition, Runtime
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably.adapters.sqlite import SQLiteStore
from durably.errors import RuntimeNotStartedError
from durably.storage._errors import (
    CorruptRecordError,
    StoreClosedError,
    StoreUnavailableError,
    TruncatedRecordError,
)
from durably.storage._spi import StreamId

WRITER = Path(__file__).resolve().parents[1] / "support" / "restore_race_writer.py"


class Truth:
    """The state of ``(run, seq)`` folded from scratch, cached."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], dict] = {}

    def __call__(self, run: str, seq: int) -> dict:
        if (run, seq) not in self._cache:
            self._cache[(run, seq)] = fold(run, seq).to_wire()
        return self._cache[(run, seq)]


async def _race(tmp_path: Path, *, compact: bool, purge: bool, travel: bool, seconds: float = 3.0) -> dict:
    """Restore ``STREAM`` over and over while the writer process works on it; every state
    restored must be the truth of its run and seq. Returns the writer's report and counts."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    async with SQLiteStore(url) as store:
        await store.put_blob(StreamId("ns", "other"), b"x")  # the file exists before either side opens it
    truth, codec, rng = Truth(), RecordCodec(), random.Random(7)
    counts = {"restores": 0, "states": 0, "travels": 0}
    writer = await anyio.open_process(
        [sys.executable, str(WRITER), url, str(seconds), "11", str(int(compact)), str(int(purge))]
    )
    async with SQLiteStore(url) as store, writer:
        seen: tuple[str, int] | None = None  # the run and last seq of the latest full restore
        while writer.returncode is None:
            restored = await restore(store, codec, STREAM)
            counts["restores"] += 1
            if restored is not None:
                state = restored.state
                assert state.to_wire() == truth(state.run_id, state.last_seq), (state.run_id, state.last_seq)
                counts["states"] += 1
                seen = (state.run_id, state.last_seq)
            if travel and seen is not None:
                upto = rng.randrange(1, seen[1] + 3)
                back = await restore(store, codec, STREAM, upto=upto)
                counts["travels"] += 1
                if back is not None:
                    state = back.state
                    assert state.last_seq <= upto
                    assert state.to_wire() == truth(state.run_id, state.last_seq)
                    if state.run_id == seen[0] and upto <= seen[1]:
                        assert state.last_seq == upto, "the run had reached upto: its state there, exactly"
            await anyio.lowlevel.checkpoint()
        assert writer.stdout is not None
        out = await writer.stdout.receive()
        assert await writer.wait() == 0
    return {**json.loads(out), **counts}


async def test_restore_racing_appends_snapshots_compaction_and_purges(tmp_path) -> None:
    report = await _race(tmp_path, compact=True, purge=True, travel=False)
    assert report["appended"] > 300 and len(report["runs"]) >= 2 and report["states"] > 50, report


async def test_time_travel_racing_appends_snapshot_deletion_and_purges(tmp_path) -> None:
    report = await _race(tmp_path, compact=False, purge=True, travel=True)
    assert report["appended"] > 300 and len(report["runs"]) >= 2 and report["travels"] > 50, report


class PurgedBetweenPages(SQLiteStore):
    """A real SQLite store; before the restore reads past its first page, another connection
    (``writer``) purges the stream and writes a new run of ``records`` records: the race,
    pinned to the one moment a restore reads in a second transaction."""

    writer: SQLiteStore | None = None
    records = 0

    async def read(self, stream, after_seq=0, *, page_size=512):  # type: ignore[override]
        if self.writer is not None and after_seq > 0:
            writer, self.writer = self.writer, None
            await writer.delete_stream(stream)
            await _write_run(writer, "run-b", self.records)
        async for stored in super().read(stream, after_seq, page_size=page_size):
            yield stored


async def _write_run(store: SQLiteStore, run: str, count: int) -> None:
    from restore_race_writer import record

    from durably.storage._spi import AppendRequest

    codec = RecordCodec()
    frames = [codec.encode_record(record(run, n), STREAM) for n in range(1, count + 1)]
    await store.append_batch([AppendRequest(STREAM, 0, frames)])


@pytest.mark.parametrize("new_run", [300, 1500], ids=["shorter", "longer"])
async def test_a_purge_and_a_new_run_between_tail_pages_never_mix_runs(tmp_path, new_run: int) -> None:
    """A tail longer than one page is read in a second transaction: a purge and a new run of
    the same agent id in between must not give the old run's first page followed by the new
    run's records (a state that never existed), nor report the purge as damage."""
    url = f"sqlite:///{tmp_path / 'pages.db'}"
    async with SQLiteStore(url) as writer, PurgedBetweenPages(url) as store:
        await _write_run(writer, "run-a", 1000)
        store.writer, store.records = writer, new_run
        restored = await restore(store, RecordCodec(), STREAM)
        assert store.writer is None, "the restore read a second page"
        assert restored is not None
        state = restored.state
        assert (state.run_id, state.last_seq) == ("run-b", new_run)
        assert state.to_wire() == fold("run-b", new_run).to_wire()


#: Damage done to a journal of records 1..12 (snapshots at 4 and 8) with the sqlite3 module: the
#: SQL, then what a restore and a restore up to seq 11 must give: the truth at (the snapshot used,
#: the seq), or that typed error.
DAMAGE = {
    "snapshot bytes cut": (
        "UPDATE snapshots SET data = substr(data, 1, length(data) - 3) WHERE seq = 8",
        (4, 12),
        (4, 11),
    ),
    "snapshot a TEXT cell": ("UPDATE snapshots SET data = 'x' WHERE seq = 8", (4, 12), (4, 11)),
    "snapshot an empty blob": ("UPDATE snapshots SET data = X'' WHERE seq = 8", (4, 12), (4, 11)),
    "snapshot moved past the last seq": ("UPDATE snapshots SET seq = 50 WHERE seq = 8", (4, 12), (4, 11)),
    "snapshot seq a REAL": ("UPDATE snapshots SET seq = 8.5 WHERE seq = 8", (0, 12), (0, 11)),
    "seq 1 compacted": ("DELETE FROM records WHERE seq = 1", (8, 12), (8, 11)),
    "tail record cut": (
        "UPDATE records SET data = substr(data, 1, length(data) - 2) WHERE seq = 10",
        TruncatedRecordError,
        TruncatedRecordError,
    ),
    "last record torn": ("UPDATE records SET data = substr(data, 1, 5) WHERE seq = 12", TruncatedRecordError, (8, 11)),
    "tail record an INTEGER cell": (
        "UPDATE records SET data = 7 WHERE seq = 10",
        CorruptRecordError,
        CorruptRecordError,
    ),
    "tail record seq a REAL": ("UPDATE records SET seq = 10.5 WHERE seq = 10", CorruptRecordError, CorruptRecordError),
    "tail record seq a TEXT": ("UPDATE records SET seq = 'ten' WHERE seq = 10", CorruptRecordError, CorruptRecordError),
    "last record seq past the end": (
        "UPDATE records SET seq = 9223372036854775807 WHERE seq = 12",
        CorruptRecordError,
        (8, 11),
    ),
    "last seq a TEXT": ("UPDATE streams SET last_seq = 'abc'", CorruptRecordError, CorruptRecordError),
}


@pytest.mark.parametrize("damage", DAMAGE)
async def test_a_damaged_row_gives_an_older_snapshot_or_a_typed_error(tmp_path, damage: str) -> None:
    sql, *expected = DAMAGE[damage]
    url, codec = f"sqlite:///{tmp_path / 'damaged.db'}", RecordCodec()
    async with SQLiteStore(url) as store:
        await _write_run(store, "r", 12)
        for seq in (4, 8):
            await store.put_snapshot(STREAM, seq, codec.encode_snapshot(seq, fold("r", seq).to_wire(), STREAM))
    with sqlite3.connect(tmp_path / "damaged.db") as db:
        db.execute(sql)
    async with SQLiteStore(url) as store:
        for upto, want in zip((None, 11), expected, strict=False):
            if isinstance(want, tuple):
                restored = await restore(store, codec, STREAM, upto=upto)
                assert restored is not None
                assert (restored.snapshot_seq, restored.state.last_seq) == want
                assert restored.state.to_wire() == fold("r", want[1]).to_wire()
            else:
                with pytest.raises(want):
                    await restore(store, codec, STREAM, upto=upto)


# -- resume_all's gathering under cancellation and failures ----------------------------------

AGENTS = 20  # two chunks of RESUME_CONCURRENCY (16): the second chunk's gate too


class Gated(StepModel):
    """Two tool steps, then an answer; blocks forever while ``open`` is false (a resumed agent
    then stays live until its runtime exits, having journaled nothing but ``resumed``)."""

    open = False

    async def respond(self, messages, tools):
        if not self.open:
            await anyio.sleep_forever()
        return await super().respond(messages, tools)


def _agent(effects: list) -> AgentDefinition:
    """One definition for every phase (the same digest: no definition change on resume)."""
    definition = list_agent(2, effects, name="a")
    return AgentDefinition(name="a", model=Gated(2), tools=definition.tools)


async def _runnable(url: str, definition: AgentDefinition, count: int = AGENTS) -> list[str]:
    """``count`` agents whose journal says running (their runtime exited mid-step)."""
    ids = [f"ag{i:02}" for i in range(count)]
    async with Runtime(url, agents=[definition]) as rt:
        for agent_id in ids:
            await rt.start("a", agent_id, "task")
    return ids


async def _settled(
    url: str, definition: AgentDefinition, ids: list[str], effects: list, *, leases_left: bool = False
) -> None:
    """Every agent still restores as running with no lease held (unless ``leases_left``: then
    held by dead runtimes), and a new runtime resumes them all at once and runs each to the
    end, every tool call once."""
    definition.model.open = True
    async with Runtime(url, agents=[definition]) as rt:
        for agent_id in ids:
            assert (await rt.status(agent_id)).status == "running", agent_id
            if not leases_left:
                assert await rt.store.get_lease(rt.stream(agent_id)) is None, f"{agent_id}: a lease left behind"
        handles = await rt.resume_all()
        assert sorted(h.agent_id for h in handles) == ids
        for handle in handles:
            assert (await handle.wait()).status == "finished"
    assert len(effects) == len(set(effects)) == 2 * len(ids)


def _no_other_tasks() -> None:
    import asyncio

    others = asyncio.all_tasks() - {asyncio.current_task()}
    assert not others, others


async def test_resume_all_cancelled_at_any_moment_leaves_no_lease_nor_task(tmp_path) -> None:
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition)
    kept = []  # the runtimes stay referenced (alive): a lease they left is a live holder's
    for step in range(0, 32, 2):
        async with Runtime(url, agents=[definition]) as rt:
            kept.append(rt)
            with anyio.fail_after(10):
                with anyio.move_on_after(step / 1000):
                    await rt.resume_all()
        _no_other_tasks()
    await _settled(url, definition, ids, effects)


async def test_a_runtime_cancelled_at_any_moment_of_its_resume_all_leaves_no_lease_nor_task(tmp_path) -> None:
    """The deadline covers the runtime's start, the scan and the runtime's exit."""
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition)
    kept = []
    for step in range(0, 64, 3):
        with anyio.fail_after(10):
            with anyio.move_on_after(step / 1000):
                async with Runtime(url, agents=[definition]) as rt:
                    kept.append(rt)
                    await rt.resume_all()
        _no_other_tasks()
    await _settled(url, definition, ids, effects)


async def test_a_runtime_exiting_while_its_resume_all_runs_elsewhere(tmp_path, caplog) -> None:
    """resume_all in a task of an outer task group, the runtime's block ending meanwhile: the
    scan ends with a typed error (the store is closed) or its handles, never an untyped one.
    The leases it could not give back (the store closed under it) are a dead runtime's once
    that runtime is gone, and the next runtime of this process takes them at once."""
    import gc
    import logging

    # "lease not released" warnings carry the error, whose traceback holds the runtime: a
    # captured record would keep it alive, and its leases a live holder's.
    caplog.set_level(logging.ERROR, logger="durably.leases")
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition)
    outcomes: list = []

    async def scan(rt: Runtime) -> None:
        try:
            outcomes.append(len(await rt.resume_all()))
        except (StoreClosedError, RuntimeNotStartedError) as exc:
            outcomes.append(type(exc).__name__)

    for step in range(0, 32, 2):
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                async with Runtime(url, agents=[definition]) as rt:
                    tg.start_soon(scan, rt)
                    await anyio.sleep(step / 1000)
        _no_other_tasks()
        del rt
        gc.collect()  # the runtime is gone: a lease it left is a dead holder's
    assert len(outcomes) == 16, outcomes
    # Only durably's records: gc.collect() may also finalise another test's leftover HTTP
    # client, whose close asyncio logs as "Task exception was never retrieved".
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("durably")]
    assert not errors, errors  # e.g. "unexpected error restoring it": anyio's RuntimeError from a closed task group
    await _settled(url, definition, ids, effects, leases_left=True)


HOLDER = """
import sys, anyio
from durably.adapters.sqlite import SQLiteStore
from durably._fleet.owner import new_identity
from durably.storage._spi import StreamId

class Keeper:  # what new_identity registers (weakly) for as long as this holder lives
    pass

async def main(url, agent_id):
    keeper = Keeper()
    async with SQLiteStore(url) as store:
        lease = await store.acquire_lease(StreamId("default", agent_id), str(new_identity("other", keeper)), 600)
        print("held" if lease else "refused", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the test closes our stdin

anyio.run(main, *sys.argv[1:3])
"""


async def test_one_corrupt_and_one_leased_agent_of_a_chunk_do_not_stop_the_others(tmp_path) -> None:
    """In one chunk: an agent whose journal is damaged and one whose lease another live process
    holds; the others are resumed (gathered) and finish, those two are left as they are."""
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition, 12)
    with sqlite3.connect(tmp_path / "g.db") as db:
        db.execute(
            "UPDATE records SET data = X'00' WHERE seq = 1 AND stream_id = "
            "(SELECT id FROM streams WHERE agent_id = 'ag03')"
        )
    holder = await anyio.open_process([sys.executable, "-c", HOLDER, url, "ag07"])
    async with holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert (await holder.stdout.receive()).strip() == b"held"
        definition.model.open = True
        async with Runtime(url, agents=[definition]) as rt:
            with anyio.fail_after(10):
                handles = await rt.resume_all()
                assert sorted(h.agent_id for h in handles) == [i for i in ids if i not in ("ag03", "ag07")]
                for handle in handles:
                    assert (await handle.wait()).status == "finished"
            assert (await rt.lease_holder("ag07")).worker_id == "other"
            assert (await rt.status("ag07")).status == "running"
        await holder.stdin.aclose()
        assert await holder.wait() == 0
    assert len(effects) == len(set(effects)) == 2 * 10


async def test_a_store_outage_in_the_middle_of_a_chunk(tmp_path) -> None:
    """Another connection takes the file's write lock at moments sweeping a scan (the busy
    timeout 50 ms): resume_all gives the agents it resumed or raises StoreUnavailableError,
    never hangs; once the lock is gone, the same runtime's next scan resumes the rest, and
    every agent runs to the end, each tool call once."""
    path, effects = tmp_path / "g.db", []
    definition = _agent(effects)
    ids = await _runnable(f"sqlite:///{path}", definition)
    url = f"sqlite:///{path}?busy_timeout=50"
    outcomes = []
    for step in range(0, 40, 4):
        locker = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            async with Runtime(url, agents=[definition]) as rt:

                async def lock_later() -> None:
                    await anyio.sleep(step / 1000)
                    await anyio.to_thread.run_sync(locker.execute, "BEGIN IMMEDIATE")

                with anyio.fail_after(10):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(lock_later)
                        try:
                            outcomes.append(len(await rt.resume_all()))
                        except StoreUnavailableError:
                            outcomes.append("outage")
                await anyio.to_thread.run_sync(locker.execute, "ROLLBACK")
                with anyio.fail_after(10):
                    await rt.resume_all()  # the rest
                assert sorted(rt._activations.live) == ids, step
        finally:
            locker.close()
        _no_other_tasks()
    assert "outage" in outcomes, outcomes
    await _settled(url, definition, ids, effects)


class CompactedBeforeTheRead(SQLiteStore):
    """A real SQLite store; just before the restore's one read, another connection
    (``writer``) snapshots at seq 12 and compacts behind the snapshot at 8, as the runtime's
    snapshot writer does: the race, pinned between ``state_at``'s range check and its restore."""

    writer: SQLiteStore | None = None

    async def read_restore(self, stream, at_or_before=None, page_size=512):  # type: ignore[override]
        if self.writer is not None:
            writer, self.writer = self.writer, None
            await writer.put_snapshot(stream, 12, RecordCodec().encode_snapshot(12, fold("r", 12).to_wire(), stream))
            await writer.delete_snapshots(stream, 8)
            await writer.delete_records(stream, 8)
        return await super().read_restore(stream, at_or_before, page_size)


async def test_time_travel_into_history_compacted_meanwhile_is_out_of_range_not_damage(tmp_path) -> None:
    from durably._reading.time_travel import state_at
    from durably._telemetry import Telemetry
    from durably.errors import SeqOutOfRangeError

    url, codec = f"sqlite:///{tmp_path / 't.db'}", RecordCodec()
    async with SQLiteStore(url) as writer, CompactedBeforeTheRead(url) as store:
        await _write_run(writer, "r", 12)
        for seq in (4, 8):
            await writer.put_snapshot(STREAM, seq, codec.encode_snapshot(seq, fold("r", seq).to_wire(), STREAM))
        assert (await state_at(store, codec, STREAM, 6, Telemetry.disabled())).to_wire() == fold("r", 6).to_wire()
        store.writer = writer
        with pytest.raises(SeqOutOfRangeError, match="compacted away"):
            await state_at(store, codec, STREAM, 6, Telemetry.disabled())
        assert (await state_at(store, codec, STREAM, 10, Telemetry.disabled())).to_wire() == fold("r", 10).to_wire()


class PurgedBeforeTheAppend(SQLiteStore):
    """A real SQLite store; before its first append, another connection (``purger``) purges
    the streams that append is for: an operator's ``durably purge`` landing between a resume's
    restore and its ``resumed`` append."""

    purger: SQLiteStore | None = None

    async def append_batch(self, requests):  # type: ignore[override]
        if self.purger is not None:
            purger, self.purger = self.purger, None
            for request in requests:
                await purger.delete_stream(request.stream)
        return await super().append_batch(requests)


async def test_a_purge_between_restore_and_resumed_append_is_not_undone(tmp_path) -> None:
    from durably.errors import AgentNotFoundError

    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition, 3)
    definition.model.open = True
    store = PurgedBeforeTheAppend(url)
    async with SQLiteStore(url) as purger, store, Runtime(store, agents=[definition]) as rt:
        store.purger = purger
        with anyio.fail_after(10):
            handles = await rt.resume_all()
            for handle in handles:
                assert (await handle.wait()).status == "finished"
        resumed = {h.agent_id for h in handles}
        purged = set(ids) - resumed  # the agents of the first append
        assert purged and len(effects) == len(set(effects)) == 2 * len(resumed)
        for agent_id in purged:
            with pytest.raises(AgentNotFoundError):
                await rt.status(agent_id)
            assert await store.last_seq(rt.stream(agent_id)) == 0
            assert await store.get_lease(rt.stream(agent_id)) is None
        assert [s.agent_id async for s in store.list_streams("default")] == sorted(resumed)


@pytest.mark.parametrize("approvals", ["'{not json'", "X'FFFE'", "'5'"])
async def test_a_damaged_status_index_entry_does_not_stop_the_scan(tmp_path, approvals: str) -> None:
    """A row of the status index whose approvals are not a JSON list: the scan (resume_all,
    serve, agents) raised json's JSONDecodeError for the whole namespace. The entry is read
    as none (the journal is the truth), so that agent is restored and resumed like the others."""
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition, 3)
    with sqlite3.connect(tmp_path / "g.db") as db:
        db.execute(f"UPDATE streams SET approvals = {approvals} WHERE agent_id = 'ag01'")
    definition.model.open = True
    async with Runtime(url, agents=[definition]) as rt:
        assert sorted(state.agent_id for state in await rt.agents()) == ids
        with anyio.fail_after(10):
            handles = await rt.resume_all()
            assert sorted(h.agent_id for h in handles) == ids
            for handle in handles:
                assert (await handle.wait()).status == "finished"
        assert (await rt.store.get_index(rt.stream("ag01"))).status == "finished"  # written anew


RIVAL = """
import json, sys, anyio
sys.path[:0] = sys.argv[2:]
from durably import Runtime
from test_attack_restore_gather import _agent

async def main(url):
    effects = []
    definition = _agent(effects)
    definition.model.open = True
    async with Runtime(url, agents=[definition]) as rt:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # go
        handles = await rt.resume_all()
        states = [await handle.wait() for handle in handles]
    print(json.dumps({"resumed": [h.agent_id for h in handles], "statuses": [s.status for s in states],
                      "effects": [key for key, _ in effects]}))

anyio.run(main, sys.argv[1])
"""


async def test_two_processes_resuming_all_at_once_run_each_agent_once(tmp_path) -> None:
    """Another process's resume_all at the same moment: the leases split the agents between
    the two scans (gathered chunks on both sides), each agent runs in one of them, to the end,
    every tool call once overall."""
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition)
    definition.model.open = True
    rival = await anyio.open_process(
        [
            sys.executable,
            "-c",
            RIVAL,
            url,
            str(Path(__file__).parent),
            str(Path(__file__).resolve().parents[1] / "support"),
        ]
    )
    async with rival, Runtime(url, agents=[definition]) as rt:
        assert rival.stdin is not None and rival.stdout is not None
        with anyio.fail_after(20):
            out = b""
            while b"\n" not in out:
                out += await rival.stdout.receive()
            assert out.startswith(b"ready\n"), out
            await rival.stdin.send(b"go\n")
            handles = await rt.resume_all()
            for handle in handles:
                assert (await handle.wait()).status == "finished"
            async for chunk in rival.stdout:
                out += chunk
            assert await rival.wait() == 0
    theirs = json.loads(out.split(b"\n", 1)[1])
    mine = [h.agent_id for h in handles]
    assert sorted(mine + theirs["resumed"]) == ids, (mine, theirs["resumed"])
    assert set(theirs["statuses"]) <= {"finished"}
    keys = [key for key, _ in effects] + theirs["effects"]
    assert len(keys) == len(set(keys)) == 2 * len(ids)


@pytest.mark.parametrize("agent_id", ["X'FF'", "'a' || char(0) || 'b'", "printf('%.300c', 'x')"])
async def test_a_stream_row_whose_id_no_api_can_name_does_not_stop_the_scan(tmp_path, agent_id: str) -> None:
    """A ``streams`` row whose agent id durably never writes (bytes, a NUL, over 200 characters):
    building its ``StreamId`` raised InvalidArgumentError out of the listing, so resume_all,
    serve() and agents() stopped for every agent of the namespace."""
    url, effects = f"sqlite:///{tmp_path / 'g.db'}", []
    definition = _agent(effects)
    ids = await _runnable(url, definition, 3)
    with sqlite3.connect(tmp_path / "g.db") as db:
        db.execute(f"UPDATE streams SET agent_id = {agent_id} WHERE agent_id = 'ag01'")
    definition.model.open = True
    rest = [i for i in ids if i != "ag01"]
    async with Runtime(url, agents=[definition]) as rt:
        assert sorted(state.agent_id for state in await rt.agents()) == rest
        assert [s.agent_id async for s in rt.store.list_streams("default")] == rest
        with anyio.fail_after(10):
            handles = await rt.resume_all()
            assert sorted(h.agent_id for h in handles) == rest


async def test_a_snapshot_cell_of_text_that_is_not_utf8_is_skipped_for_the_older_one(tmp_path) -> None:
    """Records 1..4 compacted behind the snapshot at 4; the one at 8 replaced by a TEXT cell
    that is not UTF-8. Reading it must not fail the whole snapshot lookup ('Could not decode to
    UTF-8'): restore would then skip every snapshot for a journal that no longer starts at 1,
    and report the agent damaged, though the snapshot at 4 and records 5..12 restore it."""
    url, codec = f"sqlite:///{tmp_path / 'text.db'}", RecordCodec()
    async with SQLiteStore(url) as store:
        await _write_run(store, "r", 12)
        for seq in (4, 8):
            await store.put_snapshot(STREAM, seq, codec.encode_snapshot(seq, fold("r", seq).to_wire(), STREAM))
        await store.delete_records(STREAM, 4)
    with sqlite3.connect(tmp_path / "text.db") as db:
        db.execute("UPDATE snapshots SET data = CAST(X'FFFE41' AS TEXT) WHERE seq = 8")
    async with SQLiteStore(url) as store:
        for upto in (None, 10):
            restored = await restore(store, codec, STREAM, upto=upto)
            assert restored is not None and restored.snapshot_seq == 4
            assert restored.state.to_wire() == fold("r", upto or 12).to_wire()


async def test_time_travel_around_the_one_reads_page_boundary(tmp_path) -> None:
    """Up to seqs on both sides of read_restore's first page (512 records), with and without
    a snapshot: the state there, exactly, whether the tail ended in that page or went on."""
    url, codec = f"sqlite:///{tmp_path / 'u.db'}", RecordCodec()
    async with SQLiteStore(url) as store:
        await _write_run(store, "r", 1100)
        for snapshot in (None, 300):
            if snapshot is not None:
                await store.put_snapshot(
                    STREAM, snapshot, codec.encode_snapshot(snapshot, fold("r", snapshot).to_wire(), STREAM)
                )
            for upto in (1, 299, 300, 301, 511, 512, 513, 812, 813, 1024, 1025, 1100, 5000):
                restored = await restore(store, codec, STREAM, upto=upto)
                want = min(upto, 1100)
                assert restored is not None and restored.state.last_seq == want, upto
                assert restored.snapshot_seq == (snapshot if snapshot is not None and upto >= snapshot else 0)
                assert restored.state.to_wire() == fold("r", want).to_wire(), upto
