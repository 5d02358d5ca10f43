"""One activation's hold on its agent's stream: the lease it acquired, its fencing token, and whether it is still live.

The journal writer carries it (its token on every append and snapshot); the
fleet's lease keeper (``durably._fleet.leases``) makes, renews and releases it.

Each activation of an agent gets its own ``LeaseClaim`` (never one shared by
stream): its appends and snapshots carry the claim's ``fence`` (the token of
the lease acquired in the store), it releases exactly that lease when it ends,
and it calls ``check`` before anything that spends or acts (a model call, a
tool call, the first ``started``/``resumed`` record). ``check`` fails once the
lease is known lost (the renewal loop found another holder or a new token, or
the store refused the fence), and also once the lease may have lapsed by this
process's monotonic clock: a worker paused past its lease (SIGSTOP, a blocked
event loop, a long GC) wakes with a clock that says so, before it asks the store
anything, so it spends nothing on a lease another worker may hold by now.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from durably.errors import AgentLeaseLostError, LeaseLoss
from durably.storage._spi import Lease, StreamId

#: Part of the ttl a claim counts as lapsed early: a renewal runs every ttl / 3,
#: so a live worker always renews well before this margin is reached.
SAFETY_MARGIN = 0.1


class LeaseClaim:
    """The lease one activation holds on ``stream``.

    In: ``stream``; ``lease``, the lease acquired in the store (None on a store
    without leases: single-worker, never lapses); ``ttl`` in seconds; ``asked_at``,
    the ``time.monotonic()`` reading taken just before the acquire was sent (the
    lease runs from no earlier than that); ``on_lost``, called once with the
    stream when the claim is first found lost, whichever way (telemetry counts it).
    """

    __slots__ = ("stream", "lease", "ttl", "_live_until", "lost", "on_lost", "renewal_error")

    def __init__(
        self,
        stream: StreamId,
        lease: Lease | None,
        ttl: float,
        asked_at: float,
        on_lost: Callable[[StreamId], None] | None = None,
    ) -> None:
        self.stream = stream
        self.lease = lease
        self.ttl = ttl
        self._live_until = asked_at + ttl * (1 - SAFETY_MARGIN)
        self.lost: AgentLeaseLostError | None = None
        self.on_lost = on_lost
        #: The store's error of the last renewal, while no renewal succeeded since (the
        #: lease lost by the clock then says why it was not renewed).
        self.renewal_error: str | None = None

    @property
    def fence(self) -> int | None:
        """The fencing token appends and snapshots carry (None without leases: nothing to check)."""
        return None if self.lease is None else self.lease.token

    def renewed(self, lease: Lease, asked_at: float) -> None:
        """Record a renewal sent at monotonic ``asked_at``; a new token means the lease
        lapsed and was taken again: the activation's lease is lost all the same."""
        if self.lease is None or lease.token != self.lease.token:
            self.lose(None, cause="lapsed")
            return
        self.renewal_error = None
        self._live_until = asked_at + self.ttl * (1 - SAFETY_MARGIN)

    def renewal_failed(self, error: BaseException) -> None:
        """Record that a renewal failed with the store's ``error``: should the lease then
        lapse by the clock, the error says the renewal failed and how."""
        self.renewal_error = f"{type(error).__name__}: {error}"

    def lose(self, holder: Lease | None, *, cause: LeaseLoss = "taken") -> AgentLeaseLostError:
        """Mark the lease lost and return the error to stop with (the first one, if lost before).

        ``holder``: who holds it now (None if unknown or nobody); ``cause``: what was
        seen (``AgentLeaseLostError.cause``): ``"taken"`` by another owner (the default),
        ``"lapsed"`` (the store says nobody holds it) or ``"expired"`` by this process's
        clock, which becomes ``"renewal_failed"`` when the last renewal failed.
        """
        if self.lost is None:
            if cause == "expired" and self.renewal_error is not None:
                cause = "renewal_failed"
            self.lost = AgentLeaseLostError(
                self.stream.agent_id,
                holder.owner if holder else None,
                holder.expires_at if holder else None,
                cause=cause,
                renewal_error=self.renewal_error if cause == "renewal_failed" else None,
            )
            if self.on_lost is not None:
                self.on_lost(self.stream)
        return self.lost

    def check(self) -> None:
        """Return if the lease is still this activation's; else raise.

        Raises:
            AgentLeaseLostError: The lease was lost (taken by another worker, re-taken
                under a new token, or refused by the store's fence), or it may have
                lapsed: more than ttl minus a safety margin has passed on the
                monotonic clock since the last acquire or renewal was sent.
        """
        if self.lost is not None:
            raise self.lost
        if self.lease is not None and time.monotonic() > self._live_until:
            raise self.lose(None, cause="expired")
