"""Peers: LangGraph's ``AsyncSqliteSaver`` on the same conversation, in its ordinary use.

The graph is LangGraph's standard tool-calling agent: a ``messages`` channel
reduced by ``add_messages``, an ``agent`` node (the model) and a ``tools``
node, with the usual conditional edge back to ``agent`` while the model asks
for tools. It runs with ``durability="sync"`` (every checkpoint is written
before the next step starts) on an ``AsyncSqliteSaver`` whose connection is
put in WAL mode (LangGraph's own ``setup``) with ``synchronous=FULL``, the
same durability as durably's SQLite store. The model and tool are the same
scripted ones as durably's (``workload.Step``): no sleep, O(1) per call, and
the model node records ``perf_counter`` at each call, as ``ScriptedModel`` does.

Needs the ``peers`` extra (``pip install 'durably[peers]'``); ``available()``
says whether it is installed.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from .workload import Step

TASK = "Fix the failing test in the standard library."


def available() -> bool:
    """True when LangGraph and its SQLite checkpointer are importable."""
    return all(importlib.util.find_spec(m) is not None for m in ("langgraph", "langgraph.checkpoint.sqlite.aio"))


@dataclass
class PeerRun:
    """A LangGraph run: ``wall_s``, per-step seconds, stored bytes (payload and file),
    checkpoint count, restore seconds (cold: new connection; warm: median of repeats)."""

    wall_s: float
    latencies: list[float]
    payload_bytes: int
    file_bytes: int
    checkpoints: int
    restore_cold_s: float
    restore_warm_s: list[float]
    messages: int
    cpu_s: float = 0.0  # the process's CPU time (all threads) over the run


def _graph(steps: list[Step], stamps: list[float]) -> Any:  # a LangGraph StateGraph (imported lazily)
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    # The functional form: evaluated now, not as a string (this module has postponed annotations).
    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    results = {s.call_id: s.result for s in steps}

    async def agent(state: dict[str, Any]) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        i = len(stamps) - 1
        if i >= len(steps):
            return {"messages": [AIMessage(content="All tests pass now.")]}
        step = steps[i]
        call = {"name": step.tool, "args": step.arguments, "id": step.call_id, "type": "tool_call"}
        return {"messages": [AIMessage(content=step.text, tool_calls=[call])]}

    async def tools(state: dict[str, Any]) -> dict[str, Any]:
        calls = state["messages"][-1].tool_calls
        return {
            "messages": [ToolMessage(content=results[c["id"]], tool_call_id=c["id"], name=c["name"]) for c in calls]
        }

    def route(state: dict[str, Any]) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder: Any = StateGraph(State)  # nodes take the state as a plain dict, which StateGraph's generics refuse
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


async def _saver(path: Path) -> tuple[Any, Any]:  # (aiosqlite connection, AsyncSqliteSaver), imported lazily
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    conn = await aiosqlite.connect(path)
    saver = AsyncSqliteSaver(conn)
    await saver.setup()  # creates the tables and sets WAL mode
    await conn.execute("PRAGMA synchronous = FULL")
    return conn, saver


async def run_langgraph_in_memory(steps: list[Step]) -> float:
    """Seconds for the same graph with no checkpointer: LangGraph's own cost per step,
    to tell it apart from its checkpointer's in the side-by-side figures."""
    from langchain_core.messages import HumanMessage, SystemMessage

    stamps: list[float] = []
    graph = _graph(steps, stamps).compile()
    config = {"recursion_limit": 2 * len(steps) + 10}
    inputs = {"messages": [SystemMessage("You are a careful software engineer. Use the tools."), HumanMessage(TASK)]}
    start = time.perf_counter()
    await graph.ainvoke(inputs, config)
    return time.perf_counter() - start


async def _durably_saver(path: Path) -> tuple[Any, Callable[[], Awaitable[None]]]:
    from durably.integrations.langgraph import DurablySaver

    saver = DurablySaver.from_url(f"sqlite:///{path}")
    await saver.__aenter__()  # opens the store now: connecting is not timed, as for AsyncSqliteSaver
    return saver, saver.aclose


async def _sqlite_saver(path: Path) -> tuple[Any, Callable[[], Awaitable[None]]]:
    conn, saver = await _saver(path)
    return saver, conn.close


#: The checkpointers the bench compares, by the system name its figures carry.
SAVERS = {"langgraph-AsyncSqliteSaver": _sqlite_saver, "langgraph-DurablySaver": _durably_saver}


def _file_bytes(path: Path) -> int:
    """Bytes of the database and every file beside it (-wal, -shm, -journal)."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def run_langgraph(
    path: Path,
    steps: list[Step],
    *,
    thread_id: str = "bench",
    restore_repeats: int = 5,
    saver: str = "langgraph-AsyncSqliteSaver",
) -> PeerRun:
    """Run ``steps`` through the LangGraph agent on a fresh checkpointer at ``path``.

    ``saver``: a key of ``SAVERS``. ``payload_bytes``: what the checkpointer
    stored (AsyncSqliteSaver: checkpoint, metadata and write blobs; DurablySaver:
    the same as the file). ``file_bytes``: every file of the database after close.
    Raises ``RuntimeError`` when the run did not store every message.
    """
    from langchain_core.messages import HumanMessage, SystemMessage

    stamps: list[float] = []
    builder = _graph(steps, stamps)
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": 2 * len(steps) + 10}
    open_saver = SAVERS[saver]
    checkpointer, close = await open_saver(path)
    try:
        graph = builder.compile(checkpointer=checkpointer)
        inputs = {
            "messages": [SystemMessage("You are a careful software engineer. Use the tools."), HumanMessage(TASK)]
        }
        start, cpu = time.perf_counter(), time.process_time()
        await graph.ainvoke(inputs, config, durability="sync")
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        if saver == "langgraph-AsyncSqliteSaver":
            conn = checkpointer.conn
            (payload,) = await (
                await conn.execute(
                    "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints) + "
                    "(SELECT coalesce(sum(length(value)), 0) FROM writes)"
                )
            ).fetchone()
            (count,) = await (await conn.execute("SELECT count(*) FROM checkpoints")).fetchone()
            await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            payload = None
            count = len([t async for t in checkpointer.alist({"configurable": {"thread_id": thread_id}})])
    finally:
        await close()
    file_bytes = _file_bytes(path)
    payload = file_bytes if payload is None else payload

    checkpointer, close = await open_saver(path)  # cold: a new connection, nothing cached in it
    try:
        graph = builder.compile(checkpointer=checkpointer)
        t = time.perf_counter()
        snapshot = await graph.aget_state({"configurable": {"thread_id": thread_id}})
        cold = time.perf_counter() - t
        warm = []
        for _ in range(restore_repeats):
            t = time.perf_counter()
            await graph.aget_state({"configurable": {"thread_id": thread_id}})
            warm.append(time.perf_counter() - t)
    finally:
        await close()
    messages = len(snapshot.values["messages"])
    if messages != 2 + 2 * len(steps) + 1:
        raise RuntimeError(f"langgraph run stored {messages} messages, expected {2 + 2 * len(steps) + 1}")
    latencies = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return PeerRun(wall, latencies, int(payload), file_bytes, count, cold, warm, messages, cpu)
