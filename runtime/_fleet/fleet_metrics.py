"""The fleet's measurements taken at resumes and scans: approval latencies, resume backlog, agents by status.

Approval wait (request to decision) and approve-to-resume (decision to the
activation that acts on it) come from the records' own timestamps, read once
by the first activation after a decision: the last ``WINDOW`` records before
and including its ``resumed`` record. A decision older than that window (a
long conversation since) is not measured. Only that first activation
measures: a later one (the first crashed before acting) finds an activation
record between the decision and its own and measures nothing.

A serving worker sets the resume backlog (runnable agents its last scan listed
and did not start: its share was full) after every scan, and the agents by
status from the status index at most every ``STATUS_EVERY`` seconds (a
listing of the whole namespace).

Measuring never fails a resume or a scan: a store error here is logged at
DEBUG and the measurement skipped.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from durably import _telemetry as tm
from durably._journal.status_index import index_store
from durably.schemas._records import Kind, Record
from durably.storage._spi import StreamId

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.scan import ScanResult

log = logging.getLogger("durably.telemetry")

#: Records read back by an activation to find the approval records it acts on.
WINDOW = 32
#: Least seconds between two counts of the agents by status.
STATUS_EVERY = 30.0
#: The status of an index row without an entry (a restore will tell).
UNINDEXED = "unindexed"
_ACTIVATIONS = frozenset({Kind.STARTED, Kind.RESUMED, Kind.RETRIED, Kind.FORKED})


async def observe_approvals(activations: Activations, stream: StreamId, resumed_seq: int) -> None:
    """Record the approval wait and approve-to-resume latency of the decisions the
    activation whose ``resumed`` record is ``resumed_seq`` is the first to act on."""
    metrics = activations.telemetry.metrics
    if metrics is None:
        return
    try:
        records = [
            activations.codec.decode_record(stored, stream)
            async for stored in activations.store.read(stream, max(resumed_seq - WINDOW, 0))
            if stored.seq <= resumed_seq
        ]
    except Exception as exc:  # a measurement, never a reason to fail the agent
        log.debug("approval latency of %s not measured: %s", stream, exc)
        return
    for waited, acted in approval_latencies(records):
        if waited is not None:
            metrics.approval_wait.record(waited, activations.telemetry.fleet_attributes)
        metrics.approval_resume.record(acted, activations.telemetry.fleet_attributes)


def approval_latencies(records: list[Record]) -> list[tuple[float | None, float]]:
    """``(wait, resume)`` seconds for each decision between the last two activation
    records of ``records`` (the last one being the activation measured); ``wait``
    is None when the request is not among ``records``."""
    if not records or records[-1].kind not in _ACTIVATIONS:
        return []
    resumed = records[-1]
    requested: dict[str, float] = {}
    decided: list[tuple[str, float]] = []
    for record in records[:-1]:
        if record.kind in _ACTIVATIONS:
            decided = []  # an earlier activation was the first after these
        elif record.kind == Kind.APPROVAL_REQUESTED:
            requested[record.data["approval_id"]] = record.at
        elif record.kind == Kind.APPROVAL_DECIDED:
            decided.append((record.data["approval_id"], record.at))
    return [
        (at - requested[approval] if approval in requested else None, max(resumed.at - at, 0.0))
        for approval, at in decided
    ]


class ScanObserver:
    """Sets the resume backlog after each scan and, now and then, the agents by status."""

    def __init__(self, activations: Activations) -> None:
        self._activations = activations
        self._counted_at: float | None = None
        self._statuses: set[str] = set()

    async def scanned(self, result: ScanResult) -> None:
        """Record what the scan ``result`` left waiting, and the statuses when they are due."""
        telemetry = self._activations.telemetry
        if telemetry.metrics is None:
            return
        telemetry.metrics.resume_backlog.set(result.unvisited, telemetry.fleet_attributes)
        now = time.monotonic()
        if self._counted_at is not None and now - self._counted_at < STATUS_EVERY:
            return
        self._counted_at = now
        try:
            counts = await agents_by_status(self._activations)
        except Exception as exc:  # a measurement, never a reason to stop serving
            log.debug("agents by status not counted: %s", exc)
            return
        if counts is None:
            return
        for status in self._statuses - counts.keys():
            counts[status] = 0  # a status nobody has any more reads 0, not its last count
        self._statuses = set(counts)
        for status, count in counts.items():
            telemetry.metrics.agents.set(count, {**telemetry.fleet_attributes, tm.STATUS: status})


async def agents_by_status(activations: Activations) -> Counter[str] | None:
    """How many agents of the namespace the status index gives each status (rows
    without an entry as ``unindexed``); None when the store has no index."""
    found = index_store(activations.store)
    if found is None:
        return None
    counts: Counter[str] = Counter()
    async for row in found.list_index(activations.namespace, None):
        counts[row.entry.status if row.entry is not None else UNINDEXED] += 1
    return counts
