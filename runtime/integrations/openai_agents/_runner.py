"""``DurableRunner``: ``Runner.run`` as a durably function-agent run.

The run's body is the SDK's own loop (``Runner.run``) over a journaled copy of
the agent graph (``_graph.py``) and a journaled model provider (``_model.py``),
so on resume, in this process or any other, the SDK runs again from the start
and every model answer and tool result already stored comes back from the
journal: nothing is asked or run twice that was stored once. A tool that needs
approval (``needs_approval``) interrupts the SDK's run; each interruption
becomes a durably approval (``Runtime.approve``, ``durably approve``, the
console), the agent parks until it is decided, and the SDK's run then goes on
from its ``RunState`` with ``approve`` or ``reject``, as the SDK documents.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from agents import Agent, RunConfig, Runner
from agents.items import ToolApprovalItem
from agents.models.multi_provider import MultiProvider
from agents.run_config import DEFAULT_MAX_TURNS

from durably._functions.definition import FunctionAgent
from durably._functions.run import Run
from durably._loop.agent import Budget
from durably._loop.state import FAILED, FINISHED, AgentState
from durably._tools.tool import OnUnknownOutcome, Reconciler
from durably.errors import AgentRunFailedError, ArgumentTypeError, InvalidArgumentError

from ._calls import RunCalls
from ._graph import DurableGraph
from ._model import JournaledProvider
from ._values import plain


@dataclass(frozen=True)
class DurableRunResult:
    """Where a durable run stands after ``DurableRunner.run`` / ``wait``.

    Attributes:
        agent_id: The run's agent id.
        status: ``finished``, or ``waiting_approval`` (a tool waits for a decision:
            see ``approvals``), ``suspended`` (a budget), ``cancelled``.
        final_output: The last agent's final output (rebuilt as its
            ``output_type`` when that is not ``str``); None until finished.
        last_agent: The name of the agent that produced it; None until finished.
        approvals: The open approvals: approval id -> request (``tool``, ``arguments``, ...).
        state: The durably ``AgentState`` behind it.
    """

    agent_id: str
    status: str
    final_output: Any
    last_agent: str | None
    approvals: dict[str, dict[str, Any]]
    state: AgentState


class _Body:
    """The function agent's body for one starting agent: the SDK's loop, journaled."""

    def __init__(self, runner: DurableRunner, agent: Agent[Any]) -> None:
        self.runner, self.agent = runner, agent

    async def __call__(self, run: Run, task: str) -> dict[str, Any]:
        request = json.loads(task)
        runner = self.runner
        calls = RunCalls(run, runner.default_policy, runner.policies, runner.reconcilers)
        graph = DurableGraph(calls)
        config = graph.run_config(runner.run_config)
        config = dataclasses.replace(config, model_provider=JournaledProvider(config.model_provider, calls))
        start = graph.agent(self.agent)
        options = {"run_config": config, "max_turns": request["max_turns"], "context": request["context"]}
        result = await Runner.run(start, request["input"], **options)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                await _decide(run, calls, state, item)
            result = await Runner.run(start, state, **options)
        return {"final_output": plain(result.final_output), "last_agent": result.last_agent.name}


async def _decide(run: Run, calls: RunCalls, state: Any, item: ToolApprovalItem) -> None:
    """Ask durably's approvals about one interrupted tool call, then tell the SDK's ``RunState``."""
    call_id = item.call_id or ""
    decision = await run.approval(
        f"run tool {item.name}?",
        data={"tool": item.name, "arguments": item.arguments, "agent": item.agent.name, "call_id": call_id},
        approval_id=f"approve:{calls.tool_key(call_id)}",
    )
    if decision.get("approved"):
        state.approve(item)
    else:
        state.reject(item, rejection_message=decision.get("note") or None)


class DurableRunner:
    """A drop-in for ``Runner.run`` whose runs are durable: ``await DurableRunner(rt).run(agent, input, agent_id=...)``.

    Every model request and function-tool call of the run (handoffs and
    guardrails included) is journaled in the agent ``agent_id`` of ``rt``'s
    namespace; calling ``run`` again with that id, here or in another process,
    or a worker serving the definition (``durably worker --agents
    module:attr`` with ``runner.definition(agent)`` in that list), resumes it.

    Args:
        runtime: The ``durably.Runtime`` (None: only ``definition`` is used, by a worker's module).
        run_config: The SDK's ``RunConfig`` for every run (its model provider
            gets journaled; default: the SDK's own ``MultiProvider``).
        on_unknown_outcome: What a resumed run does with a tool call that was
            running when its process died: one policy for every tool (``ask``, the
            default: an approval; ``reconcile``; ``retry``: run again with the same
            idempotency key; ``fail``), or a mapping of tool name -> policy
            (other tools: ``ask``).
        reconcile: Tool name -> ``async def reconcile(ctx) -> Reconciled | None``
            for the ``reconcile`` policy (``ctx.idempotency_key`` is the one the
            tool saw through ``current_call()``).
        version: The definitions' version (a resume under another one follows
            durably's ``on_definition_change``).
        budget: The definitions' default ``Budget`` (tokens count against it).

    Raises:
        ArgumentTypeError: ``run_config`` not a ``RunConfig``, a mapping that is not one.
        InvalidArgumentError: An unknown policy, or ``reconcile`` named for a tool
            whose policy is not ``reconcile`` or the other way round.
    """

    def __init__(
        self,
        runtime: Any = None,
        *,
        run_config: RunConfig | None = None,
        on_unknown_outcome: str | Mapping[str, str] = "ask",
        reconcile: Mapping[str, Reconciler] | None = None,
        version: str = "1",
        budget: Budget | None = None,
    ) -> None:
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise ArgumentTypeError(f"DurableRunner: run_config must be a RunConfig, got {type(run_config).__name__}")
        self.runtime = runtime
        self.run_config = run_config or RunConfig(model_provider=MultiProvider())
        self.default_policy, self.policies = _policies(on_unknown_outcome)
        self.reconcilers = dict(reconcile or {})
        for name in self.reconcilers:
            if self.policies.get(name, self.default_policy) is not OnUnknownOutcome.RECONCILE:
                raise InvalidArgumentError(
                    f"DurableRunner: a reconcile hook for {name!r}, whose policy is not reconcile"
                )
        for name, policy in self.policies.items():
            if policy is OnUnknownOutcome.RECONCILE and name not in self.reconcilers:
                raise InvalidArgumentError(f"DurableRunner: tool {name!r} has the reconcile policy and no hook")
        self.version, self.budget = version, budget
        self._definitions: dict[int, FunctionAgent] = {}

    def definition(self, agent: Agent[Any], *, name: str | None = None) -> FunctionAgent:
        """The durably definition of runs starting at ``agent`` (the same object for the same agent).

        Register it with a worker (``durably worker --agents module:attr``) to
        serve these runs; ``run`` registers it with this runner's runtime.

        Args:
            agent: The starting agent.
            name: The definition's name (default: the agent's name).

        Returns:
            The ``FunctionAgent`` whose body runs the SDK's loop from ``agent``, journaled.

        Raises:
            ArgumentTypeError: ``agent`` is not an ``agents.Agent``.
        """
        if not isinstance(agent, Agent):
            raise ArgumentTypeError(f"DurableRunner: expected an agents.Agent, got {type(agent).__name__}")
        found = self._definitions.get(id(agent))
        if found is None:
            found = self._definitions[id(agent)] = FunctionAgent(
                name or agent.name, _Body(self, agent), version=self.version, budget=self.budget
            )
        return found

    async def run(
        self,
        starting_agent: Agent[Any],
        input: str | list[Any],
        *,
        agent_id: str,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> DurableRunResult:
        """Run ``starting_agent`` on ``input`` as the durable agent ``agent_id``, or resume that run.

        Returns when the run finishes or parks (an approval, a budget); a run
        already in the journal goes on from where it stopped (its stored
        input, not this call's).

        Args:
            starting_agent: The agent to start with (as ``Runner.run``).
            input: A str or a list of input items (plain data).
            agent_id: The durable run's id.
            context: The run context, which must be plain data (it is journaled
                with the task so that a resume elsewhere has it).
            max_turns: As ``Runner.run``.

        Returns:
            A ``DurableRunResult``.

        Raises:
            AgentRunFailedError: The run ended ``failed`` (the SDK raised: the
                reason names the exception).
            UnencodableValueError: ``input`` or ``context`` is not plain data.
            RuntimeNotStartedError: No runtime, or one not started.
        """
        runtime, definition, task = self._command(starting_agent, input, context, max_turns)
        state = await runtime.run(definition, agent_id, task)
        return self._result(starting_agent, state)

    async def submit(
        self,
        starting_agent: Agent[Any],
        input: str | list[Any],
        *,
        agent_id: str,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> Any:
        """Queue the run for the workers serving ``definition(starting_agent)`` (``durably worker``).

        Nothing runs here.

        Args:
            starting_agent: The agent to start with.
            input: A str or a list of input items (plain data).
            agent_id: The durable run's id.
            context: The run context (plain data).
            max_turns: As ``Runner.run``.

        Returns:
            The runtime's ``CommandResult`` (its ``placement`` says where the run will go).

        Raises:
            UnencodableValueError: ``input`` or ``context`` is not plain data.
            AgentExistsError: ``agent_id`` already has a run.
        """
        runtime, definition, task = self._command(starting_agent, input, context, max_turns)
        return await runtime.submit(definition, agent_id, task)

    async def wait(
        self, starting_agent: Agent[Any], agent_id: str, *, timeout: float | None = None
    ) -> DurableRunResult:
        """Wait for the run ``agent_id`` to finish or park, across processes.

        Args:
            starting_agent: The agent the run started with (to rebuild its output type).
            agent_id: The durable run's id.
            timeout: Seconds to wait at most (None: no limit).

        Returns:
            A ``DurableRunResult``.

        Raises:
            AgentRunFailedError: The run ended ``failed``.
            WaitTimeoutError: ``timeout`` seconds passed first.
        """
        until = ("finished", "failed", "cancelled", "waiting_approval", "suspended")
        state = await self._runtime().wait(agent_id, until, timeout=timeout)
        return self._result(starting_agent, state)

    def _command(
        self, starting_agent: Agent[Any], input: str | list[Any], context: Any, max_turns: int
    ) -> tuple[Any, FunctionAgent, str]:
        """What ``run`` and ``submit`` hand the runtime: the runtime, the definition of
        ``starting_agent`` and the task (JSON of ``input``, ``context``, ``max_turns``).
        Raises as they do: ``UnencodableValueError``, ``InvalidArgumentError`` (``max_turns``),
        ``RuntimeNotStartedError``, ``ArgumentTypeError`` (``starting_agent``)."""
        task = _task(input, context, max_turns)
        return self._runtime(), self.definition(starting_agent), task

    def _runtime(self) -> Any:
        if self.runtime is None:
            from durably.errors import RuntimeNotStartedError

            raise RuntimeNotStartedError("DurableRunner: no runtime given (DurableRunner(rt))")
        return self.runtime

    def _result(self, agent: Agent[Any], state: AgentState) -> DurableRunResult:
        if state.status == FAILED:
            raise AgentRunFailedError(state.agent_id, state.reason)
        output, last = None, None
        if state.status == FINISHED and isinstance(state.result, dict):
            last = state.result.get("last_agent")
            output = _output(_find(agent, last) or agent, state.result.get("final_output"))
        open_ = {k: v for k, v in state.approvals.items() if v.get("decision") is None}
        return DurableRunResult(state.agent_id, state.status, output, last, open_, state)


def _policies(value: str | Mapping[str, str]) -> tuple[OnUnknownOutcome, dict[str, OnUnknownOutcome]]:
    def checked(policy: object, where: str) -> OnUnknownOutcome:
        try:
            return OnUnknownOutcome(str(policy))
        except ValueError:
            valid = ", ".join(p.value for p in OnUnknownOutcome)
            raise InvalidArgumentError(f"DurableRunner: {where}={policy!r} is not a policy ({valid})") from None

    if isinstance(value, str):
        return checked(value, "on_unknown_outcome"), {}
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"DurableRunner: on_unknown_outcome must be a policy or a mapping, got {type(value).__name__}"
        )
    return OnUnknownOutcome.ASK, {str(k): checked(v, f"on_unknown_outcome[{k!r}]") for k, v in value.items()}


def _task(input: Any, context: Any, max_turns: int) -> str:
    from durably.storage._codec import check_encodable

    check_encodable(input, "input")
    check_encodable(context, "context")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise InvalidArgumentError(f"DurableRunner: max_turns must be an int >= 1, got {max_turns!r}")
    try:
        return json.dumps({"input": input, "context": context, "max_turns": max_turns})
    except (TypeError, ValueError) as exc:
        from durably.errors import UnencodableValueError

        raise UnencodableValueError("input", f"must be JSON data: {exc}") from exc


def _find(agent: Agent[Any], name: str | None) -> Agent[Any] | None:
    """The agent named ``name`` among those reachable from ``agent`` by handoffs."""
    seen: set[int] = set()
    todo: list[Any] = [agent]
    while todo:
        current = todo.pop()
        if not isinstance(current, Agent) or id(current) in seen:
            continue
        seen.add(id(current))
        if current.name == name:
            return current
        todo.extend(current.handoffs)
    return None


def _output(agent: Agent[Any], stored: Any) -> Any:
    kind = agent.output_type
    if stored is None or kind is None or kind is str:
        return stored
    try:
        return pydantic.TypeAdapter(kind).validate_python(stored)  # type: ignore[arg-type]
    except (pydantic.ValidationError, TypeError, pydantic.PydanticSchemaGenerationError):
        return stored
