"""``serve()`` survives a store outage.

A SQLite lock held past the busy timeout makes every scan fail with
``StoreUnavailableError``. The serving worker backs off, reports the outage
(log, span, metric) and, once the lock is gone, runs an agent approved after
the outage.
"""

from __future__ import annotations

import logging
import sqlite3

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support_agents import gated_agent as gated

from durably import Runtime


async def test_serve_backs_off_through_a_locked_database_and_carries_on(tmp_path, caplog):
    path = tmp_path / "a.db"
    url = f"sqlite:///{path}?busy_timeout=50"
    ran: list = []
    definition = gated(ran)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    caplog.set_level(logging.WARNING, logger="durably.serve")
    async with Runtime(url, agents=[definition]) as setup:
        parked = await setup.run(definition, "a1", "task")
        # A parked agent's status index entry keeps idle scans off the write lock, so no
        # scan would meet the lock below; without its entry (a journal from
        # before the index) every scan restores it and takes its lease, a write.
        assert await setup.store.put_index(setup.stream("a1"), None, parked.last_seq)
    async with Runtime(url, agents=[definition], tracer_provider=provider) as rt:
        async with anyio.create_task_group() as tg:
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")  # holds the write lock past every busy timeout
            tg.start_soon(rt.serve, 0.05)
            with anyio.fail_after(10):
                while not [s for s in spans.get_finished_spans() if s.name == "durably.serve.outage"]:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.3)
            blocker.execute("COMMIT")
            blocker.close()
            async with Runtime(url) as operator:  # approves; does not run the agent itself
                await operator.approve("a1", "c1")
            with anyio.fail_after(40):
                while (await rt.status("a1")).status != "finished":
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert ran == [1]
    outages = [s for s in spans.get_finished_spans() if s.name == "durably.serve.outage"]
    assert outages and outages[0].attributes["error.type"] == "StoreUnavailableError"
    assert any("store unavailable" in r.getMessage() for r in caplog.records)
    assert any("available again" in r.getMessage() for r in caplog.records)
