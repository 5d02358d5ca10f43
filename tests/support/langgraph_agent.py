"""A ReAct-style LangGraph agent for the DurablySaver tests: a scripted chat model, parallel tools.

The model is a real LangChain ``BaseChatModel`` whose answers are a script
indexed by how many AI messages the conversation already holds, so a resumed
run (a new process) continues the same script. Each AI message asks for
``calls_per_step`` tool calls; every call runs as its own task in one
superstep (``Send``), as LangGraph's ReAct agents do, so a superstep can be
killed with some tasks' writes stored and others not. The ``record`` tool's
side effect is a line appended to a file (``DURABLY_LG_EFFECTS``) with its
call id: counting the lines counts the executions.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send, interrupt


class ScriptedChatModel(BaseChatModel):
    """Answers step ``i`` (the number of AI messages so far) with ``calls_per_step``
    tool calls, and a final text once ``steps`` are done."""

    steps: int = 3
    calls_per_step: int = 2

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        step = sum(isinstance(m, AIMessage) for m in messages)
        if step >= self.steps:
            message = AIMessage(content="All done.")
        else:
            calls = [
                {"name": "record", "args": {"note": f"step {step} call {j}"}, "id": f"s{step}c{j}", "type": "tool_call"}
                for j in range(self.calls_per_step)
            ]
            message = AIMessage(content=f"Step {step}: recording.", tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


class State(TypedDict):
    messages: Annotated[list, add_messages]


def record_effect(call_id: str) -> None:
    """The tool's side effect: one durable line per execution."""
    path = os.environ.get("DURABLY_LG_EFFECTS")
    if path:
        with open(path, "a") as f:
            f.write(call_id + "\n")
            f.flush()
            os.fsync(f.fileno())


def build_agent(model: BaseChatModel, *, tool_hook=None, approval: bool = False):
    """The graph builder: ``agent`` (the model), one ``tool`` task per call, back to ``agent``.

    ``tool_hook(call_id, phase, config)`` (async) runs before (``"before"``) and
    after (``"after"``) the side effect: the crash tests kill the process there.
    ``approval``: an ``approve`` node interrupts before the tools run.
    """

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def tool(call: dict[str, Any], config) -> dict[str, Any]:
        if tool_hook is not None:
            await tool_hook(call["id"], "before", config)
        record_effect(call["id"])
        if tool_hook is not None:
            await tool_hook(call["id"], "after", config)
        return {
            "messages": [
                ToolMessage(content=f"recorded {call['args']['note']}", tool_call_id=call["id"], name="record")
            ]
        }

    def approve(state: State) -> dict[str, Any]:
        interrupt({"question": "run these tools?", "calls": [c["id"] for c in state["messages"][-1].tool_calls]})
        return {}

    def route(state: State):
        last = state["messages"][-1]
        if not getattr(last, "tool_calls", None):
            return END
        if approval:
            return "approve"
        return [Send("tool", call) for call in last.tool_calls]

    def after_approval(state: State):
        last = [m for m in state["messages"] if isinstance(m, AIMessage)][-1]
        return [Send("tool", call) for call in last.tool_calls]

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)
    builder.add_edge(START, "agent")
    if approval:
        builder.add_node("approve", approve)
        builder.add_conditional_edges("agent", route, ["approve", END])
        builder.add_conditional_edges("approve", after_approval, ["tool"])
    else:
        builder.add_conditional_edges("agent", route, ["tool", END])
    builder.add_edge("tool", "agent")
    return builder
