"""Spans and metrics against the OpenTelemetry GenAI semantic conventions.

Captured with the SDK's in-memory span exporter and metric reader. What the
conventions require (https://opentelemetry.io/docs/specs/semconv/gen-ai/):
``invoke_agent {name}`` (INTERNAL for an in-process agent), ``chat {model}``
(CLIENT), ``execute_tool {name}`` (INTERNAL), each with
``gen_ai.operation.name``; ``gen_ai.provider.name`` on agent and inference
spans; ``error.type`` and status ERROR on failure; the
``gen_ai.client.operation.duration`` (s) and ``gen_ai.client.token.usage``
({token}) histograms. durably adds ``durably.namespace`` everywhere and a link
from a resumed activation to the one it continues.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import cbor2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode
from schema_wire import schema

from durably import AgentDefinition, ModelResponse, Runtime, SnapshotPolicy, ToolCall, Usage, tool
from durably._loop.model_retries import RetryPolicy
from durably._telemetry import Telemetry
from durably.errors import TransientModelError
from durably.schemas._records import Kind
from durably.storage._codec import Codec
from durably.storage._group_frames import decode_group, is_group, is_member
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

NAMESPACE = "tenant-a"


class Recorder:
    """An SDK tracer and meter provider with in-memory export, for one test."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def runtime(self, url: str, agents, **kw) -> Runtime:
        return Runtime(
            url,
            agents=agents,
            namespace=NAMESPACE,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **kw,
        )

    def spans(self, prefix: str = "") -> list:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def metrics(self) -> dict[str, Any]:
        """Metric name -> the metric (unit, data points) from one collection."""
        found = {}
        for resource in self.reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found


class ProviderModel:
    """A scripted model that says who it is, as a real adapter does."""

    name = "gpt-test"
    provider = "openai"

    def __init__(self, turns: list[ModelResponse | Exception]) -> None:
        self.turns = list(turns)

    async def respond(self, messages, tools) -> ModelResponse:
        turn = self.turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        return turn


@tool(name="lookup")
async def lookup(order: str) -> str:
    return f"order {order}: shipped"


@tool(name="broken")
async def broken(order: str) -> str:
    raise RuntimeError("the order service is down for order " + order)


@tool(name="refund", requires_approval=True)
async def refund(order: str) -> str:
    return f"refunded {order}"


def answer(text: str, *calls: ToolCall, stop: str = "end") -> ModelResponse:
    return ModelResponse(text, calls, Usage(12, 5, 0.0), model="gpt-test-2025", stop_reason=stop)


def url() -> str:
    return f"memory://{uuid.uuid4().hex}"


def only(spans: list):
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


async def test_agent_inference_and_tool_spans_follow_the_conventions() -> None:
    rec = Recorder()
    model = ProviderModel(
        [answer("looking", ToolCall("c1", "lookup", {"order": "42"}), stop="tool_use"), answer("it shipped")]
    )
    agent = AgentDefinition(name="support", model=model, tools=[lookup])
    async with rec.runtime(url(), [agent]) as rt:
        state = await rt.run("support", "t-1", "where is order 42?")
    assert state.status == "finished"

    run = only(rec.spans("invoke_agent"))
    assert run.name == "invoke_agent support" and run.kind is SpanKind.INTERNAL
    assert {
        k: run.attributes[k]
        for k in (
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.agent.id",
            "gen_ai.agent.name",
            "gen_ai.conversation.id",
            "gen_ai.request.model",
            "durably.agent.status",
        )
    } == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.id": "t-1",
        "gen_ai.agent.name": "support",
        "gen_ai.conversation.id": "t-1",
        "gen_ai.request.model": "gpt-test",
        "durably.agent.status": "finished",
    }
    assert run.status.status_code is StatusCode.UNSET and "error.type" not in run.attributes

    chats = rec.spans("chat")
    assert [c.name for c in chats] == ["chat gpt-test", "chat gpt-test"]
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT and chat.parent.span_id == run.context.span_id
        attrs = chat.attributes
        assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == "gpt-test" and attrs["gen_ai.response.model"] == "gpt-test-2025"
        assert attrs["gen_ai.usage.input_tokens"] == 12 and attrs["gen_ai.usage.output_tokens"] == 5
        assert attrs["gen_ai.conversation.id"] == "t-1"
    assert [tuple(c.attributes["gen_ai.response.finish_reasons"]) for c in chats] == [("tool_calls",), ("stop",)]

    call = only(rec.spans("execute_tool"))
    assert call.name == "execute_tool lookup" and call.kind is SpanKind.INTERNAL
    assert call.parent.span_id == run.context.span_id
    assert {
        k: call.attributes[k]
        for k in ("gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type")
    } == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }

    # The tenant is visible on every span, durably's own included.
    names = set()
    for span in rec.exporter.get_finished_spans():
        names.add(span.name)
        assert span.attributes["durably.namespace"] == NAMESPACE, span.name
    assert {"durably.checkpoint.save", "durably.journal.append"} <= names


async def test_metrics_use_the_conventions_instruments_and_units() -> None:
    rec = Recorder()
    model = ProviderModel([answer("looking", ToolCall("c1", "lookup", {"order": "7"})), answer("done")])
    agent = AgentDefinition(name="support", model=model, tools=[lookup])
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    async with rec.runtime(url(), [agent], snapshot_policy=policy) as rt:
        await rt.run("support", "t-2", "order 7?")
        await rt.status("t-2")  # a restore
    metrics = rec.metrics()

    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    (point,) = duration.data.data_points
    assert point.count == 2 and point.sum > 0
    assert dict(point.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "durably.namespace": NAMESPACE,
    }
    usage = metrics["gen_ai.client.token.usage"]
    assert usage.unit == "{token}"
    by_type = {p.attributes["gen_ai.token.type"]: p for p in usage.data.data_points}
    assert (by_type["input"].sum, by_type["output"].sum) == (24, 10)
    assert by_type["input"].attributes["gen_ai.response.model"] == "gpt-test-2025"

    for operation in ("checkpoint.save", "checkpoint.restore", "snapshot.save"):
        latency, size = metrics[f"durably.{operation}.duration"], metrics[f"durably.{operation}.size"]
        assert (latency.unit, size.unit) == ("s", "By"), operation
        (lat,), (byt,) = latency.data.data_points, size.data.data_points
        assert lat.count >= 1 and lat.sum > 0 and byt.sum > 0, operation
        assert lat.attributes["durably.namespace"] == NAMESPACE


async def test_failures_set_error_type_and_status_error_on_every_span_they_touch() -> None:
    rec = Recorder()
    model = ProviderModel(
        [answer("trying", ToolCall("c1", "broken", {"order": "9"})), PermissionError("invalid api key")]
    )
    agent = AgentDefinition(name="support", model=model, tools=[broken], retry=RetryPolicy(attempts=1))
    async with rec.runtime(url(), [agent]) as rt:
        state = await rt.run("support", "t-3", "order 9?")
    assert state.status == "failed"

    call = only(rec.spans("execute_tool"))
    assert call.status.status_code is StatusCode.ERROR and call.attributes["error.type"] == "RuntimeError"
    failed_chat = rec.spans("chat")[-1]
    assert (
        failed_chat.status.status_code is StatusCode.ERROR and failed_chat.attributes["error.type"] == "PermissionError"
    )
    run = only(rec.spans("invoke_agent"))
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "PermissionError"
    assert run.attributes["durably.agent.status"] == "failed"
    # Types only: the messages may quote arguments (personal data), never put on a span.
    for span in rec.exporter.get_finished_spans():
        assert "order 9" not in str(span.attributes) and "down" not in str(span.status.description)
        assert all(set(event.attributes) == {"exception.type"} for event in span.events)
    assert [e.attributes["exception.type"] for e in call.events] == ["builtins.RuntimeError"]
    (point,) = [
        p for p in rec.metrics()["gen_ai.client.operation.duration"].data.data_points if "error.type" in p.attributes
    ]
    assert point.attributes["error.type"] == "PermissionError" and point.count == 1


async def test_retries_and_resumes_are_counted() -> None:
    rec = Recorder()
    model = ProviderModel([TransientModelError("overloaded"), answer("done")])
    retrying = AgentDefinition(
        name="support", model=model, retry=RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, jitter_s=0.0)
    )
    async with rec.runtime(url(), [retrying]) as rt:
        assert (await rt.run("support", "t-4", "hello")).status == "finished"
    counters = rec.metrics()
    (retry,) = counters["durably.retries"].data.data_points
    assert retry.value == 1 and retry.attributes["durably.retry.kind"] == "model"
    assert "durably.resumes" not in counters  # a start is not a resume


async def test_a_resumed_run_links_to_the_run_it_continues_through_the_journal() -> None:
    rec = Recorder()
    store_url = url()
    model = ProviderModel([answer("refunding", ToolCall("c1", "refund", {"order": "5"})), answer("refunded")])
    agent = AgentDefinition(name="support", model=model, tools=[refund])
    async with open_store(store_url) as store:
        async with rec.runtime(store, [agent]) as rt:
            parked = await rt.run("support", "t-5", "refund order 5")
        assert parked.status == "waiting_approval"
        # Approved from another process (a fresh runtime on the same store): it resumes there.
        async with rec.runtime(store, [agent]) as rt:
            await rt.approve("t-5", parked.open_approvals()[0]["approval_id"])
            state = await rt.wait("t-5", until="finished", timeout=30)
        assert state.status == "finished"

        first, second = rec.spans("invoke_agent")
        assert not first.links
        (link,) = second.links
        assert (link.context.trace_id, link.context.span_id) == (first.context.trace_id, first.context.span_id)
        (resumes,) = rec.metrics()["durably.resumes"].data.data_points
        assert resumes.value == 1

        # What made the link possible is in the journal, at record schema version 4.
        stream = StreamId(NAMESPACE, "t-5")
        frames = [stored async for stored in store.read(stream)]
    references = {}
    for stored in frames:
        if is_member(stored.data):
            continue  # holds no record: its group frame, earlier in the list, holds it
        if is_group(stored.data):
            values = decode_group(Codec(), stored.data, stream, stored.seq)[2]
        else:
            values = [Codec().decode(stored.data, stream=stream, seq=stored.seq).value]
        for value in values:
            schema("record-v4.cddl").validate_cbor(cbor2.dumps(value))
            if value["k"] in (Kind.STARTED, Kind.RESUMED):
                references[value["k"]] = value["d"]["trace"]
    assert references[Kind.STARTED] == {
        "trace_id": format(first.context.trace_id, "032x"),
        "span_id": format(first.context.span_id, "016x"),
    }
    assert references[Kind.RESUMED]["span_id"] == format(second.context.span_id, "016x")


@pytest.mark.parametrize("provider", [None, NoOpTracerProvider()], ids=["global-proxy", "no-op"])
async def test_nothing_records_means_no_span_or_instrument_objects(provider) -> None:
    # No SDK installed globally in this process: the API hands out its proxy provider.
    telemetry = Telemetry("default", provider)
    assert telemetry.tracer is None and telemetry.metrics is None
    with telemetry.span("durably.checkpoint.save") as span:
        assert span is None
    model = ProviderModel([answer("looking", ToolCall("c1", "lookup", {"order": "1"})), answer("done")])
    async with Runtime(
        url(), agents=[AgentDefinition(name="support", model=model, tools=[lookup])], tracer_provider=provider
    ) as rt:
        assert rt.telemetry.tracer is None and rt.telemetry.metrics is None
        assert rt._activations.services.committer._tracer is None
        assert (await rt.run("support", "t-6", "order 1?")).status == "finished"
        # Untraced, so nothing of tracing is journaled.
        assert (await rt.status("t-6")).trace is None


def test_importing_durably_does_not_import_opentelemetry() -> None:
    # OpenTelemetry loads when the first Runtime is built, not at import.
    code = (
        "import sys, durably, durably.storage; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


async def test_conflicts_fencings_and_tool_retries_are_counted(tmp_path) -> None:
    # A send from a second runtime races a live agent: its next append conflicts, it
    # folds the command in and goes on (a conflict, no fencing). Then the first worker is
    # cut off from the store's leases and a second one takes the agent over once its lease
    # lapses (resume(force=True)): the takeover retries the tool call whose outcome is
    # unknown (a tool retry) and the first worker's last append, its tool's result, is
    # refused for good (a conflict and a fencing).
    import anyio
    from lease_partition import lease_partitionable

    from durably import AgentLeaseLostError

    rec = Recorder()
    store_url = f"sqlite:///{tmp_path}/agents.db"
    gate, replied, release = anyio.Event(), anyio.Event(), anyio.Event()
    ran: list[str] = []

    class GatedModel(ProviderModel):
        async def respond(self, messages, tools) -> ModelResponse:
            if not replied.is_set():
                replied.set()
                await gate.wait()  # the first reply waits while a send races it
            if messages[-1]["role"] == "tool":
                return answer("done")
            return answer("", ToolCall("c1", "effect", {"order": "1"}))

    @tool(name="effect", on_unknown_outcome="retry")
    async def effect(order: str) -> str:
        ran.append(order)
        if len(ran) == 1:  # the first worker's call hangs: that worker looks dead
            await release.wait()
        return "done"

    agent = AgentDefinition(name="support", model=GatedModel([]), tools=[effect])
    old_store = lease_partitionable(store_url)
    async with old_store, rec.runtime(old_store, [agent], worker_id="old", lease_ttl=0.6) as old:
        handle = await old.start("support", "t-9", "do it")
        await replied.wait()
        async with Runtime(store_url, agents=[agent], namespace=NAMESPACE) as other:
            await other.send("t-9", "also, hurry")
        gate.set()
        with anyio.fail_after(20):
            while not ran:
                await anyio.sleep(0.01)
        counters = rec.metrics()
        (conflict,) = counters["durably.conflicts"].data.data_points
        assert conflict.value == 1 and conflict.attributes["durably.namespace"] == NAMESPACE
        assert "durably.fencings" not in counters  # the send was folded in, not a takeover

        old_store.cut = True  # its lease renewals fail from now on: its lease lapses
        async with rec.runtime(store_url, [agent], worker_id="new") as new:
            state = await (await new.resume("t-9", force=True)).wait()
            assert state.status == "finished"
        release.set()  # the first worker's call returns: its lease is lost, its append refused
        with pytest.raises(AgentLeaseLostError):
            await handle.wait()
    counters = rec.metrics()
    assert counters["durably.conflicts"].unit == "{conflict}" and counters["durably.fencings"].unit == "{fencing}"
    (conflicts,) = counters["durably.conflicts"].data.data_points
    (fencing,) = counters["durably.fencings"].data.data_points
    assert conflicts.value == 2 and fencing.value == 1
    assert fencing.attributes["durably.namespace"] == NAMESPACE
    (retry,) = counters["durably.retries"].data.data_points
    assert retry.value == 1 and retry.attributes["durably.retry.kind"] == "tool"


async def test_a_serve_outage_is_counted(tmp_path) -> None:
    # A SQLite write lock held past the busy timeout makes every scan fail with
    # StoreUnavailableError (as in test_serve_outage.py); each failed scan counts.
    import sqlite3

    import anyio

    path = tmp_path / "a.db"
    store_url = f"sqlite:///{path}?busy_timeout=50"
    agent = AgentDefinition(
        name="support", model=ProviderModel([answer("", ToolCall("c1", "refund", {"order": "1"}))]), tools=[refund]
    )
    rec = Recorder()
    async with rec.runtime(store_url, [agent]) as setup:
        parked = await setup.run("support", "t-10", "refund order 1")
        # Without its index entry every scan restores the agent and takes its lease: a write.
        assert await setup.store.put_index(setup.stream("t-10"), None, parked.last_seq)
    async with rec.runtime(store_url, [agent]) as rt:
        async with anyio.create_task_group() as tg:
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            try:
                tg.start_soon(rt.serve, 0.05)
                with anyio.fail_after(10):
                    while "durably.serve.outages" not in rec.metrics():
                        await anyio.sleep(0.05)
            finally:
                blocker.execute("COMMIT")
                blocker.close()
                tg.cancel_scope.cancel()
    metric = rec.metrics()["durably.serve.outages"]
    (outages,) = metric.data.data_points
    assert metric.unit == "{scan}" and outages.value >= 1
    assert outages.attributes["durably.namespace"] == NAMESPACE
