"""LISTEN/NOTIFY wake-ups on a real PostgreSQL server: a command appended by one process
resumes an agent parked in another process's ``serve()`` at once; the feed survives its
connection being dropped, and polling still resumes agents while it is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from pg_server import PostgresTestServer
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.adapters.postgres import PostgresStore
from durably.schemas._records import Kind
from durably.storage import StreamId

pytestmark = pytest.mark.anyio
WORKER = Path(__file__).resolve().parents[1] / "support" / "pg_serve_worker.py"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_published_change_reaches_subscribers_of_its_namespace_only(pg_server: PostgresTestServer) -> None:
    """Every notification reaches only its namespace; the latency is measured on up to five
    of them and the best must be under 100 ms (one measurement alone is at the mercy of a
    loaded machine's scheduler: CI runs on 2 busy cores)."""
    url = pg_server.url()
    async with PostgresStore(url) as listener, PostgresStore(url) as publisher:
        async with listener.subscribe_changes("ns") as feed:
            latencies = []
            for attempt in range(5):
                started = time.perf_counter()
                await publisher.publish_change(StreamId("other", f"x{attempt}"))
                await publisher.publish_change(StreamId("ns", f"a{attempt}"))
                with anyio.fail_after(5):
                    changed = await feed.wait()
                latencies.append(time.perf_counter() - started)
                assert changed == {StreamId("ns", f"a{attempt}")}
                if latencies[-1] < 0.1:
                    break
            assert min(latencies) < 0.1, f"a notification arrives within 100 ms: {latencies}"


async def test_the_feed_reconnects_after_its_connection_is_killed_and_reports_the_gap(pg_server) -> None:
    url = pg_server.url()
    async with PostgresStore(url) as listener, PostgresStore(url) as publisher:
        async with listener.subscribe_changes("ns") as feed:
            assert feed.connected
            killed = pg_server.psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE application_name = '{listener._application_name}-listen'"
            )
            assert killed.strip() == "1"
            with anyio.fail_after(10):
                assert await feed.wait() is None, "a dropped feed says notifications may have been missed"
                while not feed.connected:
                    await anyio.sleep(0.01)
            await publisher.publish_change(StreamId("ns", "b"))
            with anyio.fail_after(5):
                assert await feed.wait() == {StreamId("ns", "b")}
            assert feed.reconnects == 1


def _gated(steps: int = 1) -> AgentDefinition:
    @tool(name="effect", requires_approval=True)
    async def effect(n: int, *, ctx) -> int:
        return n * 10

    return AgentDefinition(name="gated", model=StepModel(steps), tools=[effect])


async def test_serve_polls_when_the_feed_cannot_connect(pg_server: PostgresTestServer) -> None:
    """Polling stays the fallback: with the listening connection refused (a dead port), an
    approval from another runtime still resumes the agent at the next poll."""
    url = pg_server.url()
    definition = _gated()
    deaf = url + "&listen_dsn=" + quote("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1", safe="")
    async with Runtime(url, agents=[definition]) as starter:
        assert (await starter.run(definition, "a1", "task")).status == "waiting_approval"
    async with Runtime(deaf, agents=[definition]) as server, Runtime(url) as operator:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, 0.3)
            await anyio.sleep(0.2)
            listening = pg_server.psql(
                "SELECT count(*) FROM pg_stat_activity "
                f"WHERE application_name = '{server.store._application_name}-listen'"
            )
            assert listening.strip() == "0", "the feed of the serving runtime must be down for this test"
            await operator.approve("a1", "c1")
            with anyio.fail_after(20):
                while (await operator.status("a1")).status != "finished":
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()


def test_cli_approval_resumes_an_agent_parked_in_another_process_serve(pg_server: PostgresTestServer) -> None:
    """``durably approve --store postgresql://...`` in one process; the agent parked in a
    ``serve()`` (poll interval 60 s) of another process resumes in < 0.5 s.

    The latency is measured on up to three runs (each on a schema of its own) and the best
    must be under 0.5 s: one run alone is at the mercy of a loaded machine's scheduler (CI
    runs on 2 busy cores). Every run checks that the approval resumed the agent to the end.
    """
    latencies = []
    for _ in range(3):
        latencies.append(_approve_from_another_process(pg_server.url()))
        if latencies[-1] < 0.5:
            break
    assert min(latencies) < 0.5, f"the parked agent resumed {latencies} s after the approval was committed"


def _approve_from_another_process(url: str) -> float:
    """Park a1 in a worker's serve(), approve it with the CLI; seconds from approval to resume."""
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), "--store", url, "--poll-interval", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = worker.stdout.readline()
        assert line.strip() == "PARKED", line + worker.stderr.read()[-3000:]
        parked_seq = anyio.run(_last_seq, url)
        watch: dict[str, float] = {}
        with anyio.from_thread.start_blocking_portal() as portal:
            watcher = portal.start_task_soon(_watch_seqs, url, parked_seq, watch)
            env = {**os.environ, "COLUMNS": "250"}
            decided = subprocess.run(
                [sys.executable, "-m", "durably._cli", "approve", "a1", "c1", "--store", url],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            assert decided.returncode == 0 and "approved" in decided.stdout, decided.stdout + decided.stderr
            watcher.result(timeout=30)
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["status"] == "finished"
    kinds = anyio.run(_kinds_after, url, parked_seq)
    assert kinds[:2] == [Kind.APPROVAL_DECIDED, Kind.RESUMED], kinds  # what the watcher timed
    latency = watch["resumed"] - watch["decided"]
    print(f"approval -> resumed in another process's serve(): {latency * 1e3:.1f} ms")
    return latency


async def _last_seq(url: str) -> int:
    async with PostgresStore(url) as store:
        return await store.last_seq(StreamId("default", "a1"))


async def _kinds_after(url: str, seq: int) -> list[str]:
    codec, stream = RecordCodec(), StreamId("default", "a1")
    async with PostgresStore(url) as store:
        return [record.kind async for record in JournalReader(store, codec, stream).records(seq)]


async def _watch_seqs(url: str, parked_seq: int, watch: dict[str, float]) -> None:
    """Note when the approval (parked seq + 1) and the serving worker's next record (+ 2) are committed,
    polling every 2 ms on a connection of its own."""
    async with PostgresStore(url) as store:
        with anyio.fail_after(30):
            while "resumed" not in watch:
                seq = await store.last_seq(StreamId("default", "a1"))
                now = time.perf_counter()
                if seq > parked_seq:
                    watch.setdefault("decided", now)
                if seq > parked_seq + 1:
                    watch["resumed"] = now
                await anyio.sleep(0.002)


async def test_a_flood_of_forged_notifications_takes_nothing_and_a_real_approval_still_runs_at_once(
    pg_server: PostgresTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Any role may NOTIFY the channel: a role with no grant on the schema sends 2,000 ids of
    agents that do not exist, and a payload with a lone surrogate. The serving worker (poll
    interval 60 s) writes no lease row for them, logs no traceback, and an approval sent
    after the flood resumes the parked agent long before a poll would."""
    url = pg_server.url()
    definition = _gated()
    async with Runtime(url, agents=[definition]) as starter:
        assert (await starter.run(definition, "a1", "task")).status == "waiting_approval"
    async with Runtime(url, agents=[definition]) as server, Runtime(url) as operator:
        channel = server.store._channel
        schema = server.store.options.schema
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, 60.0)
            with anyio.fail_after(10):
                while (
                    not pg_server.psql(
                        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{server.store._application_name}-listen'"
                    ).strip()
                    == "1"
                ):
                    await anyio.sleep(0.05)
            role = f"intruder_{schema}"
            flood = (
                f"CREATE ROLE {role} NOLOGIN; SET ROLE {role}; "
                f"SELECT count(pg_notify('{channel}', json_build_array('default', 'forged-' || g)::text)) "
                "FROM generate_series(1, 2000) AS g; "
                f"SELECT pg_notify('{channel}', '[\"default\", \"lone \\ud800 surrogate\"]'); "
                f"SELECT count(pg_notify('{channel}', json_build_array('default', 'forged-b' || g)::text)) "
                "FROM generate_series(1, 40) AS g, pg_sleep(0.01) AS pause GROUP BY g;"
            )
            await anyio.to_thread.run_sync(pg_server.psql, flood)
            started = time.monotonic()
            await operator.approve("a1", "c1")
            with anyio.fail_after(30):
                while (await operator.status("a1")).status != "finished":
                    await anyio.sleep(0.05)
            took = time.monotonic() - started
            group.cancel_scope.cancel()
    print(f"approval after a flood of forged wake-ups: resumed and finished in {took:.2f} s")
    assert took < 20, f"the approval waited {took:.1f} s: a poll (60 s) found it, not the wake-up"
    leased = pg_server.psql(
        f"SELECT count(*) FROM {schema}.leases WHERE agent_id LIKE 'forged-%' OR agent_id LIKE 'lone%'"
    )
    assert leased.strip() == "0", f"{leased.strip()} lease rows for agents that do not exist"
    assert not [r for r in caplog.records if r.name.startswith("durably") and r.exc_info], "no traceback is logged"
