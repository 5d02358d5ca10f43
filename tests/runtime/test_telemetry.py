"""OpenTelemetry spans, captured with the SDK's in-memory exporter."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy

SECRET = "sk-live-4242424242"


async def test_spans_carry_ids_and_sizes_not_content(tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    url = f"sqlite:///{tmp_path}/a.db"
    policy = SnapshotPolicy(every_records=3, tail_ratio=0.0)
    async with Runtime(url, agents=[list_agent(2, [])], tracer_provider=provider, snapshot_policy=policy) as rt:
        await rt.run("list-agent", "a1", f"task with a secret {SECRET}")
        await rt.status("a1")  # a restore
    spans = exporter.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)

    assert {
        "durably.checkpoint.save",
        "durably.checkpoint.restore",
        "durably.journal.append",
        "durably.snapshot.save",
        "chat step-model",
        "execute_tool effect",
        "invoke_agent list-agent",
    } <= set(by_name)
    for name in ("durably.checkpoint.save", "durably.checkpoint.restore"):
        for span in by_name[name]:
            attrs = span.attributes
            assert attrs["gen_ai.agent.id"] == "a1"
            assert attrs["durably.seq"] >= 1 and attrs["durably.record.count"] >= 0
            assert attrs["durably.bytes.raw"] > 0 and attrs["durably.bytes.stored"] > 0
    saves = by_name["durably.checkpoint.save"]
    assert [s.attributes["durably.seq"] for s in saves] == sorted(s.attributes["durably.seq"] for s in saves)
    snap = by_name["durably.snapshot.save"][0].attributes
    assert snap["durably.bytes.stored"] > 0 and snap["durably.seq"] >= 3
    tool = by_name["execute_tool effect"][0].attributes
    assert tool["gen_ai.operation.name"] == "execute_tool" and tool["gen_ai.tool.call.id"] == "c1"
    chat = by_name["chat step-model"][0].attributes
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.usage.input_tokens"] == 10
    # Journal appends nest under the checkpoint save that caused them.
    save_ids = {s.context.span_id for s in saves}
    assert any(s.parent is not None and s.parent.span_id in save_ids for s in by_name["durably.journal.append"])
    # Nothing of the conversation is put in attributes.
    for span in spans:
        assert not any(SECRET in str(v) for v in (span.attributes or {}).values())
