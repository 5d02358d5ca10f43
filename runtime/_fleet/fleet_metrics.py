"""The fleet's measurements taken at resumes and scans: approval latencies, resume backlog, agents by status.

Approval wait (request to decision) and approve-to-resume (decision to the
activation that acts on it) come from the records' own timestamps, seen once
by the first activation after a decision: the last ``WINDOW`` records before
and including its ``resumed`` record (those its restore decoded, when they
cover the window; else read again, ``observe_approvals``). A decision older than that window (a
long conversation since) is not measured. Only that first activation
measures: a later one (the first crashed before acting) finds an activation
record between the decision and its own and measures nothing.

A serving worker sets the resume backlog (agents the status index says are
running that no worker holds a lease of, and not live here: runnable, not
started) and the agents by status, from one listing of the whole status index
after a scan, at most every ``STATUS_EVERY`` seconds. A store without a status
index reports neither.

Measuring never fails a resume or a scan: a store error here is logged at
DEBUG and the measurement skipped.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping

from durably import _telemetry as tm
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import RECENT
from durably._journal.status_index import index_store
from durably._loop.state import RUNNING
from durably.schemas._records import Kind, Record
from durably.storage._spi import Store, StreamId, supports_leases

log = logging.getLogger("durably.telemetry")

#: Records an activation looks at to find the approval records it acts on (its restore keeps as many).
WINDOW = RECENT
#: Least seconds between two counts of the agents by status.
STATUS_EVERY = 30.0
#: The status of an index row without an entry (a restore will tell).
UNINDEXED = "unindexed"
_ACTIVATIONS = frozenset({Kind.STARTED, Kind.RESUMED, Kind.RETRIED, Kind.FORKED})


async def observe_approvals(
    store: Store, codec: RecordCodec, telemetry: tm.Telemetry, stream: StreamId, resumed_seq: int
) -> None:
    """Record the approval wait and approve-to-resume latency of the decisions the
    activation whose ``resumed`` record (in ``stream``) is ``resumed_seq`` is the first to act on."""
    metrics = telemetry.metrics
    if metrics is None:
        return
    try:
        reader = JournalReader(store, codec, stream)
        records = [record async for record in reader.records(max(resumed_seq - WINDOW, 0), upto=resumed_seq)]
    except Exception as exc:  # a measurement, never a reason to fail the agent
        log.debug("approval latency of %s not measured: %s", stream, exc)
        return
    record_approvals(telemetry, records)


def record_approvals(telemetry: tm.Telemetry, records: list[Record]) -> None:
    """Record the approval latencies of ``records``: up to ``WINDOW`` records ending with an
    activation's record, as ``approval_latencies`` takes them (nothing without metrics)."""
    metrics = telemetry.metrics
    if metrics is None:
        return
    for waited, acted in approval_latencies(records):
        if waited is not None:
            metrics.approval_wait.record(waited, telemetry.fleet_attributes)
        metrics.approval_resume.record(acted, telemetry.fleet_attributes)


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
    """After a serving worker's scans of ``namespace``, now and then (every
    ``STATUS_EVERY`` seconds), set its resume backlog and the agents by status.

    ``live``: the agents running in this worker, by id.
    """

    def __init__(self, store: Store, namespace: str, telemetry: tm.Telemetry, live: Mapping[str, object]) -> None:
        self._store, self._namespace, self._telemetry, self._live = store, namespace, telemetry, live
        self._counted_at: float | None = None
        self._statuses: set[str] = set()

    async def scanned(self) -> None:
        """Take the measurements when they are due (never raises; a store error skips them)."""
        metrics = self._telemetry.metrics
        now = time.monotonic()
        if metrics is None or (self._counted_at is not None and now - self._counted_at < STATUS_EVERY):
            return
        self._counted_at = now
        try:
            found = await count_index(self._store, self._namespace, self._live)
        except Exception as exc:  # a measurement, never a reason to stop serving
            log.debug("backlog and agents by status not counted: %s", exc)
            return
        if found is None:
            return
        counts, backlog = found
        attributes = self._telemetry.fleet_attributes
        metrics.resume_backlog.set(backlog, attributes)
        for status in self._statuses - counts.keys():
            counts[status] = 0  # a status nobody has any more reads 0, not its last count
        self._statuses = set(counts)
        for status, count in counts.items():
            metrics.agents.set(count, {**attributes, tm.STATUS: status})


async def count_index(store: Store, namespace: str, live: Mapping[str, object]) -> tuple[Counter[str], int] | None:
    """From the status index of ``namespace``: how many agents have each status (rows
    without an entry as ``unindexed``), and the backlog: agents it says ``running``
    that are not in ``live`` and whose lease is free (held by nobody, or lapsed).
    None when ``store`` has no index. Reads one lease per running agent not live here."""
    found = index_store(store)
    if found is None:
        return None
    leases = store if supports_leases(store) else None
    counts: Counter[str] = Counter()
    backlog = 0
    async for row in found.list_index(namespace, None):
        status = row.entry.status if row.entry is not None else UNINDEXED
        counts[status] += 1
        if status != RUNNING or row.stream.agent_id in live:
            continue
        held = await leases.get_lease(row.stream) if leases is not None else None
        backlog += held is None or held.expires_at <= time.time()
    return counts, backlog
