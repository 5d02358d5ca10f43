"""Wake-ups for ``Runtime.serve``: change notifications where the store has them, polling always.

A store declaring ``CAP_CHANGES`` (PostgreSQL's LISTEN/NOTIFY) tells a
subscriber which streams another process changed; ``serve()`` then resumes
those at once instead of at its next poll. A process that appends a command
to a parked agent it does not run itself publishes the change (``publish``).
Notifications are hints: the poll stays, so an agent is still resumed when a
publisher died between its append and its publish, or the feed was down.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from durably.errors import (
    AgentFencedError,
    AgentLeasedError,
    AgentNotFoundError,
    DefinitionMigrationError,
    DefinitionNotRegisteredError,
)
from durably.storage._errors import CodecError, StoreClosedError, StoreError, StoreUnavailableError
from durably.storage._spi import ChangeSubscription, Store, StreamId, supports_changes

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.handle import AgentHandle

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path


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
        return await activations.resume(agent_id)
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


async def wait_and_resume(
    feed: ChangeSubscription, poll_interval: float, resume: Callable[[str], Awaitable[object]]
) -> None:
    """Until ``poll_interval`` seconds have passed, ``resume(agent_id)`` each stream the feed names.

    Returns early when the feed says notifications were missed, or when a
    resume meets an outage: the caller then scans every stream, as on a poll
    (and rides the outage out with its backoff).
    """
    with anyio.move_on_after(poll_interval):
        while True:
            changed = await feed.wait()
            if changed is None:
                return
            for stream in sorted(changed):
                try:
                    await resume(stream.agent_id)
                except StoreError as exc:
                    log.warning("woken for %s, but the store failed (%s): scanning instead", stream, exc)
                    return
