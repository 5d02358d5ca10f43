"""Workers ride out a PostgreSQL restart (``pg_ctl restart -m fast`` and ``-m immediate``).

Under a ``serve()`` worker process running agents whose tool writes a fsynced
ledger line per call: the database restarts while the agents are mid-run; the
worker must keep running (its agents stopped by the outage are resumed by its
next scan), every agent finishes, every effect is in the ledger exactly once,
and a SIGTERM afterwards still drains it cleanly.

Under an embedded ``Runtime`` serving requests in-process: while the database is
down, calls fail with ``StoreUnavailableError`` (never ``StoreClosedError``: the
runtime must not close itself because an actor's cleanup failed); once it is
back, the same runtime serves again and the agents the outage stopped finish.

The server is this module's own: restarting the session's would disturb other tests.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest
from pg_server import (
    PostgresTestServer,
    own_server,  # noqa: F401 - the fixture: the module's own server, as ``server``
)
from support_agents import file_agent, read_lines

from durably import Runtime
from durably.storage import StoreUnavailableError

WORKER = Path(__file__).resolve().parents[1] / "support" / "outage_worker.py"
AGENTS, STEPS = 8, 6


class Lines:
    """The worker's stdout lines, read by a thread so the test can wait for one with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self.queue.put(line.strip()) for line in stdout], daemon=True).start()

    def wait_for(self, wanted: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while wanted not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"no {wanted!r} from the worker within {timeout} s (saw {self.seen})"
            try:
                self.seen.append(self.queue.get(timeout=left))
            except queue.Empty:
                continue


def wait_for_effects(path: Path, count: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while len(read_lines(path)) < count:
        assert time.monotonic() < end, f"fewer than {count} effects after {timeout} s"
        time.sleep(0.05)


def assert_each_effect_once(path: Path) -> None:
    effects = read_lines(path)
    keys = Counter(e["key"] for e in effects)
    assert [k for k, n in keys.items() if n > 1] == [], "an effect ran twice"
    assert len(keys) == AGENTS * STEPS, f"{len(keys)} effects, expected {AGENTS * STEPS}"


@pytest.mark.parametrize("immediate", [False, True], ids=["fast", "immediate"])
def test_a_serve_worker_outlives_database_restarts(server: PostgresTestServer, tmp_path: Path, immediate) -> None:
    effects = tmp_path / "effects.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "--store", server.url(), "--effects", str(effects)]
        + ["--agents", str(AGENTS), "--steps", str(STEPS)],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "stderr.txt", "w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines = Lines(proc)
        lines.wait_for("STARTED", 30)
        # Twice, with agents mid-run each time: each restart cuts every pooled connection.
        wait_for_effects(effects, AGENTS, 30)
        server.restart(immediate=immediate)
        wait_for_effects(effects, 3 * AGENTS, 30)
        server.restart(immediate=immediate)
        lines.wait_for("DONE", 60)
        assert proc.poll() is None, "the worker exited: " + (tmp_path / "stderr.txt").read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_each_effect_once(effects)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_embedded_runtime_serves_on_through_restarts_and_an_outage(
    server: PostgresTestServer, tmp_path: Path, anyio_backend
) -> None:
    effects = tmp_path / "effects.jsonl"
    definition = file_agent(STEPS, effects, name="outage", think_s=0.2)
    ids = [f"a{i}" for i in range(AGENTS)]
    failures: Counter[str] = Counter()  # what the requests met: only ever the retryable error

    async def requests() -> None:
        # A web tier asking about its agents all along; some of its clients give up mid-request
        # (the request's scope is cancelled while its statement is in flight).
        patience = 0.0
        while True:
            for agent_id in ids:
                patience = 0.002 if patience > 0.01 else patience + 0.001
                try:
                    with anyio.move_on_after(patience):
                        await rt.describe(agent_id)
                    await rt.describe(agent_id)
                except Exception as exc:
                    failures[type(exc).__name__] += 1
            await anyio.sleep(0.02)

    # A short deadline: a call made while the database is down fails fast instead of waiting for it.
    async with Runtime(server.url(deadline=1), agents=[definition], lease_ttl=2.0) as rt:
        for agent_id in ids:
            await rt.start(definition, agent_id, "task")
        async with anyio.create_task_group() as group:
            group.start_soon(requests)
            await anyio.to_thread.run_sync(wait_for_effects, effects, AGENTS, 30)
            await anyio.to_thread.run_sync(lambda: server.restart(immediate=False))
            await anyio.to_thread.run_sync(wait_for_effects, effects, 2 * AGENTS, 30)
            await anyio.to_thread.run_sync(lambda: server.restart(immediate=True))
            await anyio.to_thread.run_sync(server.stop)
            try:
                with pytest.raises(StoreUnavailableError):
                    await rt.start(definition, "refused", "task")
                with pytest.raises(StoreUnavailableError):
                    await rt.status("nobody")  # read from the store (no live actor answers it)
            finally:
                await anyio.to_thread.run_sync(server.start)
            # Back: the same runtime serves again, and what the outage stopped is resumed.
            with anyio.fail_after(60):
                while True:
                    try:
                        handle = await rt.start(definition, "after", "task")
                        break
                    except StoreUnavailableError:
                        await anyio.sleep(0.2)  # the pool reconnects
                ids.append("after")
                while True:
                    await rt.resume_all()
                    if all([(await rt.status(agent_id)).status == "finished" for agent_id in ids]):
                        break
                    await anyio.sleep(0.2)
            group.cancel_scope.cancel()
        assert (await handle.wait()).status == "finished"
    assert set(failures) <= {StoreUnavailableError.__name__}, failures
    keys = Counter(e["key"] for e in read_lines(effects))
    assert [k for k, n in keys.items() if n > 1] == [], "an effect ran twice"
    assert len(keys) == (AGENTS + 1) * STEPS


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_serve_rides_out_a_store_error_that_is_not_an_outage(
    server: PostgresTestServer, caplog, anyio_backend
) -> None:
    # An operator renames the streams table away and back (a restore, a botched migration): every
    # scan meanwhile fails with PostgresSetupError, not StoreUnavailableError. serve() backs off
    # through it as through an outage, and runs the agent approved once the table is back.
    from support_agents import gated_agent

    schema = f"t_{os.urandom(6).hex()}"
    url = server.url(schema)
    ran: list[int] = []
    definition = gated_agent(ran)
    caplog.set_level(logging.WARNING, logger="durably.serve")
    async with Runtime(url, agents=[definition]) as rt:
        await (await rt.start(definition, "g1", "task")).wait()
        async with anyio.create_task_group() as group:
            group.start_soon(rt.serve, 0.05)
            await anyio.to_thread.run_sync(server.psql, f"ALTER TABLE {schema}.streams RENAME TO streams_away")
            with anyio.fail_after(20):
                while not any("store unavailable" in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(server.psql, f"ALTER TABLE {schema}.streams_away RENAME TO streams")
            async with Runtime(url) as operator:
                await operator.approve("g1", "c1")
            with anyio.fail_after(40):
                while (await rt.status("g1")).status != "finished":
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()
    assert ran == [1]
    assert any("PostgresSetupError" in r.getMessage() for r in caplog.records)
