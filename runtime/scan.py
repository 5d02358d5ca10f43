"""A scan of a namespace for agents to resume: what ``resume_all`` does, and ``serve()`` every poll.

One bad stream never stops a scan: an agent whose journal cannot be read
(corrupt, foreign bytes, written by a newer durably, any error restoring it)
is logged and skipped. An outage (``StoreUnavailableError``) is the whole
store's and is raised, for ``serve()`` to back off.

Fair shares between serving workers (issue 11 item 17): ``serve()`` scans in
a random order, so workers polling together do not all reach for the same
agents first, and with a ``limit`` takes no more than that many agents in
one scan. ``FairShare`` sets that limit: at most ``max_agents`` live agents in
this runtime, and no more than an even split of the live agents it has seen
among the workers holding them (itself included); its first scan takes one
agent, so that workers started together see each other before they split.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durably.storage.errors import CodecError, StoreClosedError, StoreUnavailableError

from .errors import AgentFencedError, AgentLeasedError, DefinitionMigrationError, DefinitionNotRegisteredError

if TYPE_CHECKING:
    from .runtime import AgentHandle, Runtime

log = logging.getLogger("durably.runtime")


@dataclass
class ScanResult:
    """``handles`` of the agents resumed here; ``holders``: how many agents each other
    live lease owner was seen running (owner string -> count)."""

    handles: list[AgentHandle] = field(default_factory=list)
    holders: Counter = field(default_factory=Counter)


async def scan(runtime: Runtime, *, limit: int | None = None, shuffle: bool = False) -> ScanResult:
    """Resume the namespace's runnable agents whose definition ``runtime`` registers.

    ``limit``: resume at most that many (None: all); ``shuffle``: visit the
    streams in a random order (their ids are then held in memory for the scan).
    Raises ``StoreUnavailableError`` and ``StoreClosedError``; nothing else.
    """
    result = ScanResult()
    streams = runtime.store.list_streams(runtime.namespace)
    if shuffle:
        listed = [stream async for stream in streams]
        random.shuffle(listed)
        streams = _aiter(listed)
    async for stream in streams:
        if limit is not None and len(result.handles) >= limit:
            break
        if stream.agent_id in runtime._live:
            continue
        try:
            handle = await runtime._resume(stream.agent_id)
        except AgentLeasedError as exc:
            result.holders[exc.owner or "unknown"] += 1  # another runtime runs it
            continue
        except (DefinitionNotRegisteredError, DefinitionMigrationError, AgentFencedError):
            continue  # no registered definition can run it, or another runtime won the race to
        except CodecError as exc:
            log.error("agent %s not resumed, its journal is unreadable: %s", stream, exc)
            continue
        except (StoreUnavailableError, StoreClosedError):
            raise  # an outage is the whole store's, not this stream's (serve() backs off)
        except Exception:
            # Whatever else one stream's bytes provoke must not stop every other agent.
            log.exception("agent %s not resumed: unexpected error restoring it", stream)
            continue
        if handle is not None:
            result.handles.append(handle)
    return result


async def _aiter(items):
    for item in items:
        yield item


class FairShare:
    """How many agents ``serve()`` may take in its next scan.

    ``max_agents``: most live agents in this runtime at once (None: no cap).
    """

    def __init__(self, max_agents: int | None = None) -> None:
        if max_agents is not None and max_agents < 1:
            raise ValueError("max_agents must be at least 1")
        self.max_agents = max_agents
        self._seen: ScanResult | None = None

    def limit(self, live_here: int) -> int | None:
        """The next scan's limit given ``live_here`` agents running in this runtime; None: no limit."""
        cap = None if self.max_agents is None else max(0, self.max_agents - live_here)
        if self._seen is None:
            share = 1  # first scan: one, until the other workers are seen
        elif not self._seen.holders:
            share = None  # alone, as far as can be seen
        else:
            workers = 1 + len(self._seen.holders)
            total = live_here + sum(self._seen.holders.values()) + 1  # room for one more
            share = max(1, math.ceil(total / workers) - live_here)  # never 0: nothing starves
        if cap is None:
            return share
        return cap if share is None else min(cap, share)

    def observed(self, result: ScanResult) -> None:
        """Remember what the last scan saw."""
        self._seen = result
