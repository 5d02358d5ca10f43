"""The bench agent: a scripted model and instant tools driven through the real ``Runtime``.

The model answers from a pre-generated conversation (``workload.Step``) and
records ``time.perf_counter()`` at every call; the tools return the step's
pre-generated result. Neither sleeps nor does work that grows with the
history, so the time between two model calls is what durably spends on one
step: journaling the response, the tool intent and the tool result (three
durable appends), folding them into the state, and the loop around them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from durably import (
    AgentDefinition,
    AgentHandle,
    ModelResponse,
    Runtime,
    SnapshotPolicy,
    Tool,
    ToolCall,
    ToolContext,
    Usage,
    tool,
)
from durably._journal.page_writer import SECTIONS
from durably._journal.records import RecordCodec
from durably._loop.state import FINISHED
from durably.storage._spi import Store, StreamId, supports_blobs

from .workload import MODEL_NAME, TOOL_NAMES, Step

TASK = "Fix the failing test in the standard library."


class ScriptedModel:
    """Replays ``steps`` as model responses, then finishes; ``stamps`` holds the
    ``perf_counter`` (seconds) of every call, so step i took ``stamps[i+1] - stamps[i]``."""

    name = MODEL_NAME

    def __init__(self, steps: list[Step], on_step: Callable[[], None] = lambda: None) -> None:
        self.steps = steps
        self.stamps: list[float] = []
        self._on_step = on_step

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        self.stamps.append(time.perf_counter())
        i = len(self.stamps) - 1
        if i:
            self._on_step()
        if i >= len(self.steps):
            return ModelResponse("All tests pass now.", (), Usage(0, 8, 0.0), model=MODEL_NAME)
        step = self.steps[i]
        usage = Usage(
            step.input_tokens, step.output_tokens, round(step.input_tokens * 3e-6 + step.output_tokens * 15e-6, 6)
        )
        return ModelResponse(step.text, (ToolCall(step.call_id, step.tool, step.arguments),), usage, model=MODEL_NAME)

    def step_latencies(self) -> list[float]:
        """Seconds per completed step, in order."""
        return [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]


def bench_tools(steps: list[Step]) -> list[Tool]:
    """One ``Tool`` per workload tool name, answering each call id with its step's result."""
    results = {s.call_id: s.result for s in steps}

    def make(name: str) -> Tool:
        async def fn(*, ctx: ToolContext, **arguments: Any) -> str:
            return results[ctx.call_id]

        fn.__name__ = name
        return tool(name, description=f"the {name} tool", on_unknown_outcome="retry")(fn)

    return [make(name) for name in TOOL_NAMES]


def bench_definition(
    steps: list[Step], index: int = 0, on_step: Callable[[], None] = lambda: None
) -> tuple[AgentDefinition, ScriptedModel]:
    """An ``AgentDefinition`` replaying ``steps`` (named per agent: each has its own script);
    ``on_step`` is called after each completed step (for a progress bar)."""
    model = ScriptedModel(steps, on_step)
    definition = AgentDefinition(
        name=f"bench-agent-{index}",
        model=model,
        tools=bench_tools(steps),
        instructions="You are a careful software engineer. Use the tools.",
    )
    return definition, model


@dataclass
class AgentRun:
    """What ``run_agents`` measured: ``wall_s`` from the first start to the last
    agent's end, each agent's model (with its stamps) and its stream."""

    wall_s: float
    models: list[ScriptedModel]
    streams: list[StreamId]
    latencies: list[list[float]] = field(default_factory=list)


async def run_agents(
    store: Store,
    namespace: str,
    conversations: list[list[Step]],
    policy: SnapshotPolicy | None = None,
    on_step: Callable[[], None] = lambda: None,
) -> AgentRun:
    """Run one agent per conversation concurrently on ``store`` through a ``Runtime``.

    Every agent is started at once (a task group of ``start`` calls), so all of
    them run together: started one after another, each start waits behind the
    commits of the agents already running, and with a thousand agents of 20 steps
    the first ones finished before the last ones began.

    Raises ``RuntimeError`` when an agent does not finish with every step
    journaled (a bench must not time a run that went wrong).
    """
    pairs = [bench_definition(steps, i, on_step) for i, steps in enumerate(conversations)]
    async with Runtime(store, namespace=namespace, snapshot_policy=policy) as rt:
        handles: dict[int, AgentHandle] = {}

        async def start_one(i: int, definition: AgentDefinition) -> None:
            handles[i] = await rt.start(definition, f"agent-{i}", TASK)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i, (definition, _) in enumerate(pairs):
                tg.start_soon(start_one, i, definition)
        states = [await handles[i].wait() for i in range(len(pairs))]
        wall = time.perf_counter() - start
    for state, steps in zip(states, conversations, strict=False):
        if state.status != FINISHED or state.usage["steps"] != len(steps) + 1:
            raise RuntimeError(f"bench agent {state.agent_id} ended {state.status} after {state.usage['steps']} steps")
    models = [model for _, model in pairs]
    streams = [StreamId(namespace, f"agent-{i}") for i in range(len(pairs))]
    return AgentRun(wall, models, streams, [m.step_latencies() for m in models])


@dataclass
class StreamBytes:
    """Stored bytes of one stream as the SPI sees them (frames only, no backend overhead)."""

    records: int = 0
    record_bytes: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0
    record_sizes: list[tuple[int, int]] = field(default_factory=list)  # (seq, bytes)
    snapshot_sizes: list[tuple[int, int]] = field(default_factory=list)
    page_sizes: list[tuple[int, int]] = field(default_factory=list)  # (seq of the snapshot that wrote it, bytes)

    @property
    def pages(self) -> int:
        return len(self.page_sizes)

    @property
    def page_bytes(self) -> int:
        return sum(size for _, size in self.page_sizes)

    @property
    def total(self) -> int:
        return self.record_bytes + self.snapshot_bytes + self.page_bytes


async def stream_bytes(store: Store, stream: StreamId) -> StreamBytes:
    """Sum the frames of ``stream``: every record, every snapshot (walked back
    with ``get_snapshot(at_or_before)``), and every conversation page those
    snapshots name (blobs, each counted once). Raises the store's errors, and
    ``CorruptRecordError`` for a snapshot the bench's own codec cannot decode."""
    out = StreamBytes()
    async for stored in store.read(stream):
        out.records += 1
        out.record_bytes += len(stored.data)
        out.record_sizes.append((stored.seq, len(stored.data)))
    codec, named = RecordCodec(), dict[str, int]()
    snapshot = await store.get_snapshot(stream)
    while snapshot is not None:
        out.snapshots += 1
        out.snapshot_bytes += len(snapshot.data)
        out.snapshot_sizes.append((snapshot.seq, len(snapshot.data)))
        _seq, state, _frame = codec.decode_snapshot(snapshot, stream)
        named.update((ref["digest"], ref["s"]) for _, key in SECTIONS for ref in state.get(key, ()))
        snapshot = await store.get_snapshot(stream, snapshot.seq - 1) if snapshot.seq > 1 else None
    if named and supports_blobs(store):
        for digest, seq in named.items():
            out.page_sizes.append((seq, len(await store.get_blob(stream, digest))))
    return out
