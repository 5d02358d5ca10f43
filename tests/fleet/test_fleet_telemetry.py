"""The fleet's telemetry: the worker on the resource and on agent spans; approval latencies,
takeovers, lost leases, overlapping activations, resume backlog and agents by status as metrics."""

from __future__ import annotations

import os
import signal

import anyio
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durably import AgentDefinition, AgentFencedError, AgentLeaseLostError, ModelResponse, Runtime, ToolCall, tool
from durably._fleet.owner import OwnerIdentity, _boot_id, _pid_namespace, hostname, process_start_time
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._telemetry_sdk import worker_providers, worker_resource
from durably.schemas._records import Kind
from durably.storage._spi import StreamId
from tests.runtime.test_definition_versions import definition

pytestmark = pytest.mark.anyio


class Recorder:
    """SDK providers on a worker's resource, exporting to memory."""

    def __init__(self, worker_id: str = "worker-1") -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        self.resource = worker_resource(worker_id, hostname())
        self.tracer_provider, self.meter_provider = worker_providers(
            self.resource, [SimpleSpanProcessor(self.spans)], [self.reader]
        )
        self.worker_id = worker_id

    def runtime(self, url: str, agents, **kw) -> Runtime:
        return Runtime(
            url,
            agents=agents,
            worker_id=self.worker_id,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **kw,
        )

    def points(self, name: str) -> list:
        for resource in self.reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        return list(metric.data.data_points)
        return []


def worker_of(attributes) -> tuple:
    return attributes["durably.worker.id"], attributes["host.name"], attributes["process.pid"]


def test_the_worker_resource_names_the_worker_unless_the_environment_does(monkeypatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    found = dict(worker_resource("w-7", "host-a", 41).attributes)
    assert found["service.name"] == "durably-worker" and found["service.instance.id"] == "w-7"
    assert (found["host.name"], found["process.pid"], found["durably.worker.id"]) == ("host-a", 41, "w-7")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-agents")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-3,deployment.environment=prod")
    found = dict(worker_resource("w-7", "host-a", 41).attributes)
    assert found["service.name"] == "billing-agents" and found["service.instance.id"] == "pod-3"
    assert found["deployment.environment"] == "prod" and found["durably.worker.id"] == "w-7"


async def test_approval_latencies_come_from_the_records_and_name_the_worker(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with Runtime(url, agents=[definition()]) as web:
        state = await web.run("writer", "w1", "write the report")
    await anyio.sleep(0.3)  # a person reading the request
    async with Runtime(url) as cli:
        await cli.approve("w1", state.open_approvals()[0]["approval_id"], by="ops")
    rec = Recorder()
    async with rec.runtime(url, [definition()]) as worker:
        (handle,) = await worker.resume_all()
        assert (await handle.wait()).status == "finished"
    codec, stream = RecordCodec(), StreamId("default", "w1")
    async with Runtime(url) as reader:
        records = [record async for record in JournalReader(reader.store, codec, stream).records()]
    at = {r.kind: r.at for r in records}
    (wait,) = rec.points("durably.approval.wait.duration")
    (resume,) = rec.points("durably.approval.resume.duration")
    assert wait.count == 1 and wait.sum == pytest.approx(at[Kind.APPROVAL_DECIDED] - at[Kind.APPROVAL_REQUESTED])
    assert wait.sum >= 0.3
    assert resume.count == 1 and resume.sum == pytest.approx(at[Kind.RESUMED] - at[Kind.APPROVAL_DECIDED])
    assert worker_of(wait.attributes) == ("worker-1", hostname(), os.getpid())
    (span,) = [s for s in rec.spans.get_finished_spans() if s.name == "invoke_agent writer"]
    assert worker_of(span.attributes) == ("worker-1", hostname(), os.getpid())
    assert span.resource.attributes["service.instance.id"] == "worker-1"
    (overlaps,) = rec.points("durably.activation.overlaps")
    assert overlaps.value == 0  # reported, and 0


def dead_owner() -> str:
    """The owner string of a runtime of this process that is gone without releasing."""
    me = os.getpid()
    return str(
        OwnerIdentity("ghost", "gone", hostname(), me, process_start_time(me) or "", _boot_id(), _pid_namespace())
    )


async def test_a_takeover_from_a_dead_holder_is_counted(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with Runtime(url, agents=[definition()]) as web:
        state = await web.run("writer", "w1", "write")
    async with Runtime(url) as cli:  # no definitions: the approval resumes nothing here
        await cli.approve("w1", state.open_approvals()[0]["approval_id"], by="ops")
        assert await cli.store.acquire_lease(StreamId("default", "w1"), dead_owner(), 60.0) is not None
    rec = Recorder()
    async with rec.runtime(url, [definition()]) as worker:
        assert rec.points("durably.lease.takeovers") == []
        (handle,) = await worker.resume_all()
        await handle.wait()
    (takeover,) = rec.points("durably.lease.takeovers")
    assert takeover.value == 1 and takeover.attributes["durably.worker.id"] == "worker-1"


def endless() -> AgentDefinition:
    @tool(name="effect")
    async def effect(n: int, *, ctx) -> int:
        await anyio.sleep(0.05)
        return n

    class Forever:
        name = "forever"

        async def respond(self, messages, tools):
            return ModelResponse("", (ToolCall(f"c{len(messages)}", "effect", {"n": 1}),))

    return AgentDefinition(name="forever", model=Forever(), tools=[effect])


async def test_a_lost_lease_is_counted(tmp_path) -> None:
    rec = Recorder()
    # A ttl long enough that a loaded machine's stalls do not lapse it first (that is lost by the clock, also counted).
    async with rec.runtime(f"sqlite:///{tmp_path / 'a.db'}", [endless()], lease_ttl=1.5) as rt:
        handle = await rt.start("forever", "a1", "task")
        held = await rt.store.get_lease(rt.stream("a1"))
        await rt.store.release_lease(held)  # another worker takes it, as after a pause past the TTL
        assert await rt.store.acquire_lease(rt.stream("a1"), "w2/n@far-host:1:2:3:4", 30.0) is not None
        with anyio.fail_after(5), pytest.raises(AgentLeaseLostError):
            await handle.wait()
    (lost,) = rec.points("durably.lease.lost")
    assert lost.value == 1 and lost.attributes["durably.worker.id"] == "worker-1"


async def test_two_overlapping_activations_are_counted(tmp_path) -> None:
    # On a store without leases (a single-worker store) nothing keeps a second runtime from
    # resuming an agent another one runs. The first is held inside its tool while the second
    # resumes (its journal then ends in the second's records); once let go, the first appends
    # its tool's result, meets the second's records, and that overlap is counted.
    # (With leases the second could not run it.)
    url = f"file://{tmp_path / 'store'}?create=1"
    entered, release = anyio.Event(), anyio.Event()

    @tool(name="hold")
    async def hold(n: int) -> int:
        entered.set()
        await release.wait()
        return n

    class Once:
        name = "once"

        async def respond(self, messages, tools):
            return ModelResponse("", (ToolCall("c1", "hold", {"n": 1}),))

    held = AgentDefinition(name="held", model=Once(), tools=[hold])
    rec = Recorder()
    async with rec.runtime(url, [held]) as first:
        handle = await first.start("held", "a1", "task")
        with anyio.fail_after(10):
            await entered.wait()
        async with Runtime(url, agents=[held], worker_id="second") as second:
            await second.resume("a1", force=True)  # its call's outcome is unknown to it: it asks
            release.set()
            with anyio.fail_after(10):
                while rec.points("durably.activation.overlaps")[0].value == 0:
                    await anyio.sleep(0.02)
            await second.cancel("a1")
        with pytest.raises(AgentFencedError):  # the first stops on a conflict it cannot rebase
            await handle.wait()
    (overlap,) = rec.points("durably.activation.overlaps")
    assert overlap.value == 1


def held_open(release: anyio.Event) -> AgentDefinition:
    """The ``writer`` agent of ``definition()``, whose approved call runs until ``release`` is set."""

    @tool(name="publish", requires_approval=True, on_unknown_outcome="retry")
    async def publish(title: str, *, ctx) -> str:
        await release.wait()
        return f"published {title}"

    return AgentDefinition(name="writer", model=definition().model, tools=[publish], instructions="v1 prompt")


async def test_serve_reports_its_backlog_and_the_agents_by_status(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    release = anyio.Event()
    async with Runtime(url, agents=[held_open(release)]) as web:
        states = [await web.run("writer", f"w{n}", "write") for n in range(4)]
    async with Runtime(url) as cli:  # no definitions: the approvals resume nothing here
        for n in range(3):
            await cli.approve(f"w{n}", states[n].open_approvals()[0]["approval_id"], by="ops")
    rec = Recorder()
    async with rec.runtime(url, [held_open(release)]) as worker, anyio.create_task_group() as tg:
        tg.start_soon(lambda: worker.serve(poll_interval=0.05, drain_signals=(signal.SIGUSR2,), max_agents=1))
        with anyio.fail_after(20):
            while not rec.points("durably.agents"):
                await anyio.sleep(0.02)
        (backlog,) = rec.points("durably.resume.backlog")
        assert backlog.value == 2  # three runnable, one taken: its share is full
        assert backlog.attributes["durably.worker.id"] == "worker-1"
        counts = {p.attributes["durably.agent.status"]: p.value for p in rec.points("durably.agents")}
        assert counts == {"running": 3, "waiting_approval": 1}
        release.set()
        tg.cancel_scope.cancel()
