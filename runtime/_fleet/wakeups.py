"""Wake-ups for ``Runtime.serve``: change notifications where the store has them, polling always.

A store declaring ``CAP_CHANGES`` (PostgreSQL's LISTEN/NOTIFY) tells a
subscriber which streams another process changed; ``serve()`` then resumes
those at once instead of at its next poll. A process that appends a command
to a parked agent it does not run itself publishes the change (``publish``).
Notifications are hints: the poll stays, so an agent is still resumed when a
publisher died between its append and its publish, or the feed was down.

They are also untrusted: on PostgreSQL any role that can connect may NOTIFY
the channel, with any agent id. So a wake-up takes nothing before the agent is
looked up (its status index entry, or its last seq): an id that names no
stream, or an agent that is not runnable, costs one read and leaves no lease
row. And the work a flood can cause is bounded: past ``MAX_WAKEUPS`` ids
between two scans, the worker stops following ids and scans once instead
(the scan lists what is runnable, however many ids were sent).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from durably._journal import status_index
from durably._loop.state import RUNNING, SLEEPING
from durably.errors import (
    AgentFencedError,
    AgentLeasedError,
    AgentNotFoundError,
    DefinitionMigrationError,
    DefinitionNotRegisteredError,
    InvalidArgumentError,
)
from durably.storage._errors import CodecError, StoreClosedError, StoreError, StoreUnavailableError
from durably.storage._spi import ChangeSubscription, Store, StreamId, supports_changes

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.handle import AgentHandle

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path

#: Wake-ups followed between two scans; a batch that would pass it is dropped for one scan.
MAX_WAKEUPS = 64
#: Woken agents resumed at once (as many as a scan resumes at once).
RESUMING = 16


class _NoFeed:
    """The subscription of a store without ``CAP_CHANGES``: nothing ever arrives."""

    async def wait(self) -> frozenset[StreamId] | None:
        await anyio.sleep_forever()
        return None  # pragma: no cover


@asynccontextmanager
async def subscribe(store: Store, namespace: str) -> AsyncIterator[ChangeSubscription]:
    """The store's change feed of ``namespace`` for the block, or one that never fires."""
    if not supports_changes(store):
        yield _NoFeed()
        return
    async with store.subscribe_changes(namespace) as feed:
        yield feed


async def publish(store: Store, stream: StreamId) -> None:
    """Tell other processes that ``stream`` changed, if the store can; an outage is only logged
    (the pollers find the change anyway)."""
    if not supports_changes(store):
        return
    try:
        await store.publish_change(stream)
    except StoreError as exc:
        log.warning("could not notify other processes of the change of %s (they will poll): %s", stream, exc)


async def resume_if_runnable(activations: Activations, agent_id: str) -> AgentHandle | None:
    """Resume ``agent_id`` in ``runtime`` after a wake-up; its handle, or None for an agent live
    there, not its to run, run by another runtime, purged meanwhile or unreadable (logged), as a
    scan would (``durably._fleet.scan``). Raises ``StoreUnavailableError``/``StoreClosedError``."""
    if agent_id in activations.live:
        return None
    try:
        runnable, seen = await _look_up(activations.store, activations.stream(agent_id))
        if not runnable:
            return None  # no such stream, or not runnable: nothing is taken (no lease row)
        return await activations.resume(agent_id, seen=seen)
    except (
        DefinitionNotRegisteredError,
        DefinitionMigrationError,
        AgentLeasedError,
        AgentFencedError,
        AgentNotFoundError,
    ):
        return None
    except CodecError as exc:
        log.error("agent %s not resumed, its journal is unreadable: %s", activations.stream(agent_id), exc)
        return None
    except (StoreUnavailableError, StoreClosedError):
        raise  # an outage is the whole store's (serve() backs off)
    except Exception:
        log.exception("agent %s not resumed: unexpected error restoring it", activations.stream(agent_id))
        return None


async def _look_up(store: Store, stream: StreamId) -> tuple[bool, Any]:
    """Whether a wake-up for ``stream`` is worth a resume, and the index entry read (``seen``).

    With a status index: runnable when its entry says ``running``; a stream
    without an entry is looked at when it exists (written before the index, or
    by a writer that does not keep it). Without an index: when it exists.
    """
    index = status_index.index_store(store)
    seen: Any = status_index.UNSEEN
    if index is not None:
        seen = await index.get_index(stream)
        if seen is not None:
            due = seen.status == SLEEPING and seen.wake_at is not None and seen.wake_at <= time.time()
            return seen.status == RUNNING or due, seen
    return await store.last_seq(stream) > 0, seen


async def wait_and_resume(
    feed: ChangeSubscription,
    poll_interval: float,
    resume: Callable[[str], Awaitable[object]],
    *,
    concurrency: int = RESUMING,
    until: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Until ``poll_interval`` seconds have passed, or ``until()`` returns (the earliest timer
    of ``serve()``), ``resume(agent_id)`` each stream the feed names, up to ``concurrency`` of
    them at once; returns once the resumes begun have ended. The end of the wait stops the
    listening only: a resume begun is finished, however long it takes (cut short after its
    ``resumed`` record was durable, it would give its lease back, and the next scan would
    take it again and journal a second ``resumed`` record).

    A burst of commands (an operator approving hundreds of agents) names many
    streams at once: their leases, restores and ``resumed`` appends overlap,
    and the appends share group commits, instead of one agent after another.
    Stops listening early when the feed says notifications were missed, when
    more than ``MAX_WAKEUPS`` streams were named since the call began (a
    flood: one scan costs what is runnable, however many ids were sent), or
    when a resume meets an outage (``StoreError``; the resumes not begun are
    dropped): the caller then scans every stream, as on a poll (and rides the
    outage out with its backoff). Raises ``InvalidArgumentError`` for a
    ``concurrency`` below 1.
    """
    if concurrency < 1:
        raise InvalidArgumentError(f"wake-ups: concurrency must be at least 1, got {concurrency}")
    followed = 0
    limiter = anyio.CapacityLimiter(concurrency)
    failed: list[StoreError] = []
    listening = anyio.CancelScope()  # the wait for notifications, not the resumes it began

    async def one(stream: StreamId) -> None:
        async with limiter:
            if failed:
                return  # the store failed under another resume: the caller scans instead
            try:
                await resume(stream.agent_id)
            except StoreError as exc:
                if not failed:
                    log.warning("woken for %s, but the store failed (%s): scanning instead", stream, exc)
                failed.append(exc)
                listening.cancel()

    # The resumes run in this task group, outside the poll's deadline: a resume begun
    # is never cut short by the end of the wait (its restore and append would be lost work).
    timer = anyio.CancelScope()  # the wait for ``until``, over once the listening is

    async def stop_listening_when_due(until: Callable[[], Awaitable[None]]) -> None:
        with timer:
            await until()
            listening.cancel()

    async with anyio.create_task_group() as tg:
        try:
            with listening, anyio.move_on_after(poll_interval):
                if until is not None:
                    tg.start_soon(stop_listening_when_due, until)
                while True:
                    changed = await feed.wait()
                    if changed is None:
                        return
                    followed += len(changed)
                    if followed > MAX_WAKEUPS:
                        log.warning("more than %d wake-ups since the last scan: scanning instead", MAX_WAKEUPS)
                        return
                    for stream in sorted(changed):
                        tg.start_soon(one, stream)
        finally:
            timer.cancel()
