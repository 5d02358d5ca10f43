"""DurablySaver used the way LangGraph users use it: listings with a value this
process cannot build, subgraphs, interrupts under a TTL, nodes that edit state in
place, and one saver across several ``asyncio.run`` calls and sync calls."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import types

import anyio
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from langgraph_agent import ScriptedChatModel, State, build_agent
from pydantic import BaseModel

from durably.integrations.langgraph import CheckpointValueError, DurablySaver, ForeignLoopError


def config(thread: str = "t1") -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 100}


class Vanishing(BaseModel):
    name: str


async def test_a_value_whose_class_is_gone_does_not_fail_the_namespace_listing(tmp_path, caplog) -> None:
    module = types.ModuleType("durably_lg_gone")
    module.Gone = type("Gone", (Vanishing,), {"__module__": "durably_lg_gone"})
    sys.modules["durably_lg_gone"] = module
    url = f"sqlite:///{tmp_path / 'gone.db'}"

    class Holder(State):
        thing: object

    builder = StateGraph(Holder)
    builder.add_node("make", lambda s: {"thing": module.Gone(name="x") if s["messages"][0].content == "bad" else 1})
    builder.add_edge(START, "make")
    try:
        async with DurablySaver.from_url(url, allowed_types=[("durably_lg_gone", "Gone")]) as saver:
            graph = builder.compile(checkpointer=saver)
            for thread in ("a-good", "b-bad", "c-good"):
                await graph.ainvoke({"messages": [HumanMessage(thread.split("-")[1])]}, config(thread))
    finally:
        del sys.modules["durably_lg_gone"]
    async with DurablySaver.from_url(url, allowed_types=[("durably_lg_gone", "Gone")]) as saver:
        with caplog.at_level(logging.WARNING, logger="durably.integrations.langgraph"):
            listed = [t async for t in saver.alist(None)]
        threads = {t.config["configurable"]["thread_id"] for t in listed}
        assert threads == {"a-good", "b-bad", "c-good"}  # b-bad's checkpoints before the value still list
        good = [t for t in listed if t.config["configurable"]["thread_id"] != "b-bad"]
        assert len(good) == len([t async for t in saver.alist(config("a-good"))]) * 2
        assert "durably_lg_gone.Gone" in caplog.text and "b-bad" in caplog.text
        with pytest.raises(CheckpointValueError) as caught:
            await saver.aget_tuple(config("b-bad"))
        assert caught.value.channel == "thing"


def subgraph_builder() -> StateGraph:
    """A parent whose ``inner`` node is a subgraph that stops at an ``interrupt()``:
    the subgraph's checkpoint (its own checkpoint_ns) is the thread's newest."""
    inner = StateGraph(State)
    inner.add_node("step", lambda s: {"messages": [AIMessage("inner step")]})
    inner.add_node("ask", lambda s: {"messages": [AIMessage(str(interrupt("inner question")))]})
    inner.add_edge(START, "step")
    inner.add_edge("step", "ask")
    outer = StateGraph(State)
    outer.add_node("before", lambda s: {"messages": [AIMessage("outer step")]})
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "before")
    outer.add_edge("before", "inner")
    return outer


def test_alist_gives_the_newest_checkpoint_across_namespaces_as_sqlite_saver(tmp_path) -> None:
    newest = {}
    connection = sqlite3.connect(tmp_path / "stock.db", check_same_thread=False)
    stock = SqliteSaver(connection)
    graph = subgraph_builder().compile(checkpointer=stock)
    graph.invoke({"messages": [HumanMessage("go")]}, config())
    (newest["stock"],) = stock.list(config(), limit=1)
    stock_order = [t.config["configurable"]["checkpoint_ns"] for t in stock.list(config())]
    connection.close()
    with DurablySaver.from_url(f"sqlite:///{tmp_path / 'durably.db'}") as saver:
        graph = subgraph_builder().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("go")]}, config())
        (newest["durably"],) = saver.list(config(), limit=1)
        listed = list(saver.list(config()))
        order = [t.config["configurable"]["checkpoint_ns"] for t in listed]
    assert newest["stock"].config["configurable"]["checkpoint_ns"].startswith("inner:")
    assert newest["durably"].config["configurable"]["checkpoint_ns"].startswith("inner:")
    assert [ns.split(":")[0] for ns in order] == [ns.split(":")[0] for ns in stock_order]
    ids = [t.config["configurable"]["checkpoint_id"] for t in listed]
    assert ids == sorted(ids, reverse=True)


async def test_a_ttl_keeps_a_thread_waiting_at_an_interrupt(tmp_path, monkeypatch) -> None:
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("DURABLY_LG_EFFECTS", str(effects))
    url = f"sqlite:///{tmp_path / 'ttl.db'}"
    builder = build_agent(ScriptedChatModel(steps=1, calls_per_step=2), approval=True)
    async with DurablySaver.from_url(url, ttl=0.5) as saver:
        graph = builder.compile(checkpointer=saver)
        paused = await graph.ainvoke({"messages": [HumanMessage("go")]}, config("waits"))
        assert paused["__interrupt__"] and not effects.exists()
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config("idle"))  # also paused, then resumed
        await graph.ainvoke(Command(resume="yes"), config("idle"))
    await anyio.sleep(0.8)
    async with DurablySaver.from_url(url, ttl=0.5) as saver:
        assert await saver.asweep() == ["idle"]  # finished and idle: purged; waiting: kept
        graph = builder.compile(checkpointer=saver)
        result = await graph.ainvoke(Command(resume="yes"), config("waits"))
    assert [m.content for m in result["messages"]][0] == "go" and result["messages"][-1].content == "All done."
    # Each of the two calls ran once for "idle" and once for "waits": nothing ran again from the start.
    assert sorted(effects.read_text().split()) == ["s0c0", "s0c0", "s0c1", "s0c1"]


def editing_builder() -> StateGraph:
    """``first`` appends; ``edit`` changes the first message in place (as user code does) and appends."""

    def edit(state: State) -> dict:
        state["messages"][0].content = f"edited {len(state['messages'])}"
        return {"messages": [AIMessage(f"after edit {len(state['messages'])}")]}

    builder = StateGraph(State)
    builder.add_node("first", lambda s: {"messages": [AIMessage("first")]})
    builder.add_node("edit", edit)
    builder.add_edge(START, "first")
    builder.add_edge("first", "edit")
    return builder


async def test_an_in_place_edit_of_an_earlier_item_is_what_aget_state_returns(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'edit.db'}"
    async with DurablySaver.from_url(url) as saver:
        graph = editing_builder().compile(checkpointer=saver)
        ran = await graph.ainvoke({"messages": [HumanMessage("hi")]}, config(), durability="sync")
        assert [m.content for m in ran["messages"]] == ["edited 2", "first", "after edit 2"]
        state = await graph.aget_state(config())
        assert [m.content for m in state.values["messages"]] == ["edited 2", "first", "after edit 2"]
        # A second run starts from what the saver gave back, edits it in place again.
        ran = await graph.ainvoke({"messages": [HumanMessage("again")]}, config(), durability="sync")
        expected = ["edited 5", "first", "after edit 2", "again", "first", "after edit 5"]
        assert [m.content for m in ran["messages"]] == expected
        state = await graph.aget_state(config())
        assert [m.content for m in state.values["messages"]] == expected
        # The history keeps each checkpoint as it was: the edit does not reach older ones.
        history = [
            s.values["messages"][0].content
            async for s in graph.aget_state_history(config())
            if s.values.get("messages")
        ]
        assert history[0] == "edited 5" and "edited 2" in history and "hi" in history
    async with DurablySaver.from_url(url) as saver:  # another process reads the same
        state = await editing_builder().compile(checkpointer=saver).aget_state(config())
        assert [m.content for m in state.values["messages"]] == expected


def test_one_saver_serves_several_asyncio_runs_and_sync_calls_after(tmp_path) -> None:
    builder = StateGraph(State)
    builder.add_node("reply", lambda s: {"messages": [AIMessage(f"reply {len(s['messages'])}")]})
    builder.add_edge(START, "reply")
    # The docs' one-line example, used as scripts do.
    graph = builder.compile(checkpointer=DurablySaver.from_url(f"sqlite:///{tmp_path / 'loops.db'}"))
    asyncio.run(graph.ainvoke({"messages": [HumanMessage("one")]}, config()))
    asyncio.run(graph.ainvoke({"messages": [HumanMessage("two")]}, config()))
    assert len(graph.get_state(config()).values["messages"]) == 4
    graph.invoke({"messages": [HumanMessage("three")]}, config())
    assert len(asyncio.run(graph.aget_state(config())).values["messages"]) == 6
    assert [m.content for m in graph.get_state(config()).values["messages"]][-1] == "reply 5"
    graph.checkpointer.close()


async def test_a_second_loop_still_running_gets_a_typed_error(tmp_path) -> None:
    async with DurablySaver.from_url(f"sqlite:///{tmp_path / 'two.db'}") as saver:
        await saver.aget_tuple(config())

        def other_loop() -> None:
            with pytest.raises(ForeignLoopError):
                asyncio.run(saver.aget_tuple(config()))

        await anyio.to_thread.run_sync(other_loop)
