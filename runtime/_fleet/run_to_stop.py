"""``Runtime.run``: start an agent, or attach to it, and follow it until it stops or parks, through its child agents.

An agent that exists already is resumed, or followed where another runtime
runs it (``durably._fleet.attach``). An agent waiting for its child agents
(``agent_tool``) has not stopped: it is waited for, run here once its children
woke it (unless another runtime took it first, which it then follows), until it
stops or parks otherwise. ``RunToStop`` is composed by the runtime, which it
reaches through the ``Host`` methods only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from durably._fleet.attach import OnRunning, check_on_running, resume_or_attach
from durably._loop.agent import AgentDefinition, Budget
from durably._loop.state import RUNNING, WAITING_CHILD, AgentState
from durably.errors import AgentExistsError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from durably._fleet.activations import Activations
    from durably._fleet.handle import AgentHandle


class Host(Protocol):
    """What ``RunToStop`` needs of the runtime: its public start, resume, status and wait."""

    namespace: str

    async def start(
        self, agent: str | AgentDefinition, agent_id: str, task: str, *, budget: Budget | None = None
    ) -> AgentHandle: ...

    async def resume(self, agent_id: str, *, force: bool = False) -> AgentHandle | None: ...

    async def status(self, agent_id: str) -> AgentState: ...

    async def wait(
        self,
        agent_id: str,
        until: Iterable[str] | str | None = None,
        *,
        timeout: float | None = None,
        poll_interval: float = 0.2,
    ) -> AgentState: ...


class RunToStop:
    """``Runtime.run`` for ``host``, whose live agents are ``activations``."""

    def __init__(self, host: Host, activations: Activations) -> None:
        self._host = host
        self._activations = activations

    async def run(
        self, agent: str | AgentDefinition, agent_id: str, task: str, budget: Budget | None, on_running: OnRunning
    ) -> AgentState:
        """The state ``agent_id`` stops or parks with; see ``Runtime.run`` for the arguments and errors."""
        host = self._host
        check_on_running(on_running)
        handle: AgentHandle | None
        try:
            handle = await host.start(agent, agent_id, task, budget=budget)
        except AgentExistsError:
            name = agent.name if isinstance(agent, AgentDefinition) else agent
            existing = await host.status(agent_id)
            if (recorded := existing.definition.get("name")) != name:
                raise AgentExistsError(
                    f"agent {agent_id!r} exists in namespace {host.namespace!r} under definition "
                    f"{recorded!r}, not {name!r}"
                ) from None
            if existing.task != task:
                raise AgentExistsError(
                    f"agent {agent_id!r} exists in namespace {host.namespace!r} with another task "
                    f"({existing.task[:60]!r}, not {task[:60]!r})"
                ) from None
            if on_running == "wait":
                attached = await resume_or_attach(
                    agent_id,
                    host.resume,
                    lambda agent_id, until, timeout: host.wait(agent_id, until, timeout=timeout),
                    host.status,
                )
                return await self._through_children(attached)
            handle = await host.resume(agent_id)
            if handle is None:
                return await self._through_children(await host.status(agent_id))
        return await self._through_children(await handle.wait())

    async def _through_children(self, state: AgentState) -> AgentState:
        """``state``, or, while it waits for its child agents, the state it next stops or parks with:
        woken by its children, it runs here unless another runtime took it first."""
        host = self._host
        agent_id = state.agent_id
        while state.status == WAITING_CHILD:
            from durably._reading.watch import STATUSES  # only a parent of child agents needs it (import time)

            if (children := self._activations.children) is not None:
                for child in state.children.values():
                    if child["status"] == RUNNING:
                        children.run(child["agent_id"])  # a child a dead process ran goes on here, if it can
            state = await host.wait(agent_id, until=STATUSES - {WAITING_CHILD})
            if state.status != RUNNING:
                continue
            # Its lease may be held by a runtime that runs it or by one that only looks at it (a
            # scan of a worker without its definition): follow the holder and ask again, as attach does.
            state = await resume_or_attach(
                agent_id,
                host.resume,
                lambda agent_id, until, timeout: host.wait(agent_id, until | {WAITING_CHILD}, timeout=timeout),
                host.status,
            )
        return state
