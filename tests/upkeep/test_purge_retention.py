"""Purge and retention: ``purge`` leaves nothing readable in any adapter (SQLite
pages and WAL, filesystem, S3 objects, memory), a purged id starts clean, and
the sweep applies time-to-live by status from the last record's time."""

from __future__ import annotations

import shutil
import sqlite3
import time
import uuid

import anyio
import pytest
from privacy_support import BACKENDS, ScriptModel, files_bytes, s3_keys, spi_frames
from privacy_support import backend as store_backend
from s3_server import BUCKET
from support_agents import list_agent

from durably import (
    AgentDefinition,
    AgentNotFoundError,
    ModelResponse,
    Runtime,
    SnapshotPolicy,
    ToolCall,
    Usage,
    tool,
)
from durably._cli.main import main as cli_main
from durably._journal.redaction_policy import RedactionPolicy
from durably._upkeep.retention import DAY, RetentionPolicy, parse_duration
from durably.adapters import memory
from durably.adapters.s3._keys import StreamKeys
from durably.storage import BlobNotFoundError, StreamId
from durably.storage import _dictionaries as dictionaries
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key


@pytest.fixture(autouse=True)
def greppable_frames(monkeypatch):
    """These tests prove by grepping stored bytes for plaintext that a secret is (or is no longer)
    there, so their controls need small records stored as before the shipped zstd dictionary:
    uncompressed. Compression hides nothing from an attacker (anyone can decompress), only from
    the grep; with the dictionary on, these greps would pass without meaning anything."""
    monkeypatch.setattr(dictionaries, "DEFAULT", None)


PLANTED = "PLANTED-VALUE-9f3a1c7e"
BLOB = b"artifact: " + PLANTED.encode()
KEEP_ALL = RedactionPolicy.disabled()  # the planted value must be stored for the purge to have work
EVERY_SNAPSHOT = SnapshotPolicy(every_records=2, tail_ratio=0.0)


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """``(kind, url, raw_bytes, where)`` for one adapter; ``raw_bytes()`` is every byte it holds."""
    return store_backend(request, tmp_path, "purge")


async def test_purge_leaves_nothing_readable_behind(backend) -> None:
    kind, url, raw_bytes, extra = backend
    async with Runtime(url, agents=[list_agent(2, [])], redaction=KEEP_ALL, snapshot_policy=EVERY_SNAPSHOT) as rt:
        await rt.run("list-agent", "a1", PLANTED)
        await rt.run("list-agent", "a2", "the neighbour")
        digest = await rt.store.put_blob(rt.stream("a1"), BLOB)
        await rt._activations.services.snapshots.flush()
        if raw_bytes is not None:
            assert PLANTED.encode() in raw_bytes()  # the grep below can see it
        await rt.purge("a1")
        frames = await spi_frames(rt.store, "default")
        with pytest.raises(AgentNotFoundError):
            await rt.status("a1")
        with pytest.raises(BlobNotFoundError):
            await rt.store.get_blob(rt.stream("a1"), digest)
        assert await rt.store.last_seq(rt.stream("a1")) == 0
        assert (await rt.status("a2")).status == "finished"  # the neighbour is untouched
        if raw_bytes is not None:
            assert PLANTED.encode() not in raw_bytes()  # while open: SQLite's WAL included
    assert {stream.agent_id for stream, *_ in frames} == {"a2"}
    assert all(PLANTED.encode() not in data for *_, data in frames)
    if raw_bytes is not None:
        assert PLANTED.encode() not in raw_bytes()
    if kind == "memory":
        assert StreamId("default", "a1") not in memory._shared[extra]
    if kind == "s3":
        server, prefix = extra
        keys = StreamKeys(prefix + "/", StreamId("default", "a1"))
        left = s3_keys(server, BUCKET, prefix)
        # The ended lease object stays (its fencing token must never go back); it names
        # no owner any more, and nothing else of the stream is left.
        assert not [k for k in left if (k.startswith(keys.root) and k != keys.lease) or k == keys.index]
        assert any("a2" in k for k in left)


async def test_a_plain_sqlite_delete_would_leave_the_bytes_but_purge_does_not(tmp_path) -> None:
    """The control for the SQLite grep: rows deleted without secure_delete stay in the file."""
    url = f"sqlite:///{tmp_path}/db/agents.db?create=1"
    async with Runtime(url, agents=[list_agent(1, [])], redaction=KEEP_ALL) as rt:
        for i in range(4):
            await rt.run("list-agent", f"before-{i}", "padding")
        await rt.run("list-agent", "a1", PLANTED)
        for i in range(4):
            await rt.run("list-agent", f"after-{i}", "padding")
    # Closed: the WAL was checkpointed, the planted row now sits in a page of the database file.
    assert PLANTED.encode() in (tmp_path / "db" / "agents.db").read_bytes()
    copy = tmp_path / "copy.db"
    shutil.copy(tmp_path / "db" / "agents.db", copy)
    with sqlite3.connect(copy) as db:
        (sid,) = db.execute("SELECT id FROM streams WHERE agent_id = 'a1'").fetchone()
        db.execute("DELETE FROM records WHERE stream_id = ?", (sid,))
    assert PLANTED.encode() in copy.read_bytes()
    async with Runtime(url) as rt:
        await rt.purge("a1")
        assert PLANTED.encode() not in files_bytes(tmp_path / "db")
    assert PLANTED.encode() not in files_bytes(tmp_path / "db")


async def test_a_purged_id_reused_starts_clean_with_fresh_idempotency_keys(tmp_path) -> None:
    effects: list = []
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(url, agents=[list_agent(2, effects)], snapshot_policy=EVERY_SNAPSHOT) as rt:
        first = await rt.run("list-agent", "a1", "first run")
        await rt.purge("a1")
        second = await rt.run("list-agent", "a1", "second run")
    old_keys, new_keys = {k for k, _ in effects[:2]}, {k for k, _ in effects[2:]}
    assert len(effects) == 4 and not old_keys & new_keys  # the tools ran again, under new keys
    assert second.run_id != first.run_id and set(second.ledger) == new_keys
    assert second.task == "second run" and all("first run" not in repr(m) for m in second.messages)
    assert second.last_seq == first.last_seq and second.usage == first.usage


async def test_purging_a_live_agent_stops_it_and_nothing_lands_afterwards() -> None:
    started, never = anyio.Event(), anyio.Event()

    @tool()
    async def wait_forever(*, ctx) -> str:
        started.set()
        await never.wait()
        return "unreachable"

    model = ScriptModel([ModelResponse("wait", (ToolCall("c1", "wait_forever", {}),), Usage(1, 1, 0.0))])
    definition = AgentDefinition(name="waiter", model=model, tools=[wait_forever])
    async with Runtime(
        f"memory://{uuid.uuid4().hex}",
        agents=[definition],
        snapshot_policy=SnapshotPolicy(every_records=1, tail_ratio=0.0),
    ) as rt:
        handle = await rt.start("waiter", "w1", PLANTED)
        await started.wait()
        await rt.purge("w1")
        await handle.wait()  # the activation ended
        await rt._activations.services.snapshots.flush()
        stream = rt.stream("w1")
        assert await rt.store.last_seq(stream) == 0 and await rt.store.get_snapshot(stream) is None
        assert [s async for s in rt.store.list_streams("default")] == []
        with pytest.raises(AgentNotFoundError):
            await rt.purge("w1")


# -- retention ------------------------------------------------------------------------------


class Broken:
    name = "broken"

    async def respond(self, messages, tools):
        raise RuntimeError("model down")


def approval_agent() -> AgentDefinition:
    @tool(requires_approval=True)
    async def act(*, ctx) -> str:
        return "acted"

    model = ScriptModel([ModelResponse("ask", (ToolCall("c1", "act", {}),), Usage(1, 1, 0.0))])
    return AgentDefinition(name="asker", model=model, tools=[act])


async def populate(url: str) -> None:
    definitions = [list_agent(1, []), approval_agent(), AgentDefinition(name="broken", model=Broken())]
    async with Runtime(url, agents=definitions, namespace="t1") as rt:
        assert (await rt.run("list-agent", "done-1", "t")).status == "finished"
        assert (await rt.run("asker", "waiting-1", "t")).status == "waiting_approval"
        assert (await rt.run("broken", "failed-1", "t")).status == "failed"
    async with Runtime(url, agents=definitions, namespace="t2") as rt:
        assert (await rt.run("list-agent", "done-2", "t")).status == "finished"


async def agent_ids(url: str, namespace: str) -> set[str]:
    async with Runtime(url, namespace=namespace) as rt:
        return {s.agent_id async for s in rt.store.list_streams(namespace)}


async def test_the_sweep_applies_ttl_by_status_from_the_last_record(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    await populate(url)
    policy = RetentionPolicy({"finished": 30 * DAY, "failed": 90 * DAY})
    async with Runtime(url, namespace="t1") as rt:
        early = await rt.sweep(policy, now=time.time() + 29 * DAY)
        assert {i.stream.agent_id: i.outcome for i in early} == {
            "done-1": "kept",
            "failed-1": "kept",
            "waiting-1": "kept",
        }
        dry = await rt.sweep(policy, now=time.time() + 31 * DAY, dry_run=True)
        assert {i.stream.agent_id: (i.outcome, i.status) for i in dry}["done-1"] == ("expired", "finished")
        assert len([s async for s in rt.store.list_streams("t1")]) == 3  # a dry run deletes nothing
        month = await rt.sweep(policy, now=time.time() + 31 * DAY)
        assert {i.stream.agent_id: i.outcome for i in month} == {
            "done-1": "purged",
            "failed-1": "kept",
            "waiting-1": "kept",
        }
        quarter = await rt.sweep(policy, now=time.time() + 91 * DAY)
        assert {i.stream.agent_id: i.outcome for i in quarter} == {"failed-1": "purged", "waiting-1": "kept"}
        forever = await rt.sweep(policy, now=time.time() + 3650 * DAY)
        assert [i.outcome for i in forever] == ["kept"]  # no TTL for waiting agents
        default = await rt.sweep(RetentionPolicy(default=DAY), now=time.time() + 2 * DAY)
        assert [(i.stream.agent_id, i.outcome, i.status) for i in default] == [
            ("waiting-1", "purged", "waiting_approval")
        ]
    assert await agent_ids(url, "t1") == set()
    assert await agent_ids(url, "t2") == {"done-2"}  # another namespace's policy, another sweep


async def test_undated_and_unreadable_streams_are_kept_and_reported() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    compacting = SnapshotPolicy(every_records=1, tail_ratio=0.0, keep=1, compact=True)
    async with Runtime(url, agents=[list_agent(1, [])], snapshot_policy=compacting) as rt:
        await rt.run("list-agent", "compacted", "t")
        await rt._activations.services.snapshots.flush()
    keys = AESGCMCipher(StaticKeyProvider({"k": generate_key()}))
    async with Runtime(url, agents=[list_agent(1, [])], encryption=keys) as rt:
        await rt.run("list-agent", "sealed", "t")
    async with Runtime(url) as rt:  # no key for "sealed"
        items = {i.stream.agent_id: i for i in await rt.sweep(RetentionPolicy(default=0.0))}
    assert items["compacted"].outcome == "undated" and items["compacted"].last_at is None
    assert items["sealed"].outcome == "unreadable" and "DecryptionError" in items["sealed"].error
    assert await agent_ids(url, "default") == {"compacted", "sealed"}


def test_durations_and_policies_are_checked() -> None:
    assert parse_duration("30d") == 30 * DAY and parse_duration("12h") == 43_200 and parse_duration("90") == 90
    assert parse_duration("1.5m") == 90 and parse_duration("2w") == 14 * DAY
    for bad in ("soon", "-1d", "d"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    with pytest.raises(ValueError):
        RetentionPolicy({"finished": -1})
    assert RetentionPolicy({"finished": 5}, default=9).ttl_for("running") == 9
    assert RetentionPolicy().shortest() is None


async def test_the_purge_and_sweep_commands(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    await populate(url)
    run = lambda argv: anyio.to_thread.run_sync(cli_main, argv)  # noqa: E731 - the CLI runs its own event loop
    assert await run(["purge", "done-1", "--store", url, "--namespace", "t1", "--yes"]) == 0
    assert await run(["purge", "done-1", "--store", url, "--namespace", "t1", "--yes"]) == 1
    assert "AgentNotFoundError" in capsys.readouterr().out
    assert await run(["sweep", "--ttl", "failed=0s", "--dry-run", "--store", url, "--namespace", "t1"]) == 0
    assert "failed-1: expired" in capsys.readouterr().out
    sweep = ["sweep", "--ttl", "failed=0s", "--ttl", "finished=30d", "--store", url, "--namespace", "t1"]
    assert await run(sweep) == 1  # no terminal to ask on and no --yes: nothing swept
    assert "not confirmed" in capsys.readouterr().out
    assert await run([*sweep, "--yes"]) == 0
    out = capsys.readouterr().out
    assert "failed-1: purged" in out and "waiting-1: kept" in out
    assert await agent_ids(url, "t1") == {"waiting-1"}
    # A malformed STATUS=DURATION is a usage error: exit status 2 (main returns it, click printed why).
    assert await run(["sweep", "--ttl", "finished", "--store", url]) == 2
    assert "is not STATUS=DURATION" in capsys.readouterr().err
