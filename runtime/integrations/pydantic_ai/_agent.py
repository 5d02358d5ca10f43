"""``DurableAgent``: any ``pydantic_ai.Agent`` run as a durably function agent.

The wrapped agent's loop is the run's body. Its model requests and tool calls
are journaled calls of the run (``JournaledModel``, ``JournaledToolset``), so a
resumed run replays them from the journal and goes on where the journal ends;
deferred tool calls park the run at durably approvals (``decide_deferred``) and
the run continues once they are decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.agent import AbstractAgent, AgentRunResult, EventStreamHandler
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import UsageLimits
from pydantic_core import to_jsonable_python

import durably
from durably._functions.definition import FunctionAgent
from durably._loop.agent import Budget, OnDefinitionChange
from durably.errors import ArgumentTypeError

from ._deferred import decide_deferred
from ._model import JournaledModel
from ._policy import ToolPolicy, tool_policies
from ._toolset import JournaledToolset

__all__ = ["DurableAgent", "DurableRunResult"]


@dataclass(frozen=True, slots=True)
class DurableRunResult:
    """What a durable Pydantic AI run has come to.

    Attributes:
        agent_id: The run's agent id.
        status: The agent's status (``finished``, ``waiting_approval``, ``suspended``, ``failed``...).
        output: The agent's output once finished (rebuilt with the agent's output
            type when it is a plain type), else None.
        messages: All the run's messages once finished, else empty.
        state: The durably ``AgentState`` it was read from.
    """

    agent_id: str
    status: str
    output: Any
    messages: list[ModelMessage] = field(default_factory=list)
    state: Any = None

    def all_messages(self) -> list[ModelMessage]:
        """The run's messages, as Pydantic AI's ``AgentRunResult.all_messages()`` gives them."""
        return list(self.messages)


def _budget(limits: UsageLimits | None) -> Budget | None:
    """The limits durably's budget can hold: model requests as steps, total tokens as tokens."""
    if limits is None:
        return None
    return Budget(steps=limits.request_limit, tokens=limits.total_tokens_limit)


def _output_adapter(output_type: Any) -> TypeAdapter[Any] | None:
    try:
        return TypeAdapter(output_type)
    except Exception:
        return None


class DurableAgent(FunctionAgent):
    """A Pydantic AI agent made durable on durably's journal, in one line: ``DurableAgent(agent)``.

    It is a ``durably.FunctionAgent``: register it with a ``Runtime``, start it
    with ``rt.run(durable, agent_id, prompt)`` or ``await durable.run_in(rt,
    prompt, agent_id=...)``, serve it from ``durably worker --agents
    module:attr``. Every model request (plain or streamed) and every tool call
    (function tools, MCP servers, any toolset of the agent) is journaled: a
    run killed at any point resumes by id in any process and neither asks the
    model again for an answer it stored nor runs a tool again whose result it
    stored. A tool whose call started and has no stored result follows its
    policy (``tools=``; default ``ask``: an approval decides). Deferred tools
    (``requires_approval=True``, ``ApprovalRequired``, ``CallDeferred``) become
    approvals of the run.

    Args:
        agent: The Pydantic AI agent; it needs a model of its own.
        name: The durably definition's name (default: the agent's ``name``).
        version: The definition's version label.
        tools: Unknown-outcome policy per tool name: a ``ToolPolicy``, or a
            policy name (``ask``, ``retry``, ``fail``; ``reconcile`` needs a
            ``ToolPolicy`` with its hook).
        event_stream_handler: Gets the live events of each streamed model
            request and the run's tool events (replayed requests deliver none).
        usage_limits: Pydantic AI limits: ``request_limit`` and
            ``total_tokens_limit`` become the durably budget (reaching it
            suspends the agent until ``extend_budget``); the others stay
            Pydantic AI's (exceeding them fails the run).
        on_definition_change: What a resume under a changed version does.

    Raises:
        ArgumentTypeError: ``agent`` is not a Pydantic AI agent, it has no model,
            or a ``tools`` entry is not a policy.
        InvalidArgumentError: No name, or an unknown policy.
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        name: str | None = None,
        version: str = "1",
        tools: Mapping[str, ToolPolicy | str] | None = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
        usage_limits: UsageLimits | None = None,
        on_definition_change: OnDefinitionChange | str = OnDefinitionChange.STOP,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise ArgumentTypeError(f"DurableAgent wraps a pydantic_ai Agent, got {type(agent).__name__}")
        if not isinstance(agent.model, Model):
            raise ArgumentTypeError(
                "DurableAgent needs an agent with a Model instance of its own (it is journaled, not chosen per run)"
            )
        agent_name = name or agent.name
        if not agent_name:
            raise ArgumentTypeError("DurableAgent needs a name: pass name=... or give the agent one")
        super().__init__(
            agent_name,
            self._body,
            version,
            budget=_budget(usage_limits),
            on_definition_change=on_definition_change,
        )
        policies = tool_policies(tools)
        pydantic_limits = None
        if usage_limits is not None:
            # The figures the budget holds are durably's to enforce (suspend, extend); pydantic_ai keeps the rest.
            pydantic_limits = UsageLimits(
                request_limit=None,
                tool_calls_limit=usage_limits.tool_calls_limit,
                input_tokens_limit=usage_limits.input_tokens_limit,
                output_tokens_limit=usage_limits.output_tokens_limit,
            )
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "_handler", event_stream_handler)
        object.__setattr__(self, "_limits", pydantic_limits)
        object.__setattr__(self, "_model", JournaledModel(agent.model, event_stream_handler=lambda: self._handler))
        object.__setattr__(
            self, "_toolsets", [JournaledToolset(toolset, policies=policies) for toolset in agent.toolsets]
        )
        object.__setattr__(self, "_output", _output_adapter(agent.output_type))

    agent: AbstractAgent[Any, Any]
    _handler: EventStreamHandler[Any] | None
    _limits: UsageLimits | None
    _model: JournaledModel
    _toolsets: list[JournaledToolset]
    _output: TypeAdapter[Any] | None

    async def _body(self, run: Any, task: str) -> dict[str, Any]:
        """The run: the Pydantic AI agent's loop, resumed through its deferred tool calls until it has an output."""
        agent = self.agent
        # One entry of the toolsets for the whole activation: an MCP server is started once, not once per turn.
        with agent.override(model=self._model, toolsets=self._toolsets, tools=[]):
            async with agent:
                return await self._turns(run, agent, task)

    async def _turns(self, run: Any, agent: AbstractAgent[Any, Any], prompt: str) -> dict[str, Any]:
        """Run the agent; while it ends at deferred tool calls, decide them as approvals and run it on."""
        next_prompt: str | None = prompt
        history: list[ModelMessage] | None = None
        deferred = None
        while True:
            result: AgentRunResult[Any] = await agent.run(
                next_prompt,
                message_history=history,
                deferred_tool_results=deferred,
                output_type=[agent.output_type, DeferredToolRequests],
                usage_limits=self._limits,
                event_stream_handler=self._handler,
            )
            if not isinstance(result.output, DeferredToolRequests):
                return {
                    "output": to_jsonable_python(result.output, serialize_unknown=True, bytes_mode="base64"),
                    "messages": ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json"),
                }
            deferred = await decide_deferred(run, result.output)
            history, next_prompt = result.all_messages(), None

    def result_of(self, state: Any) -> DurableRunResult:
        """The ``DurableRunResult`` of a durably ``AgentState`` of this agent (as ``Runtime.run`` returns it)."""
        stored = getattr(state, "result", None)
        status = str(getattr(state, "status", ""))
        if not isinstance(stored, dict) or "output" not in stored:
            return DurableRunResult(
                agent_id=str(getattr(state, "agent_id", "")), status=status, output=None, state=state
            )
        output = stored["output"]
        if self._output is not None:
            output = self._output.validate_python(output)
        messages = ModelMessagesTypeAdapter.validate_python(stored.get("messages") or [])
        return DurableRunResult(
            agent_id=str(getattr(state, "agent_id", "")), status=status, output=output, messages=messages, state=state
        )

    async def run_in(self, runtime: durably.Runtime, prompt: str, *, agent_id: str) -> DurableRunResult:
        """Run (or resume) the agent with id ``agent_id`` in ``runtime`` until it finishes or parks.

        Calling it again with the same id after a crash picks the run up where
        its journal ends; a run parked at an approval goes on once it is decided.

        Args:
            runtime: An open ``durably.Runtime``.
            prompt: The user prompt (the run's task).
            agent_id: The run's id in the runtime's namespace.

        Returns:
            Where the run stands, with the output once finished.

        Raises:
            ArgumentTypeError: ``prompt`` is not a str.
            DurablyError: As ``Runtime.run`` raises.
        """
        if not isinstance(prompt, str):
            raise ArgumentTypeError(f"prompt must be a str, got {type(prompt).__name__}")
        state = await runtime.run(self, agent_id, prompt)
        return self.result_of(state)
