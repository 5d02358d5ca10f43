"""An agent graph made durable: copies of the agents whose model requests, function
tools and guardrails go through one run's journal.

The user's agents are never changed: each agent reachable by handoffs is
cloned once (a handoff cycle stays a cycle of clones), with its ``Model``
instance journaled, each ``FunctionTool``'s invocation journaled under the
model's call id, and each guardrail's check journaled (a guardrail that asks a
model pays for it once). Hosted tools run at the provider, inside the model
request, so they are journaled with it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from agents import Agent, Handoff, RunConfig
from agents.guardrail import GuardrailFunctionOutput, InputGuardrail, OutputGuardrail
from agents.models.interface import Model
from agents.tool import FunctionTool, Tool
from agents.tool_context import ToolContext as SDKToolContext

from ._calls import RunCalls
from ._model import JournaledModel
from ._values import dump_guardrail, load_guardrail


class DurableGraph:
    """Clones the agents of one run (memoized by identity) with their calls journaled in ``calls``."""

    def __init__(self, calls: RunCalls) -> None:
        self.calls = calls
        self._clones: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """The journaled clone of ``agent`` (the same clone for the same agent)."""
        found = self._clones.get(id(agent))
        if found is not None:
            return found
        clone = agent.clone(
            tools=[self._tool(tool) for tool in agent.tools],
            handoffs=[],
            input_guardrails=[self._input_guardrail(g) for g in agent.input_guardrails],
            output_guardrails=[self._output_guardrail(g) for g in agent.output_guardrails],
        )
        if isinstance(agent.model, Model):  # a Model instance bypasses the run's provider
            clone.model = JournaledModel(agent.model, self.calls)
        self._clones[id(agent)] = clone
        self._clones[id(clone)] = clone  # a handoff back to the clone itself
        clone.handoffs = [self._handoff(h) for h in agent.handoffs]
        return clone

    def run_config(self, config: RunConfig) -> RunConfig:
        """``config`` with its run-wide model and guardrails journaled (the provider is the caller's to wrap)."""
        changes: dict[str, Any] = {}
        if isinstance(config.model, Model):
            changes["model"] = JournaledModel(config.model, self.calls)
        if config.input_guardrails:
            changes["input_guardrails"] = [self._input_guardrail(g) for g in config.input_guardrails]
        if config.output_guardrails:
            changes["output_guardrails"] = [self._output_guardrail(g) for g in config.output_guardrails]
        return dataclasses.replace(config, **changes)

    def _tool(self, tool: Tool) -> Tool:
        if not isinstance(tool, FunctionTool):
            return tool
        original = tool.on_invoke_tool
        calls = self.calls

        async def on_invoke_tool(ctx: SDKToolContext[Any], arguments: str) -> Any:
            return await calls.tool(tool.name, ctx.tool_call_id, lambda: original(ctx, arguments), arguments)

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def _handoff(self, handoff: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(handoff, Agent):
            return self.agent(handoff)
        original = handoff.on_invoke_handoff

        async def on_invoke_handoff(*args: Any, **kwargs: Any) -> Agent[Any]:
            return self.agent(await original(*args, **kwargs))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def _input_guardrail(self, guardrail: InputGuardrail[Any]) -> InputGuardrail[Any]:
        name, check = guardrail.get_name(), guardrail.guardrail_function
        calls = self.calls

        async def journaled(context: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
            return await _checked(calls, calls.guardrail_key("input", name), name, check, context, agent, input)

        return dataclasses.replace(guardrail, guardrail_function=journaled, name=name)

    def _output_guardrail(self, guardrail: OutputGuardrail[Any]) -> OutputGuardrail[Any]:
        name, check = guardrail.get_name(), guardrail.guardrail_function
        calls = self.calls

        async def journaled(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
            return await _checked(calls, calls.guardrail_key("output", name), name, check, context, agent, output)

        return dataclasses.replace(guardrail, guardrail_function=journaled, name=name)


async def _checked(calls: RunCalls, key: str, name: str, check: Any, *args: Any) -> GuardrailFunctionOutput:
    """One guardrail check, journaled: a check cut off by a crash is run again (it changes nothing)."""

    async def run_check() -> GuardrailFunctionOutput:
        output = check(*args)
        verdict: GuardrailFunctionOutput = await output if inspect.isawaitable(output) else output
        return verdict

    verdict: GuardrailFunctionOutput = await calls.run.call(
        run_check,
        name=f"guardrail {name}",
        call_id=key,
        on_unknown_outcome="retry",
        dump=dump_guardrail,
        load=load_guardrail,
    )
    return verdict
