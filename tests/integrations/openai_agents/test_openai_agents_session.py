"""``DurablySession``: the SDK's own ``Runner.run(..., session=...)`` keeps its history in a
durably stream, across process restarts, on SQLite and PostgreSQL, encrypted when the
Runtime encrypts; concurrent writers, compaction, clear, ttl and bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from openai_agents_support import ChatServer, completion, said

import durably
from durably.errors import ArgumentTypeError, CorruptRecordError, InvalidArgumentError, UnencodableValueError
from durably.integrations.openai_agents import DurablySession
from durably.integrations.openai_agents import _session as session_module
from durably.storage import open_store
from durably.storage._spi import StreamId

CHILD = Path(__file__).resolve().parents[2] / "support" / "openai_agents_session_child.py"


def _echo(messages, tools):
    return completion("saw " + "|".join(said(messages, "user")))


async def _turn(store_url: str, model_url: str, session_id: str, text: str, key: str | None = None) -> str:
    args = [sys.executable, str(CHILD), store_url, model_url, session_id, text, *([key] if key else [])]
    done = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_runner_history_survives_process_restarts(kind, tmp_path, request):
    store_url = f"sqlite:///{tmp_path / 's.db'}" if kind == "sqlite" else request.getfixturevalue("pg_server").url()
    async with ChatServer(_echo) as server:
        assert await _turn(store_url, server.url, "user-1", "one") == "saw one"
        assert await _turn(store_url, server.url, "user-1", "two") == "saw one|two"
        assert await _turn(store_url, server.url, "user-2", "alone") == "saw alone"
        assert await _turn(store_url, server.url, "user-1", "three") == "saw one|two|three"
        # The model got the earlier turns' assistant answers back too, from the stream.
        assert said(server.requests[3]["messages"], "assistant") == ["saw one", "saw one|two"]
    async with open_store(store_url) as store:
        items = await DurablySession("user-1", store).get_items()
    assert [i.get("content") for i in items if i.get("role") == "user"] == ["one", "two", "three"]


async def test_encrypted_runtime_seals_the_session(tmp_path):
    key = durably.generate_key().hex()
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    async with ChatServer(_echo) as server:
        await _turn(store_url, server.url, "secret", "my IBAN is DE89370400440532013000", key)
        assert await _turn(store_url, server.url, "secret", "again", key) == (
            "saw my IBAN is DE89370400440532013000|again"
        )
    raw = (tmp_path / "s.db").read_bytes()
    assert b"DE89370400440532013000" not in raw
    async with open_store(store_url) as store:
        with pytest.raises(CorruptRecordError):  # without the key the frames cannot be read
            await DurablySession("secret", store).get_items()


async def test_two_writers_interleave_without_losing_items(tmp_path):
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        a, b = DurablySession("s", store), DurablySession("s", store)
        await a.add_items([{"role": "user", "content": "a0"}])
        await b.add_items([{"role": "user", "content": "b0"}])  # b has not read a0 yet: conflict, re-read
        await a.add_items([{"role": "user", "content": "a1"}])
        assert [i["content"] for i in await b.get_items()] == ["a0", "b0", "a1"]
        assert (await b.pop_item())["content"] == "a1"
        assert [i["content"] for i in await a.get_items()] == ["a0", "b0"]
        assert [i["content"] for i in await a.get_items(limit=1)] == ["b0"]
        await asyncio.gather(*(s.add_items([{"role": "user", "content": f"x{n}"}]) for n, s in enumerate([a, b] * 5)))
        assert len(await DurablySession("s", store).get_items()) == 12


async def test_long_session_is_compacted_behind_a_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(session_module, "SNAPSHOT_EVERY", 8)
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        writer = DurablySession("long", store)
        reader = DurablySession("long", store)
        await reader.add_items([{"role": "user", "content": "first"}])
        for n in range(30):
            await writer.add_items([{"role": "user", "content": str(n)}])
        stream = StreamId(session_module.DEFAULT_NAMESPACE, "long")
        assert len([r async for r in store.read(stream)]) < 8  # records behind the snapshot are deleted
        # reader's last seen records were compacted away: it restores from the snapshot.
        contents = [i["content"] for i in await reader.get_items()]
        assert contents == ["first", *map(str, range(30))]
        assert await writer.pop_item() is not None
        assert len(await DurablySession("long", store).get_items()) == 30


async def test_clear_purges_the_stream_and_other_instances_see_it(tmp_path):
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        a, b = DurablySession("c", store), DurablySession("c", store)
        await a.add_items([{"role": "user", "content": "gone"}])
        assert len(await b.get_items()) == 1
        await a.clear_session()
        assert await store.last_seq(StreamId(session_module.DEFAULT_NAMESPACE, "c")) == 0
        assert await b.get_items() == []
        assert await b.pop_item() is None
        await b.add_items([{"role": "user", "content": "new"}])
        assert [i["content"] for i in await a.get_items()] == ["new"]


async def test_ttl_purges_an_idle_session(tmp_path, monkeypatch):
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        await DurablySession("idle", store).add_items([{"role": "user", "content": "old"}])
        fresh = DurablySession("idle", store, ttl=3600)
        assert len(await fresh.get_items()) == 1
        now = session_module.time.time()
        monkeypatch.setattr(session_module.time, "time", lambda: now + 7200)
        assert await DurablySession("idle", store, ttl=3600).get_items() == []
        assert await store.last_seq(StreamId(session_module.DEFAULT_NAMESPACE, "idle")) == 0


async def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        s = DurablySession("bad", store)
        await s.add_items([{"role": "user", "content": "kept"}])
        with pytest.raises(UnencodableValueError, match="session item"):
            await s.add_items([{"role": "user", "content": object()}])
        assert [i["content"] for i in await DurablySession("bad", store).get_items()] == ["kept"]
        with pytest.raises(ArgumentTypeError):
            DurablySession("x", "sqlite:///nope.db")
        with pytest.raises(InvalidArgumentError):
            DurablySession("", store)
        with pytest.raises(InvalidArgumentError):
            DurablySession("x", store, ttl=-1)
        # A stream of another kind under the session's name is refused, not misread.
        other = StreamId(session_module.DEFAULT_NAMESPACE, "foreign")
        from durably.storage._codec import Codec

        await store.append(other, 0, [Codec().encode(1, 1, {"k": "a", "i": []}, stream=other, seq=1)])
        with pytest.raises(CorruptRecordError, match="expected durably.openai-agents-session"):
            await DurablySession("foreign", store).get_items()
