"""import_sqlite_threads: AsyncSqliteSaver threads copied into a DurablySaver, then continued."""

from __future__ import annotations

import aiosqlite
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph_agent import ScriptedChatModel, build_agent

from durably.integrations.langgraph import DurablySaver, ImportSourceError, import_sqlite_threads


async def _tuples(saver, thread: str) -> list:
    return [t async for t in saver.alist({"configurable": {"thread_id": thread}})]


async def test_threads_move_over_exactly_and_keep_running(tmp_path) -> None:
    source, target = tmp_path / "langgraph.db", f"sqlite:///{tmp_path / 'durably.db'}"
    async with aiosqlite.connect(source) as conn:
        sqlite_saver = AsyncSqliteSaver(conn)
        await sqlite_saver.setup()
        for thread, steps in (("a", 4), ("b", 2)):
            graph = build_agent(ScriptedChatModel(steps=steps), approval=thread == "b").compile(
                checkpointer=sqlite_saver
            )
            await graph.ainvoke({"messages": [HumanMessage(f"go {thread}")]}, {"configurable": {"thread_id": thread}})
        theirs = {thread: await _tuples(sqlite_saver, thread) for thread in ("a", "b")}
    async with DurablySaver.from_url(target) as saver:
        imported = await import_sqlite_threads(source, saver)
        assert [(t.thread_id, t.checkpoints) for t in imported] == [("a", len(theirs["a"])), ("b", len(theirs["b"]))]
        assert sum(t.writes for t in imported) > 0
        again = await import_sqlite_threads(source, saver, thread_ids=["a"])  # idempotent
        assert [t.thread_id for t in again] == ["a"]
    async with DurablySaver.from_url(target) as saver:
        for thread in ("a", "b"):
            ours = await _tuples(saver, thread)
            assert len(ours) == len(theirs[thread])
            for a, b in zip(ours, theirs[thread], strict=True):
                assert a.config == b.config and a.parent_config == b.parent_config
                assert a.checkpoint == b.checkpoint
                assert a.metadata == b.metadata
                assert a.pending_writes == b.pending_writes
        # The interrupted thread resumes on durably where it stopped on SQLite.
        from langgraph.types import Command

        graph = build_agent(ScriptedChatModel(steps=2), approval=True).compile(checkpointer=saver)
        state = await graph.aget_state({"configurable": {"thread_id": "b"}})
        assert state.next == ("approve",)
        await graph.ainvoke(Command(resume="yes"), {"configurable": {"thread_id": "b"}})
        state = await graph.aget_state({"configurable": {"thread_id": "b"}})
        assert state.next == ("approve",) and sum(m.type == "tool" for m in state.values["messages"]) == 2


async def test_a_source_that_is_not_a_langgraph_database_is_refused(tmp_path) -> None:
    async with DurablySaver.from_url(f"sqlite:///{tmp_path / 'durably.db'}") as saver:
        with pytest.raises(ImportSourceError):
            await import_sqlite_threads(tmp_path / "missing.db", saver)
        (tmp_path / "empty.db").write_bytes(b"")
        with pytest.raises(ImportSourceError):
            await import_sqlite_threads(tmp_path / "empty.db", saver)


def test_the_cli_command_imports_through_the_same_function(tmp_path, capsys) -> None:
    import anyio

    from durably._cli.main import main

    source, target = tmp_path / "langgraph.db", f"sqlite:///{tmp_path / 'durably.db'}"

    async def make() -> int:
        async with aiosqlite.connect(source) as conn:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            graph = build_agent(ScriptedChatModel(steps=2)).compile(checkpointer=saver)
            await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "cli"}})
            return len(await _tuples(saver, "cli"))

    count = anyio.run(make)
    assert main(["import-langgraph", str(source), "--to", target]) == 0
    assert f"cli: {count} checkpoints" in capsys.readouterr().out

    async def check() -> int:
        async with DurablySaver.from_url(target) as saver:
            return len(await _tuples(saver, "cli"))

    assert anyio.run(check) == count
    assert main(["import-langgraph", str(tmp_path / "missing.db"), "--to", target]) == 1
