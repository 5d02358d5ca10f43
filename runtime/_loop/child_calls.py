"""The parent's side of child agents: start the children of agent-tool calls, park, take their ends.

A call of an ``AgentTool`` runs no function. The actor starts a child agent
per such call of the model turn (its id ``<parent>/<call id>``, so starting is
idempotent: a parent resumed after a crash finds the child it started), then
journals each call's ``tool_intent`` and a ``child_started`` record in one
append, which parks the parent (``waiting_child``). A child that ended before
its parent knew it could not tell the parent, so the parent looks once after
that append and journals such an end itself (``child_ended``). Every other end
reaches the parent from the child's side (``durably._children``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from durably._loop.state import RUNNING, AgentState
from durably._tools.agent_tool import AgentTool, child_agent_id
from durably.errors import InvalidCommandError, RedactedArgumentError, ToolArgumentsError
from durably.schemas._records import Kind

if TYPE_CHECKING:
    from durably._journal.writer import AgentJournal
    from durably._loop.agent import AgentDefinition


class ChildAgents(Protocol):
    """What the actor needs of its runtime to run child agents (``durably._children.ChildRuns``)."""

    async def start(self, definition: AgentDefinition, agent_id: str, task: str, parent: dict[str, Any]) -> str | None:
        """Journal the child's start (nothing if it exists as this parent's child); None, or why it cannot start."""
        ...

    async def outcome(self, agent_id: str) -> dict[str, Any] | None:
        """The child's end as ``child_ended`` data (status, result, error); None while it runs."""
        ...

    def run(self, agent_id: str) -> None:
        """Run the child in this runtime if it can (in the background), else leave it to the workers."""
        ...


class ChildCalls:
    """Mixin of ``AgentActor``: needs ``definition``, ``journal``, ``state``, ``children`` and ``_validated``."""

    if TYPE_CHECKING:  # the host's (AgentActor), declared for the type checker
        definition: AgentDefinition
        journal: AgentJournal
        children: ChildAgents | None
        stopping: bool
        _validated: dict[str, dict[str, Any]]

        @property
        def state(self) -> AgentState: ...

    async def _child_call(self, call: dict[str, Any]) -> None:
        """Resolve ``call`` (of an agent tool, the first pending call): start its
        child and those of the turn's other agent-tool calls, or take its end."""
        started = self.state.children.get(call["key"])
        if started is not None:
            # Runnable while this child runs (an operator retried a parent that failed
            # while it waited): take its end if it came, else leave it parked in effect.
            before = self.state.last_seq
            await self._take_ends([started["agent_id"]])
            if self.state.last_seq == before:
                self.stopping = True  # the child's end wakes it; looping here would spin
            return
        children = self.children
        entries: list[tuple[str, dict[str, Any]]] = []
        begun: list[str] = []
        for pending in self.state.pending_calls:
            tool = self.definition.tool(pending["name"])
            if not isinstance(tool, AgentTool) or self.state.ledger_entry(pending["key"]) is not None:
                continue
            if pending["key"] in self.state.children:
                continue
            problem, task = self._child_task(tool, pending)
            child_id = child_agent_id(self.state.agent_id, pending["id"])
            if problem is None and children is None:
                problem = "child agents run only inside a Runtime"
            if problem is None and children is not None:
                self.journal.check_lease()  # only the lease holder starts anything
                link = {"agent_id": self.state.agent_id, "run_id": self.state.run_id, "key": pending["key"]}
                problem = await children.start(tool.agent, child_id, task, link)
            if problem is not None:
                data = {"key": pending["key"], "call_id": pending["id"], "tool": tool.name}
                entries.append((Kind.TOOL_RESULT, {**data, "result": None, "error": problem}))
                continue
            intent = {"key": pending["key"], "call_id": pending["id"], "tool": tool.name, "attempt": 1}
            child = {**intent, "agent_id": child_id, "definition": tool.agent.name}
            del child["attempt"]
            entries += [(Kind.TOOL_INTENT, intent), (Kind.CHILD_STARTED, child)]
            begun.append(child_id)
        await self.journal.append(*entries)
        await self._take_ends(begun)
        if children is not None:
            for child_id in begun:
                if any(c["agent_id"] == child_id and c["status"] == RUNNING for c in self.state.children.values()):
                    children.run(child_id)

    def _child_task(self, tool: AgentTool, call: dict[str, Any]) -> tuple[str | None, str]:
        """``(None, task)`` from the call's arguments, or ``(why not, "")``."""
        arguments = self._validated.pop(call["key"], None)
        if arguments is None:
            try:
                arguments = tool.validate(self.journal.redactor.arguments_for(call))
            except (ToolArgumentsError, RedactedArgumentError) as exc:
                return str(exc), ""
        return None, str(arguments["task"])

    async def _take_ends(self, child_ids: list[str]) -> None:
        """Journal the end of each of ``child_ids`` that has ended and is still open here."""
        if self.children is None:
            return
        for child_id in child_ids:
            key = next((k for k, c in self.state.children.items() if c["agent_id"] == child_id), None)
            if key is None or self.state.children[key]["status"] != RUNNING:
                continue
            ended = await self.children.outcome(child_id)
            if ended is None:
                continue
            child = self.state.children[key]
            data = {"key": key, "call_id": child["call_id"], "tool": child["tool"], "agent_id": child_id, **ended}
            try:
                await self.journal.append((Kind.CHILD_ENDED, data))
            except InvalidCommandError:
                pass  # its end reached this journal from the child's side meanwhile: folded in already
