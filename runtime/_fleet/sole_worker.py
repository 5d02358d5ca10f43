"""``serve()`` on a store without leases: the only worker of its namespace, or none.

A store without leases (``CAP_LEASES``; ``file://``) cannot keep two workers
from running one agent, so a second serving worker would run the same tools
twice. Every store holds the workers' heartbeats (``durably._fleet.workers``),
so a worker looks there before it serves: it starts heartbeating, and once its
first beat is written it lists the live serving workers of its namespace. For
each other one it watches the heartbeat for up to ``heartbeat_timeout``
seconds: a worker still beating is live, and this one refuses to serve
(``WorkerExistsError``, its own heartbeat then says ``draining``, which
nobody counts as serving); one whose beat does not move is a predecessor that
died without saying ``stopped`` (a SIGKILL, a crash), and this one goes on.
Two workers starting together each see the other beating and both refuse:
never both serving. When the heartbeats cannot be read (an outage) the
worker only warns and serves, as before this check existed.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import anyio

from durably.errors import WorkerExistsError
from durably.storage._errors import StoreError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.workers import Heartbeats, WorkerBeat

log = logging.getLogger("durably.serve")


async def ensure_sole_worker(activations: Activations, heartbeats: Heartbeats) -> None:
    """Start ``heartbeats`` and return once no other live worker serves the namespace.

    Takes up to two ``heartbeat_timeout`` periods when another worker's beat is
    seen (its first beat written, then the others watched). Raises
    ``WorkerExistsError`` naming the first other worker still beating; the
    runtime is then marked draining (nothing more is resumed in it).
    """
    heartbeats.start(activations)
    with anyio.move_on_after(heartbeats.timeout):
        while heartbeats.last_written is None:
            await anyio.sleep(min(heartbeats.interval, 0.05))
    if heartbeats.last_written is None:
        log.warning("serve(): its heartbeat could not be written: other workers of this store cannot be seen")
        return
    try:
        others = await _others(activations, heartbeats)
        if not others:
            return
        started = time.monotonic()
        while time.monotonic() - started < heartbeats.timeout:
            await anyio.sleep(heartbeats.interval)
            now = await _others(activations, heartbeats)
            for owner, seen in others.items():
                later = now.get(owner)
                if later is not None and later.beat_at > seen.beat_at:
                    activations.draining = True  # its heartbeat says draining: not a serving worker
                    await heartbeats.write(heartbeats.beat(activations))  # said now, not at the next beat
                    raise WorkerExistsError(activations.namespace, later.worker_id, later.host, later.pid)
    except StoreError as exc:
        log.warning("serve(): the workers' heartbeats could not be read (%s): other workers cannot be seen", exc)


async def _others(activations: Activations, heartbeats: Heartbeats) -> dict[str, WorkerBeat]:
    """The live serving workers of the namespace but this one, by owner."""
    mine = str(heartbeats.identity)
    return {beat.owner: beat for beat in await heartbeats.live_workers(activations.namespace) if beat.owner != mine}
