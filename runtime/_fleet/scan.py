"""A scan of a namespace for agents to resume: what ``resume_all`` does, and ``serve()`` every poll.

On a store with a status index (``CAP_STATUS_INDEX``, see
``durably._journal.status_index``) a scan visits only the streams whose entry
says ``running`` or that have no entry; on others, every stream.

One bad stream never stops a scan: an agent whose journal cannot be read
(corrupt, foreign bytes, written by a newer durably, any error restoring it)
is logged and skipped. An outage (``StoreUnavailableError``) is the whole
store's and is raised, for ``serve()`` to back off.

Fair shares between serving workers: ``serve()`` scans in
a random order, so workers polling together do not all reach for the same
agents first, and takes no more than its share of them in one scan.
``FairShare`` sets that share: at most ``max_agents`` live agents in this
runtime, and no more than an even split, among the workers it knows of
(itself included), of the agents it could run: those live here plus the
runnable ones the scan lists. The workers it knows of are the live serving
workers whose heartbeats say they serve the namespace with one of its
definitions (an idle fleet splits a burst too) and the lease holders its last
scan met (a runtime that holds leases without serving). At its share it takes
one more agent per scan only when an agent it listed in its previous scan is
still waiting and no peer's heartbeat lists it: peers below their share take
the rest, and an agent a peer leaves (at its ``max_agents``, serving other
definitions) still runs. Its first scan takes one agent, so that workers
started together see each other before they split.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from durably._fleet.recheck import still_runnable
from durably._fleet.timers import due_only
from durably._journal.status_index import index_store, runnable_rows
from durably.errors import (
    AgentFencedError,
    AgentLeasedError,
    AgentLeaseLostError,
    DefinitionMigrationError,
    DefinitionNotRegisteredError,
    InvalidArgumentError,
    RuntimeNotStartedError,
)
from durably.storage._errors import CodecError, StoreClosedError, StoreUnavailableError
from durably.storage._spi import IndexedStream, StreamId

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.handle import AgentHandle

log = logging.getLogger("durably.runtime")  # a logger name users configure, not the module path


@dataclass
class ScanResult:
    """``handles`` of the agents resumed here; ``holders``: how many agents each other
    live lease owner was seen running (owner string -> count); ``listed``: the ids of
    the runnable agents this runtime could run that the scan listed, besides those live
    here (None: not kept, or the store has no status index to tell runnable from finished)."""

    handles: list[AgentHandle] = field(default_factory=list)
    holders: Counter[str] = field(default_factory=Counter)
    listed: list[str] | None = None


async def scan(
    activations: Activations,
    *,
    limit: int | None = None,
    shuffle: bool = False,
    share: Callable[[list[str] | None], int | None] | None = None,
) -> ScanResult:
    """Resume the namespace's runnable agents whose definition ``runtime`` registers.

    ``limit``: resume at most that many (None: all); ``shuffle``: visit the
    streams in a random order (their ids are then held in memory for the scan);
    ``share``: once the streams are listed, called with ``ScanResult.listed`` (the
    listing is then held in memory): its answer, if lower, is the limit.
    Up to ``RESUME_CONCURRENCY`` agents are resumed at once.
    Raises ``StoreUnavailableError``, ``StoreClosedError`` and ``RuntimeNotStartedError`` (the
    runtime was left during the scan); nothing else.
    """
    result = ScanResult()
    if limit is not None and limit < 1:
        return result
    # With a status index only the streams it says may run (and those it has no
    # entry for) are restored and leased: an idle poll costs what is runnable.
    # A sleeping agent is restored only once its timer is due (its entry holds the time).
    activations.wake.reset()
    rows = runnable_rows(activations.store, activations.namespace)
    streams = (
        due_only(rows, activations.wake)
        if rows is not None
        else _unindexed(activations.store.list_streams(activations.namespace))
    )
    if shuffle or share is not None:
        listed = [
            row
            async for row in streams
            if row.stream.agent_id not in activations.live and activations.serves(row.entry)
        ]
        if shuffle:
            random.shuffle(listed)
        streams = _aiter(listed)
        # Unindexed, the listing holds finished agents too: no count of what waits.
        result.listed = [row.stream.agent_id for row in listed] if rows is not None else None
        if share is not None:
            allowed = share(result.listed)
            limit = allowed if limit is None or (allowed is not None and allowed < limit) else limit
            if limit is not None and limit < 1:
                return result
    outage: list[BaseException] = []
    # The listing goes stale over a long scan (other workers finish what it
    # listed): each row's entry is read again just before its claim.
    index = index_store(activations.store) if rows is not None else None

    async def attempt(row: IndexedStream, gate: _Gather) -> None:
        arrived = False

        async def gather() -> None:
            nonlocal arrived
            arrived = True
            await gate.arrive()

        try:
            if index is not None:
                fresh = await still_runnable(index, row, activations.wake)
                if fresh is None or not activations.serves(fresh.entry):
                    return  # finished, parked or taken elsewhere since the listing
                row = fresh
            handle = await _resume_one(activations, row, result, gather)
        except (StoreUnavailableError, StoreClosedError, RuntimeNotStartedError) as exc:
            outage.append(exc)  # an outage is the whole store's, not this stream's (serve() backs off)
            return
        finally:
            if not arrived:
                gate.leave()  # not resumed here (or failed before its append): nobody waits for it
        if handle is not None:
            result.handles.append(handle)

    # Up to RESUME_CONCURRENCY resumes at once: their leases, restores and ``resumed``
    # appends overlap, and the appends share group commits.
    chunk: list[IndexedStream] = []
    async for row in streams:
        if row.stream.agent_id in activations.live or not activations.serves(row.entry):
            continue  # live here, or another worker's definition (its lease is not touched)
        chunk.append(row)
        room = RESUME_CONCURRENCY if limit is None else min(RESUME_CONCURRENCY, limit - len(result.handles))
        if len(chunk) >= room:
            await _resume_chunk(chunk, attempt, outage)
            chunk = []
            if limit is not None and len(result.handles) >= limit:
                return result
    if chunk:
        await _resume_chunk(chunk, attempt, outage)
    return result


#: Resumes a scan runs at once.
RESUME_CONCURRENCY = 16
#: Longest a restored agent of a chunk waits for the others' restores before its ``resumed`` append.
GATHER_SECONDS = 0.02


class _Gather:
    """Where the resumes of one chunk meet before their ``resumed`` appends.

    Their restores end at different times (each is a few reads, queued on the
    store's connections); appended as each ends, the ``resumed`` records went
    out in about one group commit per two agents. Waiting here until every
    resume of the chunk has restored (or given up), or ``GATHER_SECONDS`` have
    passed, lets them share one or two commits. Each resume calls ``arrive``
    or ``leave`` once.
    """

    def __init__(self, count: int) -> None:
        self._left = count
        self._all = anyio.Event()

    def leave(self) -> None:
        """One resume is done with the gathering (arrived, or will not append)."""
        self._left -= 1
        if self._left <= 0:
            self._all.set()

    async def arrive(self) -> None:
        """Count this resume in, then wait for the others (at most ``GATHER_SECONDS``)."""
        self.leave()
        with anyio.move_on_after(GATHER_SECONDS):
            await self._all.wait()


async def _resume_chunk(
    chunk: list[IndexedStream],
    attempt: Callable[[IndexedStream, _Gather], Coroutine[Any, Any, None]],
    outage: list[BaseException],
) -> None:
    gate = _Gather(len(chunk))
    async with anyio.create_task_group() as tg:
        for stream in chunk:
            tg.start_soon(attempt, stream, gate)
    if outage:
        raise outage[0]


async def _resume_one(
    activations: Activations,
    row: IndexedStream,
    result: ScanResult,
    gather: Callable[[], Awaitable[None]] | None = None,
) -> AgentHandle | None:
    """Resume one stream's agent; None when it is not ours to run now (logged when unreadable)."""
    stream = row.stream
    try:
        # The entry just listed is not read again.
        return await activations.resume(stream.agent_id, seen=row.entry, gather=gather)
    except AgentLeaseLostError:
        pass  # its lease lapsed while it was restored here: a later scan tries again
    except AgentLeasedError as exc:
        result.holders[exc.owner or "unknown"] += 1  # another runtime runs it
    except (DefinitionNotRegisteredError, DefinitionMigrationError, AgentFencedError):
        pass  # no registered definition can run it, or another runtime won the race to
    except CodecError as exc:
        log.error("agent %s not resumed, its journal is unreadable: %s", stream, exc)
    except (StoreUnavailableError, StoreClosedError, RuntimeNotStartedError):
        raise
    except Exception:
        # Whatever else one stream's bytes provoke must not stop every other agent.
        log.exception("agent %s not resumed: unexpected error restoring it", stream)
    return None


async def _aiter(items: Iterable[IndexedStream]) -> AsyncIterator[IndexedStream]:
    for item in items:
        yield item


async def _unindexed(streams: AsyncIterator[StreamId]) -> AsyncIterator[IndexedStream]:
    """A store without an index: every stream, as a row without an entry."""
    async for stream in streams:
        yield IndexedStream(stream, None)


class FairShare:
    """How many agents ``serve()`` may take in its next scan.

    ``max_agents``: most live agents in this runtime at once (None: no cap).
    Raises ``InvalidArgumentError`` when ``max_agents`` is below 1.
    """

    def __init__(self, max_agents: int | None = None) -> None:
        if max_agents is not None and max_agents < 1:
            raise InvalidArgumentError("max_agents must be at least 1")
        self.max_agents = max_agents
        self._seen: ScanResult | None = None
        self._peers: frozenset[str] = frozenset()
        self._peers_run: frozenset[str] = frozenset()  # the agent ids the peers' heartbeats list
        self._unclaimed: frozenset[str] = frozenset()  # listed by the last scan, run by no peer

    def limit(self, live_here: int, listed: Collection[str] | None = None) -> int | None:
        """The next scan's limit given ``live_here`` agents running in this runtime; None: no limit.

        ``listed``: the ids of the runnable agents this runtime could run that the scan
        lists (``ScanResult.listed``, those other workers hold included); None when not
        known, then the split is of the agents the last scan saw held, plus one.
        """
        cap = None if self.max_agents is None else max(0, self.max_agents - live_here)
        if self._seen is None:
            share = 1  # first scan: one, until the other workers are seen
        else:
            others = self._peers | set(self._seen.holders)
            if not others:
                share = None  # alone, as far as can be seen
            else:
                workers = 1 + len(others)
                if listed is None:
                    total = live_here + sum(self._seen.holders.values()) + 1  # room for one more
                    share = max(1, math.ceil(total / workers) - live_here)  # never 0: nothing starves
                else:
                    share = math.ceil((live_here + len(listed)) / workers) - live_here
                    if share < 1:
                        # At its share: the peers below theirs take the rest. One more only when an
                        # agent no peer runs was already waiting at the last scan (a whole poll): a
                        # peer at its max_agents or serving other definitions leaves it, and no
                        # agent waits forever.
                        share = 1 if self._unclaimed.intersection(listed).difference(self._peers_run) else 0
        if cap is None:
            return share
        return cap if share is None else min(cap, share)

    def share(self, live_here: int) -> Callable[[list[str] | None], int | None]:
        """``limit`` for a scan to call once it has listed the runnable agents (``scan(share=)``)."""
        return lambda listed: self.limit(live_here, listed)

    def observed(self, result: ScanResult) -> None:
        """Remember what the last scan saw."""
        self._seen = result
        self._unclaimed = frozenset(result.listed or ()) - self._peers_run

    def peers(self, owners: Iterable[str], running: Iterable[str] = ()) -> None:
        """Remember the other live workers serving what this one serves: their lease owner strings,
        and the agent ids their heartbeats say they run (``WorkerBeat.agent_ids``)."""
        self._peers = frozenset(owners)
        self._peers_run = frozenset(running)
