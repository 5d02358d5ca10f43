"""Leases beyond the kit: what only SQLite has (processes racing on one file, the lazily
created table, purge) and the exact token rule of the built-in adapters.

The kit's lease checks (storage/conformance/_leases.py) run on the memory and SQLite
adapters in tests/adapters/test_conformance.py; the kit only asks tokens to increase, the
built-in adapters promise "previous token + 1".
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import sys
import uuid
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from durably.adapters.sqlite._store import SCHEMA_VERSION, SQLiteStore
from durably.storage import open_store
from durably.storage._errors import InvalidRequestError
from durably.storage._spi import CAP_LEASES, Lease, StreamId

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v1"
S = StreamId("tenant", "agent-1")
LONG = 60.0  # a ttl that outlives every test
SHORT = 0.2  # a ttl the tests wait out with EXPIRY_WAIT
EXPIRY_WAIT = SHORT + 0.15


@pytest.fixture(params=["memory", "sqlite"])
def url(request, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://leases-{uuid.uuid4().hex}"  # named: reopening sees the same data
    return f"sqlite:///{tmp_path / 'leases.db'}"


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA user_version").fetchone()[0]


# -- both built-in adapters --------------------------------------------------------------


async def test_built_in_adapters_declare_leases(url: str) -> None:
    assert CAP_LEASES in open_store(url).capabilities


async def test_tokens_go_up_by_one_per_new_holder(url: str) -> None:
    async with open_store(url) as store:
        first = await store.acquire_lease(S, "a", SHORT)
        assert first is not None and first.token == 1, "the first lease of a stream has token 1"
        await anyio.sleep(EXPIRY_WAIT)
        taken = await store.acquire_lease(S, "b", LONG)
        assert taken is not None and taken.token == 2, "an expired lease is taken over with the next token"
        await store.release_lease(first)  # stale: no-op
        assert await store.acquire_lease(S, "a", LONG) is None
        assert (await store.acquire_lease(S, "b", LONG)).token == 2, "a renewal keeps the token"
        await store.release_lease(taken)
        again = await store.acquire_lease(S, "a", LONG)
        assert again is not None and again.token == 3, "a released lease is taken with the next token"
    async with open_store(url) as store:
        await store.release_lease(again)
        assert (await store.acquire_lease(S, "c", LONG)).token == 4, "the token sequence survives reopen"


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -math.inf, "1", True, None])
async def test_a_ttl_must_be_a_finite_positive_number(url: str, ttl: object) -> None:
    async with open_store(url) as store:
        with pytest.raises(InvalidRequestError):
            await store.acquire_lease(S, "a", ttl)
        assert await store.get_lease(S) is None


@pytest.mark.parametrize("owner", [None, 5, b"bytes", ""])
async def test_an_owner_must_be_a_non_empty_str(url: str, owner: object) -> None:
    async with open_store(url) as store:
        with pytest.raises(InvalidRequestError):
            await store.acquire_lease(S, owner, LONG)


async def test_a_purged_stream_keeps_its_token_sequence(url: str) -> None:
    async with open_store(url) as store:
        await store.append(S, 0, [b"r"])
        for owner in ("a", "b"):
            await store.release_lease(await store.acquire_lease(S, owner, LONG))
        await store.delete_stream(S)
        reborn = await store.acquire_lease(S, "c", LONG)
        # A holder from before the purge must never outrank the new one.
        assert reborn is not None and reborn.token == 3, "tokens never decrease for a stream id, purge included"


# -- SQLite only -------------------------------------------------------------------------


async def test_the_leases_table_is_created_by_the_first_acquire_only(tmp_path: Path) -> None:
    path = tmp_path / "lazy.db"
    async with SQLiteStore(f"sqlite:///{path}") as store:
        await store.append(S, 0, [b"r"])
        assert await store.get_lease(S) is None
        await store.release_lease(Lease(S, "a", 1, 0.0))
        await store.delete_stream(StreamId("tenant", "other"))
    assert "leases" not in tables(path), "reads, releases and purges on a file without leases leave its schema alone"
    async with SQLiteStore(f"sqlite:///{path}") as store:
        assert (await store.acquire_lease(S, "a", LONG)).token == 1
    assert "leases" in tables(path)
    assert user_version(path) == SCHEMA_VERSION, "leases need no schema version of their own"


async def test_the_golden_v1_database_takes_leases(tmp_path: Path) -> None:
    info = json.loads((GOLDEN / "manifest.json").read_text())["database"]
    path = tmp_path / "golden.sqlite3"
    shutil.copyfile(GOLDEN / info["file"], path)
    stream = StreamId(info["namespace"], info["agent_id"])
    async with SQLiteStore(f"sqlite:///{path}") as store:
        lease = await store.acquire_lease(stream, "worker", LONG)
        assert lease is not None and lease.token == 1
        assert [s async for s in store.list_streams(info["namespace"])] == [stream]
        assert await store.last_seq(stream) == info["facts"]["last_seq"], "a lease leaves the journal alone"


async def test_purge_leaves_no_lease_owner(tmp_path: Path) -> None:
    path = tmp_path / "purge.db"
    bystander = StreamId("tenant", "agent-2")
    async with SQLiteStore(f"sqlite:///{path}") as store:
        await store.append(S, 0, [b"r"])
        await store.acquire_lease(S, "worker-with-a-name", LONG)
        await store.acquire_lease(bystander, "b", LONG)
        await store.delete_stream(S)
        assert (await store.get_lease(bystander)).owner == "b", "other streams' leases stay"
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT namespace, agent_id, owner FROM leases").fetchall()
    # The row stays for its token (tokens never decrease); the holder's name goes.
    assert sorted(rows) == [("tenant", "agent-1", ""), ("tenant", "agent-2", "b")]


async def test_an_owner_sqlite_cannot_store_is_an_invalid_request(tmp_path: Path) -> None:
    async with SQLiteStore(f"sqlite:///{tmp_path / 'utf8.db'}") as store:
        with pytest.raises(InvalidRequestError):
            await store.acquire_lease(S, "lone \ud800 surrogate", LONG)
        assert (await store.acquire_lease(S, "fine", LONG)).token == 1


RACER = """
import json, sys, anyio
from durably.adapters.sqlite import SQLiteStore
from durably.storage import StreamId

async def main(url, owner, count):
    async with SQLiteStore(url) as store:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # the parent's "go": every racer starts at once
        won = {}
        for agent_id in ["lapsed", *(f"s{n}" for n in range(int(count)))]:
            lease = await store.acquire_lease(StreamId("xproc", agent_id), owner, 60.0)
            if lease is not None:
                won[agent_id] = lease.token
        print(json.dumps(won), flush=True)

anyio.run(main, *sys.argv[1:])
"""


async def test_processes_racing_on_one_file_get_each_lease_once(tmp_path: Path) -> None:
    """Processes, not tasks: BEGIN IMMEDIATE and the one-statement upsert give each lease to exactly one."""
    processes, streams = 4, 25
    url = f"sqlite:///{tmp_path / 'xproc.db'}"
    lapsed = StreamId("xproc", "lapsed")
    async with SQLiteStore(url) as store:
        first = await store.acquire_lease(lapsed, "parent", SHORT)
    await anyio.sleep(EXPIRY_WAIT)  # "lapsed" is expired before any racer starts

    results: dict[str, dict[str, int]] = {}

    async def race(owner: str, ready: anyio.abc.ObjectSendStream, go: anyio.Event) -> None:
        command = [sys.executable, "-c", RACER, url, owner, str(streams)]
        async with await anyio.open_process(command) as process:
            stdout = BufferedByteReceiveStream(process.stdout)
            assert await stdout.receive_until(b"\n", 64) == b"ready"
            await ready.send(owner)
            await go.wait()
            await process.stdin.send(b"go\n")
            results[owner] = json.loads(await stdout.receive_until(b"\n", 1 << 16))
            assert await process.wait() == 0

    go = anyio.Event()
    send, receive = anyio.create_memory_object_stream[str](processes)
    async with anyio.create_task_group() as group:
        for n in range(processes):
            group.start_soon(race, f"p{n}", send, go)
        for _ in range(processes):
            await receive.receive()
        go.set()

    agent_ids = ["lapsed", *(f"s{n}" for n in range(streams))]
    async with SQLiteStore(url) as store:
        for agent_id in agent_ids:
            winners = {owner: won[agent_id] for owner, won in results.items() if agent_id in won}
            assert len(winners) == 1, f"{agent_id}: exactly one process gets the lease, got {winners}"
            ((owner, token),) = winners.items()
            assert token == (first.token + 1 if agent_id == "lapsed" else 1)
            held = await store.get_lease(StreamId("xproc", agent_id))
            assert (held.owner, held.token) == (owner, token), "the winner's lease is the one stored"


HOLDER = """
import sys, anyio
from durably.adapters.sqlite import SQLiteStore
from durably.storage import StreamId

async def main(url):
    store = SQLiteStore(url)
    await store.open()
    lease = await store.acquire_lease(StreamId("crash", "held"), "holder", 60.0)
    print(lease.token, flush=True)
    await anyio.sleep(3600)  # killed here: never closed, nothing synced after the lease

anyio.run(main, sys.argv[1])
"""


async def test_a_lease_outlives_the_sigkill_of_its_holder(tmp_path: Path) -> None:
    """Lease transactions skip the fsync (see durably.adapters.sqlite._leases, "Durability"):
    committed to the WAL, the lease is still there, with its owner and token, when the holder's
    process is killed without closing anything, so no other process can take it before it expires."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    async with await anyio.open_process([sys.executable, "-c", HOLDER, url]) as process:
        token = int(await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 64))
        process.kill()
        await process.wait()
    async with SQLiteStore(url) as store:
        held = await store.get_lease(StreamId("crash", "held"))
        assert (held.owner, held.token) == ("holder", token)
        assert await store.acquire_lease(StreamId("crash", "held"), "other", LONG) is None


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
async def test_lease_transactions_leave_the_writer_as_the_url_set_it(tmp_path: Path, synchronous: str) -> None:
    """The unsynced lease commit is that transaction's only: the appends after it are synced as
    ``synchronous=`` says (SQLite's values: FULL 2, NORMAL 1)."""
    async with SQLiteStore(f"sqlite:///{tmp_path / 'sync.db'}?synchronous={synchronous}") as store:
        lease = await store.acquire_lease(S, "me", LONG)
        await store.release_lease(lease)
        ((level,),) = await store._db.execute_fetchall("PRAGMA synchronous")
        assert level == {"FULL": 2, "NORMAL": 1}[synchronous]


async def test_a_writer_that_cannot_be_put_back_to_full_writes_nothing_until_it_is(tmp_path: Path, monkeypatch) -> None:
    """Fail closed: when the PRAGMA that ends a lease transaction's ``synchronous = NORMAL`` fails,
    the lease call is an outage (``StoreUnavailableError``, not a raw ``sqlite3`` error), and every
    later write first puts ``synchronous`` back, or fails too: no append is ever acknowledged unsynced."""
    from durably.storage._errors import StoreUnavailableError

    async with SQLiteStore(f"sqlite:///{tmp_path / 'resync.db'}") as store:
        await store.append(S, 0, [b"one"])
        db = store._db
        real = db.execute
        failures = {"left": 2}

        async def execute(sql, *args, **kwargs):
            if sql == "PRAGMA synchronous = FULL" and failures["left"]:
                failures["left"] -= 1
                raise sqlite3.OperationalError("disk I/O error")
            return await real(sql, *args, **kwargs)

        monkeypatch.setattr(db, "execute", execute)
        with pytest.raises(StoreUnavailableError):
            await store.acquire_lease(S, "me", LONG)
        with pytest.raises(StoreUnavailableError):  # the second failure: the append is refused, unwritten
            await store.append(S, 1, [b"two"])
        assert await store.last_seq(S) == 1
        assert await store.append(S, 1, [b"two"]) == 2  # put back first, then written
        ((level,),) = await db.execute_fetchall("PRAGMA synchronous")
        assert level == 2
