"""The limiter: ``Limit``s enforced in the store, so every worker of a store shares them.

Concurrency is N leases per limit (``slot/KEY/0`` .. ``slot/KEY/N-1`` in the
reserved namespace ``durably-limits``): a call runs only while it holds one,
renewed while it runs, released after; a killed worker's slot frees itself
when its lease expires. Rates are a stream per limit (``rate/KEY``) holding
one record per admitted call and per charge of a reply's tokens; an admission
is an append with the expected seq the worker read, so the store's
compare-and-set decides between racing workers: a ``ConflictError`` means
someone else took room, and the worker re-reads and tries again. The stream
is compacted (a snapshot of the window, then older records deleted) so it
stays short. Timestamps are each worker's wall clock: clock skew between
workers moves the window by as much.

While a call waits, a lease on ``waiting/NAMESPACE/AGENT_ID`` names the limit
and the time it expects room (``waiting_for`` reads it for ``durably show``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio

from durably._loop.limits import Charge, Estimate, Limit, OnWait
from durably.errors import ConflictError, InvalidArgumentError, StoreError
from durably.storage._spi import Lease, LeaseStore, Store, StreamId, supports_leases
from durably.storage._spi_store import CAP_SINGLE_PROCESS

log = logging.getLogger("durably.limits")

#: The reserved namespace of the limits' streams and leases; no agent lives in it.
LIMITS_NAMESPACE = "durably-limits"
_COMPACT_EVERY = 64  # records after the last snapshot that make the next admission compact the stream
_SLOT_POLL_S = (0.02, 1.0)  # a waiting call looks for a free slot this often (backing off up to the second)


def waiting_stream(agent: StreamId) -> StreamId:
    """Where the limit an agent waits for is said (a lease whose owner is the wait)."""
    return StreamId(LIMITS_NAMESPACE, f"waiting/{agent.namespace}/{agent.agent_id}")


async def waiting_for(store: Store, agent: StreamId) -> dict[str, Any] | None:
    """What ``agent`` waits for now, as its worker said in the store.

    Args:
        store: The open store.
        agent: The agent's stream.

    Returns:
        ``{"limit": key, "kind": "rate" | "concurrency", "until": unix seconds or None,
            "since": unix seconds, "worker": worker id}``,
            or None when it waits for no limit (or the store has no leases).
    """
    if not supports_leases(store):
        return None
    lease = await store.get_lease(waiting_stream(agent))
    if lease is None:
        return None
    try:
        said = json.loads(lease.owner)
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


@dataclass
class _RateLog:
    """One rated limit's stream as this process last read it: ``(at, requests, tokens)`` entries."""

    store: Store
    limit: Limit
    stream: StreamId
    seq: int = 0
    base: int = 0  # the seq of the snapshot the entries started from
    entries: list[tuple[float, int, int]] = field(default_factory=list)
    # One reader and writer at a time in this process: two refreshes at once would fold a record twice.
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def refresh(self) -> None:
        """Read what others appended since; start again from the snapshot when compaction cut past us."""
        while True:
            start = self.seq
            expected, cut = start + 1, False
            async with contextlib.aclosing(self.store.read(self.stream, after_seq=self.seq)) as records:
                async for stored in records:
                    if stored.seq != expected:
                        cut = True
                        break
                    self.entries.append(_decode(stored.data))
                    self.seq, expected = stored.seq, stored.seq + 1
            if not cut and (self.seq > start or await self.store.last_seq(self.stream) <= self.seq):
                return
            await self._reload()

    async def _reload(self) -> None:
        snapshot = await self.store.get_snapshot(self.stream)
        self.entries, self.seq, self.base = [], 0, 0
        if snapshot is not None:
            self.entries = [(float(t), int(r), int(k)) for t, r, k in json.loads(snapshot.data)]
            self.seq = self.base = snapshot.seq

    def used(self, now: float, reserve: int = 0) -> tuple[int, int, float]:
        """Requests and tokens in the window ending now, and when room opens for one more request
        reserving ``reserve`` tokens (at most the window's allowance: a call larger than it runs alone)."""
        start = now - self.limit.window_s
        self.entries = [e for e in self.entries if e[0] > start - self.limit.window_s]
        window = sorted(e for e in self.entries if e[0] > start)
        requests = sum(e[1] for e in window)
        tokens = sum(e[2] for e in window)
        room_at = now
        if self.limit.requests_per_minute is not None and requests >= self.limit.requests_in_window:
            # room opens when enough admissions leave the window
            excess = requests - self.limit.requests_in_window + 1
            for at, r, _ in window:
                excess -= r
                if excess <= 0:
                    room_at = max(room_at, at + self.limit.window_s)
                    break
        wanted = max(min(reserve, self.limit.tokens_in_window), 1)
        if self.limit.tokens_per_minute is not None and tokens + wanted > self.limit.tokens_in_window:
            excess = tokens + wanted - self.limit.tokens_in_window
            for at, _, k in window:
                excess -= k
                if excess <= 0:
                    room_at = max(room_at, at + self.limit.window_s)
                    break
        return requests, tokens, room_at

    async def append(self, *entries: tuple[float, int, int]) -> bool:
        """Append after the seq read; False when another worker appended first (re-read, then decide again)."""
        try:
            self.seq = await self.store.append(self.stream, self.seq, [_encode(e) for e in entries])
        except ConflictError:
            return False
        self.entries.extend(entries)
        if self.seq - self.base >= _COMPACT_EVERY:
            await self._compact(max(e[0] for e in entries))
        return True

    async def _compact(self, now: float) -> None:
        keep = [e for e in self.entries if e[0] > now - 2 * self.limit.window_s]
        try:
            await self.store.put_snapshot(self.stream, self.seq, json.dumps(keep).encode())
            await self.store.delete_records(self.stream, self.seq)
            await self.store.delete_snapshots(self.stream, self.seq)
        except StoreError as exc:  # another worker compacted past us: its snapshot serves as well
            log.debug("limit stream %s not compacted: %s", self.stream, exc)
            return
        self.base = self.seq


@contextlib.asynccontextmanager
async def _unlimited() -> AsyncIterator[Charge]:
    yield _charge_nothing


async def _charge_nothing(tokens: int) -> None:
    return None


def _encode(entry: tuple[float, int, int]) -> bytes:
    return json.dumps(entry).encode()


def _decode(data: bytes) -> tuple[float, int, int]:
    t, r, k = json.loads(data)
    return float(t), int(r), int(k)


class Limiter:
    """Admits model calls under the ``Limit``s that cover them, for one runtime.

    In: ``store`` (open), ``owner`` (the worker id; each slot's lease owner is it
    plus a nonce), ``limits`` (the runtime-wide ones), ``slot_ttl`` (seconds a
    slot outlives a worker that stopped renewing it), ``clock`` (unix seconds).

    Raises:
        InvalidArgumentError: From the constructor, when a concurrency limit is
            given for a store without leases that several processes may share
            (nothing there could count calls across workers).
    """

    def __init__(
        self,
        store: Store,
        owner: str,
        limits: tuple[Limit, ...] = (),
        *,
        slot_ttl: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.owner = owner
        self.limits = limits
        self.slot_ttl = slot_ttl
        self.clock = clock
        self._logs: dict[str, _RateLog] = {}
        self._local: dict[str, anyio.Semaphore] = {}  # slots of a single-process store without leases
        for limit in limits:
            self.check(limit)

    def check(self, limit: Limit) -> None:
        """Raise ``InvalidArgumentError`` when this store cannot enforce ``limit`` across workers."""
        if (
            limit.concurrency is not None
            and not supports_leases(self.store)
            and CAP_SINGLE_PROCESS not in self.store.capabilities
        ):
            raise InvalidArgumentError(
                f"Limit {limit.key!r}: a concurrency limit needs a store with leases "
                f"(this store has none, and other processes may share it)"
            )

    def covering(self, definition_name: str, provider: str, model_name: str, own: Sequence[Limit]) -> list[Limit]:
        """The limits a call is under: the runtime's that cover it, and the definition's own.

        Args:
            definition_name: The calling agent's definition name.
            provider: The model's provider.
            model_name: The model's name.
            own: The definition's limits.

        Returns:
            The limits, sorted by key (so slots are always taken in one order).

        Raises:
            InvalidArgumentError: A definition's limit this store cannot enforce (``check``).
        """
        found = {limit.key: limit for limit in self.limits if limit.covers(definition_name, provider, model_name)}
        for limit in own:
            self.check(limit)
            found.setdefault(limit.key, limit)
        return [found[key] for key in sorted(found)]

    def admission(
        self,
        definition_name: str,
        own: Sequence[Limit],
        provider: str,
        model_name: str,
        agent: StreamId,
        on_wait: OnWait,
        estimate: Estimate | None = None,
    ) -> AbstractAsyncContextManager[Charge]:
        """The ``Admission`` an actor asks before each model attempt: ``admitted`` under the limits ``covering`` it.

        Args:
            definition_name: The calling agent's definition name.
            own: The definition's limits.
            provider: The model's provider.
            model_name: The model's name.
            agent: The calling agent's stream.
            on_wait: Told of each wait.
            estimate: The tokens to reserve before the call (None: nothing reserved).

        Returns:
            ``admitted(...)``'s context manager.
        """
        limits = self.covering(definition_name, provider, model_name, own)
        return self.admitted(limits, agent, on_wait, estimate) if limits else _unlimited()

    @contextlib.asynccontextmanager
    async def admitted(
        self, limits: list[Limit], agent: StreamId, on_wait: OnWait | None = None, estimate: Estimate | None = None
    ) -> AsyncIterator[Charge]:
        """Wait until every limit has room, hold it while the block runs, give the slots back after.

        Args:
            limits: The limits the call is under (``covering``).
            agent: The calling agent's stream (where its wait is shown).
            on_wait: Told of each wait that happened: the limit's key and the seconds waited.
            estimate: Gives the tokens to reserve for the call before it starts (asked
                only when a token limit covers it); None reserves nothing.

        Yields:
            ``charge(tokens)``: to call once the reply arrived, with its input +
                output tokens: the token limits count them in place of the estimate
                (a call that fails keeps its estimate charged: it may have been billed).

        Raises:
            StoreUnavailableError: When the store fails while admitting or charging.
        """
        async with contextlib.AsyncExitStack() as stack:
            for limit in limits:
                if limit.concurrency is not None:
                    await stack.enter_async_context(self._slot(limit, agent, on_wait))
            reserve = 0
            if estimate is not None and any(limit.tokens_per_minute is not None for limit in limits):
                reserve = max(int(estimate()), 0)
            admitted_at: dict[str, float] = {}
            for limit in limits:
                if limit.rated:
                    held = reserve if limit.tokens_per_minute is not None else 0
                    admitted_at[limit.key] = await self._admit(limit, agent, on_wait, held)

            async def charge(tokens: int) -> None:
                for limit in limits:
                    if limit.tokens_per_minute is not None and (tokens or reserve):
                        await self._charge(limit, tokens, reserve, admitted_at[limit.key])

            yield charge

    def _log(self, limit: Limit) -> _RateLog:
        rate_log = self._logs.get(limit.key)
        if rate_log is None or rate_log.limit != limit:
            rate_log = _RateLog(self.store, limit, StreamId(LIMITS_NAMESPACE, f"rate/{limit.key}"))
            self._logs[limit.key] = rate_log
        return rate_log

    async def _admit(self, limit: Limit, agent: StreamId, on_wait: OnWait | None, reserve: int) -> float:
        """Append the call's admission once the window has room; return its time."""
        rate_log = self._log(limit)
        started = self.clock()
        waited = False
        try:
            while True:
                async with rate_log.lock:
                    await rate_log.refresh()
                    now = self.clock()
                    _, _, room_at = rate_log.used(now, reserve)
                    if room_at <= now:
                        if await rate_log.append((now, 1, reserve)):
                            return now
                        continue  # another worker took room first: read again
                if not waited:
                    waited = True
                    await self._say_waiting(agent, limit, "rate", room_at, started)
                await anyio.sleep(room_at - now + random.uniform(0.0, 0.05))
        finally:
            if waited:
                await self._done_waiting(agent, limit, started, on_wait)

    async def _charge(self, limit: Limit, tokens: int, reserved: int, admitted_at: float) -> None:
        # The reply's tokens count from now; the reservation is taken back as of its own time,
        # so that it and its reversal leave the window together.
        entries = [(self.clock(), 0, tokens)]
        if reserved:
            entries.append((admitted_at, 0, -reserved))
        rate_log = self._log(limit)
        while True:
            async with rate_log.lock:
                await rate_log.refresh()
                if await rate_log.append(*entries):
                    return

    @contextlib.asynccontextmanager
    async def _slot(self, limit: Limit, agent: StreamId, on_wait: OnWait | None) -> AsyncIterator[None]:
        assert limit.concurrency is not None
        if not supports_leases(self.store):
            semaphore = self._local.setdefault(limit.key, anyio.Semaphore(limit.concurrency))
            async with semaphore:
                yield
            return
        store: LeaseStore = self.store
        owner = f"{self.owner}#{uuid.uuid4().hex[:12]}"  # unique: a renewal by the same owner would share a slot
        started, waited, said_at, delay = self.clock(), False, 0.0, _SLOT_POLL_S[0]
        lease: Lease | None = None
        try:
            while lease is None:
                for i in random.sample(range(limit.concurrency), limit.concurrency):
                    lease = await store.acquire_lease(
                        StreamId(LIMITS_NAMESPACE, f"slot/{limit.key}/{i}"), owner, self.slot_ttl
                    )
                    if lease is not None:
                        break
                else:
                    waited = True
                    if self.clock() - said_at >= self.slot_ttl / 3:  # said again before what was said lapses
                        said_at = self.clock()
                        await self._say_waiting(agent, limit, "concurrency", None, started)
                    await anyio.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, _SLOT_POLL_S[1])
        finally:
            if waited:
                await self._done_waiting(agent, limit, started, on_wait)
        held = lease
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._renew, store, held)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                await store.release_lease(held)

    async def _renew(self, store: LeaseStore, lease: Lease) -> None:
        while True:
            await anyio.sleep(self.slot_ttl / 3)
            try:
                renewed = await store.acquire_lease(lease.stream, lease.owner, self.slot_ttl)
            except StoreError as exc:
                log.warning("concurrency slot %s not renewed: %s", lease.stream, exc)
                continue
            if renewed is None:
                log.warning("concurrency slot %s expired while its call ran", lease.stream)
                return

    async def _say_waiting(self, agent: StreamId, limit: Limit, kind: str, until: float | None, since: float) -> None:
        if not supports_leases(self.store):
            return
        # The same words each time (a lease renews only for the same owner): "since" names this wait.
        said = json.dumps({"limit": limit.key, "kind": kind, "until": until, "since": since, "worker": self.owner})
        ttl = max((until or 0.0) - self.clock(), 0.0) + self.slot_ttl
        with contextlib.suppress(StoreError):  # showing the wait is a courtesy; the wait itself goes on
            await self.store.acquire_lease(waiting_stream(agent), said, ttl)

    async def _done_waiting(self, agent: StreamId, limit: Limit, started: float, on_wait: OnWait | None) -> None:
        if on_wait is not None:
            on_wait(limit.key, max(self.clock() - started, 0.0))
        if not supports_leases(self.store):
            return
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
            lease = await self.store.get_lease(waiting_stream(agent))
            if lease is not None:
                await self.store.release_lease(lease)
