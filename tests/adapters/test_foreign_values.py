"""A foreign value where an adapter expects its own bytes is a ``CorruptRecordError``
for that one stream, never a ``TypeError`` that stops the namespace: ``resume_all``, ``serve()`` and ``agents()`` go on with the others.

SQLite: a TEXT, INTEGER or REAL value in a record's or snapshot's BLOB column.
S3 (local server): an object of foreign bytes, a foreign key among the record
batches, a foreign compaction mark.
"""

from __future__ import annotations

import sqlite3
import uuid

import anyio
import pytest
from s3_server import BUCKET
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy
from durably.adapters.s3._keys import StreamKeys
from durably.storage import StreamId
from durably.storage._errors import CorruptRecordError


async def two_runnable_agents(url: str, effects: list, *, snapshot: bool = False) -> None:
    """``bad`` and ``good``: started, then the runtime stops at once, so both are runnable."""
    policy = SnapshotPolicy(every_records=1, tail_ratio=0.0) if snapshot else None
    async with Runtime(url, snapshot_policy=policy) as first:
        for agent_id in ("bad", "good"):
            await first.start(list_agent(2, effects), agent_id, "task")
        if snapshot:
            await first._activations.services.snapshots.flush()


async def check_isolated(url: str, effects: list, *, journal_damaged: bool = True) -> None:
    """``bad`` is unreadable (or, with only its snapshot damaged, restored from its
    journal); ``good`` is resumed by ``serve()`` and finishes either way."""
    definition = list_agent(2, effects)
    async with Runtime(url, agents=[definition]) as rt:
        listed = {state.agent_id: state for state in await rt.agents()}
        if journal_damaged:
            with pytest.raises(CorruptRecordError):
                await rt.status("bad")
            assert listed["bad"].status == "unreadable" and "CorruptRecordError" in listed["bad"].reason
        else:  # a snapshot that does not decode is skipped: the journal is the truth
            assert listed["bad"].status in ("running", "finished")
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.serve, 0.05)
            with anyio.fail_after(10):
                while (await rt.status("good")).status != "finished":
                    await anyio.sleep(0.05)
                while not journal_damaged and (await rt.status("bad")).status != "finished":
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("table", ["records", "snapshots"])
@pytest.mark.parametrize("foreign", ["text", 42, 4.5], ids=["TEXT", "INTEGER", "REAL"])
async def test_a_foreign_sqlite_value_is_corrupt_and_isolated(tmp_path, table, foreign):
    path = tmp_path / "a.db"
    effects: list = []
    await two_runnable_agents(f"sqlite:///{path}", effects, snapshot=table == "snapshots")
    with sqlite3.connect(path) as db:
        changed = db.execute(
            f"UPDATE {table} SET data = ? WHERE stream_id = (SELECT id FROM streams WHERE agent_id = 'bad')", (foreign,)
        ).rowcount
    assert changed >= 1
    await check_isolated(f"sqlite:///{path}", effects, journal_damaged=table == "records")


@pytest.mark.parametrize("damage", ["batch-bytes", "batch-name", "compaction-mark", "snapshot-name"])
async def test_a_foreign_s3_object_is_corrupt_and_isolated(s3_server, damage):
    prefix = f"foreign-{uuid.uuid4().hex[:8]}/"
    url = s3_server.url(prefix)
    effects: list = []
    await two_runnable_agents(url, effects)
    keys = StreamKeys(prefix, StreamId("default", "bad"))
    client = s3_server.client()
    if damage == "batch-bytes":
        (first,) = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=keys.batches)["Contents"]][-1:]
        client.put_object(Bucket=BUCKET, Key=first, Body=b"not a durably batch at all")
    elif damage == "batch-name":
        client.put_object(Bucket=BUCKET, Key=keys.batches + "README.txt", Body=b"hello")
    elif damage == "compaction-mark":
        client.put_object(Bucket=BUCKET, Key=keys.compacted, Body=b"\xff not json")
    else:
        client.put_object(Bucket=BUCKET, Key=keys.snapshots + "latest", Body=b"hello")
    await check_isolated(url, effects, journal_damaged=damage != "snapshot-name")
