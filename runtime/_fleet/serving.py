"""``Runtime.serve``: resume runnable agents forever, ride out store outages, drain on SIGTERM.

Three promises a serving worker makes:

* **It outlives an outage.** A scan that meets a store failure
  (``StoreUnavailableError``: a SQLite lock held past the busy timeout, S3
  answering 503 past its retry deadline, a PostgreSQL restart; or any other
  ``StoreError`` but ``StoreClosedError``, e.g. a table an operator is
  restoring) is retried with capped exponential backoff and jitter (tenacity,
  as in the AWS Architecture Blog's "Exponential Backoff And Jitter"); each failed scan is logged, recorded as a
  ``durably.serve.outage`` span and counted in the ``durably.serve.outages``
  metric; the first good scan logs the recovery and serving goes on.
* **A deploy is a graceful drain.** On SIGTERM (the signal every process
  supervisor sends first) the worker stops scanning, lets every live agent
  finish the step it is in (the model call or tool running now, journaled as
  usual), releases its leases and returns, so another worker's next scan takes
  the agents at once. Steps still running after ``drain_timeout`` seconds are
  cancelled: their intents without results follow each tool's unknown-outcome
  policy where they resume, as after a crash.
* **A command wakes it.** On a store with change notifications (``CAP_CHANGES``:
  PostgreSQL's LISTEN/NOTIFY) an agent another process approves, extends,
  messages or cancels is resumed as soon as the notification arrives, not at
  the next scan; the scans go on as the fallback (``durably._fleet.wakeups``).
  A burst of such commands is resumed several agents at once, as a scan does.
* **Fair shares.** Scans visit the agents in a random order and take no more
  than ``FairShare`` allows (``max_agents``, an even split among the live
  workers serving the same definitions: see ``durably._fleet.scan``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

import anyio

from durably._children import delivery as child_delivery
from durably._figures import check_figure
from durably._fleet import wakeups
from durably._fleet.fleet_metrics import ScanObserver
from durably._fleet.scan import FairShare, scan
from durably._fleet.sole_worker import ensure_sole_worker
from durably.errors import InvalidArgumentError
from durably.storage._errors import StoreClosedError, StoreError

if TYPE_CHECKING:
    from tenacity import RetryCallState
    from tenacity.wait import wait_base

    from durably._fleet.activations import Activations
    from durably._fleet.workers import WorkerBeat

log = logging.getLogger("durably.serve")

#: The longest pause between two scans during an outage, seconds.
MAX_BACKOFF = 30.0


async def serve(
    activations: Activations,
    poll_interval: float,
    *,
    drain_signals: Iterable[int],
    drain_timeout: float,
    max_agents: int | None = None,
) -> None:
    """``Runtime.serve``: scan every ``poll_interval`` seconds until one of ``drain_signals`` arrives, then drain.

    On a store without leases (``CAP_LEASES``) it logs a WARNING at start: such a
    store has one worker or none; it raises ``WorkerExistsError`` when another
    live worker serves the namespace (seen by its heartbeat: ``durably._fleet.sole_worker``). Signals are only handled in the main thread (where Python delivers them);
    elsewhere, cancel the caller's scope to stop and call ``Runtime.drain``.
    Raises ``InvalidArgumentError`` for a bad figure, before anything is resumed.
    """
    check_figure("serve", "poll_interval", poll_interval, optional=False)
    check_figure("serve", "drain_timeout", drain_timeout, optional=False)
    check_figure("serve", "max_agents", max_agents, integer=True)
    if poll_interval == 0 or max_agents == 0:
        raise InvalidArgumentError("serve: poll_interval must be > 0 seconds and max_agents at least 1")
    if not activations.leases.enabled:
        # Nothing in such a store keeps two workers from running one agent at once.
        log.warning(
            "serve(): this store has no leases (%s): this must be the only worker serving it; "
            "a second one would run the same agents (and their tools) twice",
            type(activations.store).__name__,
        )
    signals = tuple(drain_signals)
    fair = FairShare(max_agents)
    heartbeats = activations.leases.heartbeats
    if heartbeats is not None and not activations.leases.enabled:
        await ensure_sole_worker(activations, heartbeats)  # or WorkerExistsError, before anything is resumed
    elif heartbeats is not None:
        heartbeats.start(activations)  # others see this worker, and see it stop
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        if signals and threading.current_thread() is threading.main_thread():
            tg.start_soon(_stop_on_signal, signals, stop)
        tg.start_soon(_scan_forever, activations, poll_interval, stop, fair)
        await stop.wait()
        tg.cancel_scope.cancel()
    await drain(activations, drain_timeout)


async def _stop_on_signal(signals: tuple[int, ...], stop: anyio.Event) -> None:
    # anyio annotates ``signal.Signals`` but takes any signal number (it hands it to the event
    # loop as is); converting here would refuse the real-time signals that Signals does not name.
    with anyio.open_signal_receiver(*cast(tuple[signal.Signals, ...], signals)) as received:
        async for signum in received:
            log.warning(
                "%s received: draining (finishing the steps in flight, then releasing leases)",
                signal.Signals(signum).name,
            )
            stop.set()
            return


async def _scan_forever(activations: Activations, poll_interval: float, stop: anyio.Event, fair: FairShare) -> None:
    from tenacity import AsyncRetrying, retry_if_exception, stop_never  # only serve() needs it (import time)

    outage = _Outage(activations)
    retrying = AsyncRetrying(
        retry=retry_if_exception(_store_failure),
        stop=stop_never,
        reraise=True,
        wait=_backoff(poll_interval),
        before_sleep=outage.report,
        sleep=anyio.sleep,
    )
    # Between scans, the agents another process changes (a command to a parked agent) are
    # resumed as soon as the store notifies us, where it can (``durably._fleet.wakeups``),
    # within this worker's fair share.

    # Woken agents are resumed several at once; those still being resumed count against
    # the share, so a burst never takes more than ``max_agents``.
    resuming = 0

    async def woken(agent_id: str) -> object:
        nonlocal resuming
        limit = fair.limit(len(activations.live) + resuming)
        if limit is not None and limit < 1:
            return None  # our share is full: the agent waits for a worker with room
        resuming += 1
        try:
            return await wakeups.resume_if_runnable(activations, agent_id)
        finally:
            resuming -= 1

    observer = ScanObserver(activations.store, activations.namespace, activations.telemetry, activations.live)
    view = PeerView(activations)
    async with wakeups.subscribe(activations.store, activations.namespace) as changes:
        while not stop.is_set():
            async for attempt in retrying:
                with attempt:
                    peers = await view.peers()
                    fair.peers((beat.owner for beat in peers), (a for beat in peers for a in beat.agent_ids))
                    live = len(activations.live)
                    # The share is set once the scan has listed what waits; at max_agents nothing is listed.
                    full = 0 if fair.limit(live) == 0 else None
                    fair.observed(await scan(activations, limit=full, shuffle=True, share=fair.share(live)))
                    await child_delivery.recover(activations)  # child ends a dead process did not deliver
            outage.ended()
            await observer.scanned()
            # Until the next poll or the earliest timer (_fleet/timers.py), woken agents are resumed.
            await wakeups.wait_and_resume(
                changes, poll_interval, woken, until=lambda: activations.wake.wait(poll_interval)
            )


#: Seconds a worker reuses what it saw of the other workers while it saw some. Each look
#: reads every worker's heartbeat (on S3 a listing and a GET each), so K workers looking at
#: every poll would read K x K heartbeats a second; the workers serving a namespace change
#: far more slowly than that, and a stale view only moves a worker's share by an agent.
PEERS_TTL = 5.0


class PeerView:
    """The other live workers as a serving loop sees them: read again at most every
    ``PEERS_TTL`` seconds, and at every scan while none is seen (so workers started
    together find each other at once)."""

    def __init__(self, activations: Activations, clock: Callable[[], float] = time.monotonic) -> None:
        self._activations, self._clock = activations, clock
        self._beats: list[WorkerBeat] = []
        self._read_at = -PEERS_TTL

    async def peers(self) -> list[WorkerBeat]:
        """The peers' latest heartbeats (see ``_peers``). Raises as ``_peers``."""
        now = self._clock()
        if not self._beats or now - self._read_at >= PEERS_TTL:
            self._beats, self._read_at = await _peers(self._activations), now
        return self._beats


async def _peers(activations: Activations) -> list[WorkerBeat]:
    """The heartbeats of the other live workers serving the namespace with one of this runtime's
    definitions: one listing of the heartbeat streams per scan, whatever the number of agents
    (none without heartbeats). Raises ``StoreError`` subclasses as the store does."""
    heartbeats = activations.leases.heartbeats
    if heartbeats is None:
        return []
    mine = str(heartbeats.identity)
    ours = set(activations.definitions)
    return [
        beat
        for beat in await heartbeats.live_workers(activations.namespace)
        if beat.owner != mine and ours.intersection(beat.definitions)
    ]


def _store_failure(exc: BaseException) -> bool:
    """Whether a scan's failure is the store's, to back off and ride out: any ``StoreError`` but
    ``StoreClosedError`` (this runtime is being left: serving ends with it)."""
    return isinstance(exc, StoreError) and not isinstance(exc, StoreClosedError)


def _backoff(poll_interval: float) -> wait_base:
    """Exponential from one poll interval, capped at ``MAX_BACKOFF``, plus up to one interval of jitter."""
    from tenacity import wait_exponential, wait_random

    step = max(poll_interval, 0.05)
    return wait_exponential(multiplier=step, max=MAX_BACKOFF) + wait_random(0, step)


class _Outage:
    """Reports an outage once per failed scan and its end once."""

    def __init__(self, activations: Activations) -> None:
        self._activations = activations
        self._since: float | None = None

    def report(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if self._since is None:
            self._since = time.monotonic()
        pause = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "serve(): store unavailable (scan %d failed: %s: %s); next scan in %.1f s",
            state.attempt_number,
            type(exc).__name__,
            exc,
            pause,
        )
        telemetry = self._activations.telemetry
        if telemetry.metrics is not None:
            telemetry.metrics.serve_outages.add(1, telemetry.attributes)
        with self._activations.telemetry.span("durably.serve.outage") as span:
            if span is not None:
                span.set_attributes(
                    {
                        "durably.serve.attempt": state.attempt_number,
                        "durably.serve.backoff_s": pause,
                        "error.type": type(exc).__qualname__,
                    }
                )

    def ended(self) -> None:
        if self._since is not None:
            log.warning("serve(): store available again after %.1f s; serving on", time.monotonic() - self._since)
            self._since = None


async def drain(activations: Activations, timeout: float) -> None:
    """Stop the live agents after their current step and release their leases.

    Waits up to ``timeout`` seconds for the steps in flight, then cancels what
    is left. Afterwards the runtime resumes nothing more (``Runtime.draining``).
    """
    activations.draining = True
    actors = list(activations.live.values())
    for actor in actors:
        actor.stop_after_step()
    with anyio.move_on_after(timeout, shield=True):
        for actor in actors:
            await actor.done.wait()
    for actor in actors:
        if not actor.done.is_set():
            log.warning("agent %s still in a step after %.1f s: cancelled", actor.journal.stream, timeout)
            actor.cancel_scope.cancel()
    with anyio.CancelScope(shield=True):
        for actor in actors:
            await actor.done.wait()
        await activations.leases.release_all()
