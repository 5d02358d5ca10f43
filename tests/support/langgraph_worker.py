"""One run of the LangGraph test agent in a child process, killed with SIGKILL where told.

``run_once`` is the child's whole life: open the checkpointer (``durably``:
DurablySaver on SQLite; ``sqlite``: LangGraph's AsyncSqliteSaver), start or
resume the thread, and die at the kill point:

* ``after:<call>``: in tool call ``<call>``, right after its side effect, before
  LangGraph could store the task's writes;
* ``sibling:<call>``: in ``<call>`` before its side effect, once the other call
  of the same superstep has its writes stored (polled through ``aget_tuple``);
* ``interrupt``: no kill; the run stops at the approval interrupt;
* ``resume:<answer>``: resume an interrupted thread with ``Command(resume=answer)``;
* empty: run to the end.

The child exits 0 when the graph returned, 3 when a wait timed out, 1 on an error.
"""

from __future__ import annotations

import asyncio
import os
import signal
import traceback

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command
from langgraph_agent import ScriptedChatModel, build_agent

THREAD = "crash-thread"


async def _open(kind: str, db: str):
    if kind == "durably":
        from durably.integrations.langgraph import DurablySaver

        saver = DurablySaver.from_url(f"sqlite:///{db}")
        await saver.__aenter__()
        return saver, saver.aclose
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    conn = await aiosqlite.connect(db)
    saver = AsyncSqliteSaver(conn)
    await saver.setup()
    return saver, conn.close


async def _main(kind: str, db: str, kill: str, steps: int, approval: bool) -> int:
    saver, close = await _open(kind, db)
    what, _, target = kill.partition(":")
    config = {"configurable": {"thread_id": THREAD}, "recursion_limit": 10 * steps + 20}

    async def stored_sibling_writes(sibling: str) -> bool:
        tup = await saver.aget_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
        return tup is not None and any(
            isinstance(m, ToolMessage) and m.tool_call_id == sibling
            for _, channel, value in tup.pending_writes or []
            if channel == "messages"
            for m in value
        )

    async def hook(call_id: str, phase: str, _config) -> None:
        if call_id != target:
            return
        if what == "after" and phase == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        if what == "sibling" and phase == "before":
            sibling = call_id[:-1] + "0"
            for _ in range(3000):
                if await stored_sibling_writes(sibling):
                    os.kill(os.getpid(), signal.SIGKILL)
                await asyncio.sleep(0.01)
            os._exit(3)

    try:
        graph = build_agent(ScriptedChatModel(steps=steps), tool_hook=hook, approval=approval).compile(
            checkpointer=saver
        )
        if what == "resume":
            await graph.ainvoke(Command(resume=target), config, durability="sync")
        else:
            started = await saver.aget_tuple(config) is not None
            await graph.ainvoke(None if started else {"messages": [HumanMessage("go")]}, config, durability="sync")
    finally:
        await close()
    return 0


def run_once(kind: str, db: str, kill: str, steps: int, effects: str, approval: bool = False) -> None:
    """The child process: run, then leave with ``os._exit`` (never the parent's atexit hooks)."""
    os.environ["DURABLY_LG_EFFECTS"] = effects
    try:
        code = asyncio.run(_main(kind, db, kill, steps, approval))
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)
