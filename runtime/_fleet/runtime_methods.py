"""The fleet side of ``Runtime``: resume_all, serve, drain and lease_holder.

A runtime is one worker among others on the same store: these methods take up
every runnable agent (once, or forever while serving), hand its agents back
on a deploy, and say which worker holds an agent's lease. Each is a thin call
into the module that holds its logic (``scan``, ``serving``, ``leases``). They
are separate from ``runtime`` (one idea per module): ``Runtime`` inherits this
mixin, as it does ``Inspection``, and provides ``stream()``, its lease keeper
and ``_require_started()``. ``scan`` and ``serving`` are imported when first
called: a runtime that only runs agents never loads them (import time).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from durably._figures import check_figure
from durably.errors import InvalidArgumentError

if TYPE_CHECKING:
    from durably._fleet.handle import AgentHandle
    from durably._fleet.leases import LeaseKeeper
    from durably._fleet.owner import LeaseHolder
    from durably._host import RuntimeHost
    from durably.storage._spi import StreamId


class Fleet:
    """Methods of ``Runtime`` for a worker among others on one store (see the module docstring)."""

    if TYPE_CHECKING:  # the host's (Runtime), declared for the type checker
        _leases: LeaseKeeper

        def stream(self, agent_id: str) -> StreamId: ...

        def _require_started(self) -> None: ...

    async def lease_holder(self, agent_id: str) -> LeaseHolder | None:
        """Who holds an agent's lease now.

        Args:
            agent_id: The agent in this runtime's namespace.

        Returns:
            A ``LeaseHolder``: owner, worker id, host and pid, expiry (unix
                seconds) and liveness (``alive``; ``dead``: taken at once by the next
                resume here or in ``serve``; ``remote``: only the expiry tells). None
                when nobody holds it or the store has no leases.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """
        return await self._leases.holder_info(self.stream(agent_id))

    async def resume_all(self) -> list[AgentHandle]:
        """Resume every runnable agent of the namespace whose definition is registered.

        An agent whose journal cannot be read (corrupt, foreign bytes, written by
        a newer durably, or any other error restoring it) is logged and skipped,
        never resumed: one bad stream must not stop every other agent of the
        namespace. On a store with a status index only the agents it lists as
        runnable are read.

        Returns:
            The handles of the agents resumed here.

        Raises:
            StoreUnavailableError: The store is out (an outage is not skipped).
            RuntimeNotStartedError: The runtime was left while the scan ran (from another
                task); the agents not yet resumed stay as their journals say.
        """
        from durably._fleet.scan import scan

        return (await scan(cast("RuntimeHost", self))).handles  # self is the mixin's host

    async def serve(
        self,
        poll_interval: float = 1.0,
        *,
        drain_signals: Iterable[int] = (signal.SIGTERM,),
        drain_timeout: float = 30.0,
        max_agents: int | None = None,
    ) -> None:
        """Resume runnable agents forever, polling the store every ``poll_interval`` seconds.

        This is how an agent parked in one process runs on after another process
        approved it or extended its budget, and how a dead worker's agents are
        taken over (at once when it was a process of this host). A store outage
        (``StoreUnavailableError``) does not end it: scans back off up to 30 s,
        are logged, traced (``durably.serve.outage``) and counted, and serving
        carries on when the store is back. On a drain signal it drains and
        returns: a deploy's SIGTERM lets the steps in flight finish and hands the
        agents to the other workers at once. Cancel the calling scope to stop
        without draining.

        Args:
            poll_interval: Seconds between scans of the store.
            drain_signals: Signal numbers that make it drain and return (handled
                in the main thread only; ``()`` for none).
            drain_timeout: Seconds ``drain`` waits for the steps in flight.
            max_agents: Most live agents in this worker (None: no cap); scans
                also take no more than an even split of what they saw among the
                workers.

        Raises:
            InvalidArgumentError: ``max_agents`` is not an int of at least 1, or
                ``poll_interval`` or ``drain_timeout`` not a finite number of
                seconds > 0 (a ``ValueError``), before anything is resumed.
            RuntimeNotStartedError: The runtime was not entered.
        """
        self._require_started()
        check_figure("serve", "poll_interval", poll_interval, optional=False)
        check_figure("serve", "drain_timeout", drain_timeout, optional=False)
        check_figure("serve", "max_agents", max_agents, integer=True)
        if poll_interval == 0 or max_agents == 0:
            raise InvalidArgumentError("serve: poll_interval must be > 0 seconds and max_agents at least 1")
        from durably._fleet import serving

        await serving.serve(
            cast("RuntimeHost", self),
            poll_interval,
            drain_signals=drain_signals,
            drain_timeout=drain_timeout,
            max_agents=max_agents,
        )

    async def drain(self, timeout: float = 30.0) -> None:
        """Stop every live agent here after its current step, release its lease, resume nothing more.

        Handles of drained activations return their state, whose status is
        still ``running``: the agent goes on wherever it is resumed.

        Args:
            timeout: Seconds to wait for the steps in flight before cancelling
                them (their intents then follow the tools' unknown-outcome
                policies where they resume).

        Raises:
            RuntimeNotStartedError: The runtime was not entered.
        """
        self._require_started()
        from durably._fleet import serving

        await serving.drain(cast("RuntimeHost", self), timeout)
