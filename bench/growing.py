"""A LangGraph graph whose message list grows one message per super-step, on four checkpointers.

The peers suite's graph runs a model/tool conversation (two super-steps and
two messages per step). This one is the shape of a long-running chat: a
single ``step`` node loops, each super-step appends one ``AIMessage`` (about
200 characters) to an ``add_messages`` channel, until ``supersteps`` are done.
``durability="sync"``: every checkpoint is stored before the next super-step.
It runs on LangGraph's ``AsyncSqliteSaver`` (WAL, ``synchronous=FULL``) and
``AsyncPostgresSaver``, and on ``DurablySaver`` over durably's SQLite and
PostgreSQL stores. Bytes are what each keeps after the run: every file of a
SQLite database; on PostgreSQL the total relation size (tables, indexes,
TOAST) of the saver's tables.

Needs the ``peers`` extra, plus ``langgraph-checkpoint-postgres`` for the
PostgreSQL peer; ``available(saver)`` says whether a saver can run here.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

SQLITE_PEER, SQLITE_DURABLY = "langgraph-AsyncSqliteSaver", "langgraph-DurablySaver"
POSTGRES_PEER, POSTGRES_DURABLY = "langgraph-AsyncPostgresSaver", "langgraph-DurablySaver-postgres"
_NEEDS = {
    SQLITE_PEER: ("langgraph", "langgraph.checkpoint.sqlite.aio"),
    SQLITE_DURABLY: ("langgraph",),
    POSTGRES_PEER: ("langgraph", "langgraph.checkpoint.postgres.aio"),
    POSTGRES_DURABLY: ("langgraph",),
}
_TEXT = "Noted. " + "The build log shows the same flaky test again; retrying with the cache cleared. " * 2


def available(saver: str) -> bool:
    """True when ``saver`` (one of the four names) can run here."""
    return all(importlib.util.find_spec(m) is not None for m in _NEEDS[saver])


@dataclass
class GrowingRun:
    """One run: ``wall_s``, ``cpu_s`` (the process's, all threads), stored ``bytes``, ``messages`` at the end."""

    wall_s: float
    cpu_s: float
    bytes: int
    messages: int


def _graph(supersteps: int) -> Any:  # a LangGraph StateGraph (imported lazily)
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"{len(state['messages'])}: {_TEXT}")]}

    def route(state: dict[str, Any]) -> str:
        return "step" if len(state["messages"]) <= supersteps else END

    builder: Any = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route, ["step", END])
    return builder


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def _pg_bytes(dsn: str, schema: str, tables: tuple[str, ...] | None) -> int:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS b FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' "
            "AND ($2::text[] IS NULL OR c.relname = ANY($2::text[]))",
            schema,
            list(tables) if tables is not None else None,
        )
        return int(rows[0]["b"])
    finally:
        await conn.close()


async def _open(saver: str, where: str) -> tuple[Any, Callable[[], Awaitable[None]], Callable[[], Awaitable[int]]]:
    """(checkpointer, close, bytes after close) for ``saver`` at ``where`` (a SQLite path, or a PostgreSQL DSN)."""
    if saver == SQLITE_PEER:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        conn = await aiosqlite.connect(where)
        lite: Any = AsyncSqliteSaver(conn)
        await lite.setup()
        await conn.execute("PRAGMA synchronous = FULL")

        async def sqlite_bytes() -> int:
            return _file_bytes(Path(where))

        return lite, conn.close, sqlite_bytes
    if saver == POSTGRES_PEER:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        schema = f"lg_{uuid.uuid4().hex[:10]}"
        admin = await AsyncConnection.connect(where, autocommit=True)
        await admin.execute(f"CREATE SCHEMA {schema}")
        await admin.close()
        pg = await AsyncConnection.connect(
            where, autocommit=True, prepare_threshold=0, row_factory=dict_row, options=f"-c search_path={schema}"
        )
        peer = AsyncPostgresSaver(pg)
        await peer.setup()

        async def pg_peer_bytes() -> int:
            return await _pg_bytes(where, schema, None)

        return peer, pg.close, pg_peer_bytes
    from durably.integrations.langgraph import DurablySaver

    if saver == SQLITE_DURABLY:
        url = f"sqlite:///{where}"

        async def durably_bytes() -> int:
            return _file_bytes(Path(where))
    else:
        schema = f"dy_{uuid.uuid4().hex[:10]}"
        url = f"{where}?schema={schema}"

        async def durably_bytes() -> int:
            return await _pg_bytes(where, schema, None)

    ours = DurablySaver.from_url(url)
    await ours.__aenter__()  # connecting is not timed, as for the peers
    return ours, ours.aclose, durably_bytes


async def run_growing(saver: str, where: str, supersteps: int) -> GrowingRun:
    """Run the graph for ``supersteps`` on ``saver`` at ``where`` (a fresh SQLite path, or a PostgreSQL DSN).

    Raises ``RuntimeError`` when the stored thread does not hold every message."""
    checkpointer, close, stored = await _open(saver, where)
    config = {"configurable": {"thread_id": "growing"}, "recursion_limit": supersteps + 10}
    try:
        graph = _graph(supersteps).compile(checkpointer=checkpointer)
        start, cpu = time.perf_counter(), time.process_time()
        await graph.ainvoke({"messages": []}, config, durability="sync")
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        messages = len((await graph.aget_state(config)).values["messages"])
    finally:
        await close()
    if messages != supersteps + 1:
        raise RuntimeError(f"{saver} stored {messages} messages, expected {supersteps + 1}")
    return GrowingRun(wall, cpu, await stored(), messages)
