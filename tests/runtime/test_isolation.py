"""Isolation: a runtime bound to one namespace cannot see or touch another's agents
through any public verb; SQLite files are owner-only; spans and logs carry ids and
sizes, never what the user, the model or a tool said."""

from __future__ import annotations

import logging
import os
import stat
import uuid

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from privacy_support import GH_TOKEN, PASSWORD, ScriptModel, spi_frames

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
from durably._journal.redaction_policy import RedactionPolicy
from durably._upkeep.retention import RetentionPolicy
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key


def asker() -> AgentDefinition:
    """Parks on an approval, then finishes once approved."""

    @tool(requires_approval=True)
    async def act(*, ctx) -> str:
        return "acted"

    model = ScriptModel([ModelResponse("ask", (ToolCall("c1", "act", {}),), Usage(1, 1, 0.0))])
    return AgentDefinition(name="asker", model=model, tools=[act])


@pytest.fixture(params=["memory", "sqlite", "file", "s3"])
def url(request, tmp_path) -> str:
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/agents.db"
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return request.getfixturevalue("s3_server").url(f"iso-{uuid.uuid4().hex[:10]}")


async def test_a_runtime_cannot_see_or_touch_another_namespaces_agents(url) -> None:
    async with Runtime(url, agents=[asker()], namespace="y") as owner:
        parked = await owner.run("asker", "y-agent", "tenant y's task")
        await owner.run("asker", "same-id", "tenant y's other task")
    (approval,) = parked.open_approvals()
    before = {s: d for s, _, _, d in await _frames(url, "y")}

    async with Runtime(url, agents=[asker()], namespace="x") as other:
        await other.run("asker", "same-id", "tenant x's task")  # the same id in x is another agent
        for verb in (
            lambda: other.status("y-agent"),
            lambda: other.approve("y-agent", approval["approval_id"]),
            lambda: other.resume("y-agent"),
            lambda: other.purge("y-agent"),
            lambda: other.cancel("y-agent"),
            lambda: other.send("y-agent", "hello"),
            lambda: other.extend_budget("y-agent", steps=1),
            lambda: other.status("../y/y-agent"),
            lambda: other.purge("y/y-agent"),
        ):
            with pytest.raises(AgentNotFoundError):
                await verb()
        assert [s.agent_id for s in await other.agents()] == ["same-id"]
        assert await other.resume_all() == []  # x's agent is parked; y's are not x's to resume
        swept = await other.sweep(RetentionPolicy(default=0.0))
        assert [i.stream.agent_id for i in swept] == ["same-id"]  # and x's own is gone
        with pytest.raises(ValueError):
            other.stream("")  # no way to address outside the namespace through an id

    after = {s: d for s, _, _, d in await _frames(url, "y")}
    assert after == before  # not one byte of y changed
    async with Runtime(url, agents=[asker()], namespace="y") as owner:
        assert (await owner.status("y-agent")).status == "waiting_approval"
        assert (await owner.status("same-id")).task == "tenant y's other task"
    with pytest.raises(ValueError):
        Runtime(url, namespace="x/../y").stream("a")


async def _frames(url: str, namespace: str):
    async with Runtime(url, namespace=namespace) as rt:
        return await spi_frames(rt.store, namespace)


async def test_sqlite_files_and_directories_are_owner_only(tmp_path) -> None:
    previous = os.umask(0)  # the most permissive umask: the adapter must not rely on it
    try:
        url = f"sqlite:///{tmp_path}/new/dirs/agents.db?create=1"  # new folders: asked for
        async with Runtime(url, agents=[asker()]) as rt:
            await rt.run("asker", "a1", "t")
            files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "new" / "dirs").iterdir()}
    finally:
        os.umask(previous)
    assert {"agents.db", "agents.db-wal", "agents.db-shm"} <= set(files)
    assert set(files.values()) == {0o600}, files
    for directory in (tmp_path / "new", tmp_path / "new" / "dirs"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


async def test_spans_and_logs_carry_no_content(tmp_path, caplog) -> None:
    """With redaction off (the journal holds everything), spans and logs still hold ids and sizes only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    @tool()
    async def login(user: str, password: str, *, ctx) -> str:
        raise PermissionError(f"password {password} rejected for {user}")

    class FlakyModel(ScriptModel):
        async def respond(self, messages, tools):
            if any(m["role"] == "tool" for m in messages):
                raise ConnectionError(f"provider said: token {GH_TOKEN} revoked")
            return await super().respond(messages, tools)

    model = FlakyModel(
        [
            ModelResponse(
                f"log in as {PASSWORD}",
                (ToolCall("c1", "login", {"user": "bobby-q7x", "password": PASSWORD}),),
                Usage(1, 1, 0.0),
            )
        ]
    )
    definition = AgentDefinition(name="leaky", model=model, tools=[login])
    keys = AESGCMCipher(StaticKeyProvider({"k": generate_key()}))
    caplog.set_level(logging.DEBUG)
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(
        url,
        agents=[definition],
        tracer_provider=provider,
        redaction=RedactionPolicy.disabled(),
        snapshot_policy=SnapshotPolicy(every_records=1, tail_ratio=0.0),
        encryption=keys,
    ) as rt:
        state = await rt.run("leaky", "a1", f"use {PASSWORD} and {GH_TOKEN}")
        await rt.status("a1")
        await rt.sweep(RetentionPolicy(default=0.0), dry_run=True)
    async with Runtime(url) as rt:  # no key: the failed restore is logged and raised
        with pytest.raises(Exception):  # noqa: B017  (any error: the point is that it is raised, not served)
            await rt.status("a1")
    assert state.status == "failed" and GH_TOKEN in state.reason  # redaction was off: the journal has it

    spans = exporter.get_finished_spans()
    assert {"execute_tool login", "chat script-model", "durably.checkpoint.save", "durably.snapshot.save"} <= {
        s.name for s in spans
    }
    texts = []
    for span in spans:
        texts += [span.name, repr(dict(span.attributes or {})), span.status.description or ""]
        texts += [f"{e.name} {dict(e.attributes or {})}" for e in span.events]
    assert any("unreadable" in record.getMessage() for record in caplog.records)  # logs were captured
    texts += [record.getMessage() for record in caplog.records]
    texts += [repr(record.args) for record in caplog.records]
    joined = "\n".join(texts)
    for secret in (PASSWORD, GH_TOKEN, "bobby-q7x", "rejected", "revoked"):
        assert secret not in joined
    failed_tool = next(s for s in spans if s.name == "execute_tool login")
    assert any(e.attributes.get("exception.type", "").endswith("PermissionError") for e in failed_tool.events)
