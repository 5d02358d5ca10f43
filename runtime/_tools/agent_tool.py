"""Agents as tools: a tool whose call runs another agent, durably, as a child.

``agent_tool(definition)`` makes a ``Tool`` the model calls with a ``task``.
The step loop does not call a function for it: it starts a child agent of
that definition in its own stream, under the id ``<parent id>/<call id>``,
journals the start in the parent (which then parks, holding no process), and
hands the child's result (or its failure) back as the call's result once the
child ends (``durably._loop.child_calls``, ``durably._children``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durably._tools.tool import Tool, _check_name
from durably.errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    from durably._loop.agent import AgentDefinition

__all__ = ["AgentTool", "agent_tool", "child_agent_id"]


def child_agent_id(parent_id: str, call_id: str) -> str:
    """The id of the child agent a parent's call starts: ``<parent_id>/<call_id>``.

    Deterministic, so a resumed parent finds the child its first attempt
    started instead of starting a second one.
    """
    return f"{parent_id}/{call_id}"


async def _child_task(task: str) -> str:
    """Hand a task to another agent; its final answer is the result.

    Args:
        task: What the other agent should do, in full: it sees nothing else.
    """
    raise InvalidArgumentError("an agent tool runs a child agent inside a Runtime; it cannot be called directly")


@dataclass(frozen=True, slots=True)
class AgentTool(Tool):
    """A ``Tool`` whose call starts a child agent of ``agent`` (built by ``agent_tool``).

    Attributes:
        name: The tool's name as the model sees it.
        fn: Never called: the step loop starts the child instead.
        description: What the model is told the tool does.
        parameters: The JSON Schema shown to the model (one ``task`` string).
        requires_approval: False: the child asks for its own approvals.
        on_unknown_outcome: Unused: starting a child is idempotent by its id.
        reconcile: None.
        sequential: True: the step loop starts the children of a turn itself.
        agent: The child's ``AgentDefinition``.
        retry: None: starting a child is not retried (its own tools carry their policies).
        timeout: None: the parent waits for its child as long as the child runs.
        heartbeat_timeout: None (no heartbeats: the child's journal shows its progress).
        heartbeat_every: Unused.

    Raises:
        ArgumentTypeError: ``agent`` is not an ``AgentDefinition``, or as ``Tool``
            raises (a ``TypeError``).
    """

    agent: Any = None

    def __post_init__(self) -> None:
        from durably._loop.agent import AgentDefinition

        if not isinstance(self.agent, AgentDefinition):
            raise ArgumentTypeError(f"agent_tool takes an AgentDefinition, got {type(self.agent).__name__}")
        Tool.__post_init__(self)


def agent_tool(definition: AgentDefinition, *, name: str | None = None, description: str | None = None) -> AgentTool:
    """A tool that hands a task to a child agent of ``definition`` ("agents as tools").

    The model calls it with ``{"task": "..."}``. The parent journals the call,
    starts the child (``<parent id>/<call id>``, its own stream, its own
    approvals and budget) and parks until the child ends; the child's result
    comes back as the call's result, exactly once, and a failed or cancelled
    child comes back as the call's error. Calls of agent tools in one model
    turn start their children together; the parent waits for all of them.
    The child runs wherever ``definition`` is registered and served: register it
    in the parent's runtime to run it there.

    Args:
        definition: The child agent's definition.
        name: The tool's name as the model sees it (default: the definition's
            name, which must then be a valid tool name).
        description: What the model is told the tool does (default: a sentence
            naming the agent).

    Returns:
        The ``AgentTool``, to put in the parent's ``tools``.

    Raises:
        ArgumentTypeError: ``definition`` is not an ``AgentDefinition``, or
            ``name`` or ``description`` is not a str (a ``TypeError``).
        InvalidArgumentError: ``name`` (or the definition's name, when ``name``
            is not given) is not a tool name a model can call (a ``ValueError``).
    """
    from durably._loop.agent import AgentDefinition

    if not isinstance(definition, AgentDefinition):
        raise ArgumentTypeError(f"agent_tool takes an AgentDefinition, got {type(definition).__name__}")
    if description is not None and not isinstance(description, str):
        raise ArgumentTypeError(f"agent_tool: description must be a str, got {type(description).__name__}")
    tool_name = _check_name(definition.name if name is None else name)
    text = description or f"Hand a task to the {definition.name} agent; its final answer is the result."
    return AgentTool(name=tool_name, fn=_child_task, description=text, sequential=True, agent=definition)
