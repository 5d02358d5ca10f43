"""burst: 1,000 agents parked at an approval, all approved at once; and a killed worker's takeover.

``sizes.burst_agents`` agents park at their approval; then for each count of
``sizes.burst_workers`` worker processes (``durably worker``, polling every
``POLL_INTERVAL`` seconds; on PostgreSQL a command also wakes them through
LISTEN/NOTIFY) an operator approves every agent at once (see
``durably.bench.burst``). Figures, seconds from the first approval sent:

* ``burst_approved``: the last approval acknowledged;
* ``burst_resumed``: the last agent's ``resumed`` record;
* ``burst_resumed_after_approved``: ``burst_resumed`` less ``burst_approved``
  (the target: one worker, 1,000 agents, SQLite, <= 2 s);
* ``burst_finished``: the last agent's ``finished`` record;
* ``burst_lag_p50`` / ``burst_lag_p95``: each agent's decision to its resume;
* ``burst_resumes_per_s``: agents over ``burst_resumed``;
* ``burst_worker_cpu_per_agent``: CPU the worker processes used from the
  first approval to the last finish, per agent (resume and the agent's own
  steps), ms: a figure the machine's load does not change much;
* ``burst_worker_cpu_wait``: seconds the workers' threads were runnable but
  waiting for a CPU meanwhile (summed over threads): when it is several times
  the CPU used, the burst is bound by the CPU the machine gives the workers.

Then ``takeover``: ``sizes.takeover_agents`` agents held by a worker inside a
tool, a second worker beside it, the first SIGKILLed: ``takeover_p50`` /
``takeover_p95`` from the kill to each agent's ``resumed`` record by the
survivor, with a ``HEARTBEAT_TIMEOUT``-second heartbeat timeout. Both
workers run on this host, where a holder's dead pid is seen at once: a
worker on another host is noticed only when its heartbeat stops
(``HEARTBEAT_TIMEOUT`` seconds), which this figure does not include.
"""

from __future__ import annotations

from typing import Any

from .. import burst
from ..context import Bench
from ..results import percentile

SUITE = "burst"
#: Seconds between a worker's scans (a store without change notifications finds approvals by them).
POLL_INTERVAL = 0.25
#: Seconds after its last heartbeat a worker is declared dead in the takeover.
HEARTBEAT_TIMEOUT = 3.0


async def run(bench: Bench) -> None:
    """Each burst (1 and 2 workers), then the takeover; on stores with a status index only."""
    r, sizes = bench.results, bench.sizes
    if not (bench.is_sqlite or bench.is_postgres):
        r.note("burst: needs a store several processes share, with a status index (sqlite://, postgresql://)")
        return
    task = bench.progress.start(
        f"burst: {sizes.burst_agents:,} approved at once, by {'/'.join(map(str, sizes.burst_workers))} workers",
        len(sizes.burst_workers) + (1 if sizes.takeover_agents else 0),
    )
    logs = bench.scratch / f"burst-{bench.run_id}"
    logs.mkdir(parents=True, exist_ok=True)
    for workers in sizes.burst_workers:
        found = await burst.burst(
            bench.store,
            bench.namespace(SUITE, workers),
            sizes.burst_agents,
            workers,
            logs,
            poll_interval=POLL_INTERVAL,
        )
        params: dict[str, Any] = {"agents": found.agents, "workers": workers, "poll_interval": POLL_INTERVAL}
        r.add(SUITE, "burst_approved", found.approved, "s", **params)
        r.add(SUITE, "burst_resumed", found.resumed, "s", **params)
        r.add(SUITE, "burst_resumed_after_approved", max(found.resumed - found.approved, 0.0), "s", **params)
        r.add(SUITE, "burst_finished", found.finished, "s", **params)
        r.add(SUITE, "burst_lag_p50", found.lag_p50, "s", **params)
        r.add(SUITE, "burst_lag_p95", found.lag_p95, "s", **params)
        r.add(SUITE, "burst_resumes_per_s", found.agents / found.resumed, "agents/s", **params)
        r.add(SUITE, "burst_busiest_worker", max(found.by_worker.values()), "agents", **params)
        if found.cpu is not None and found.cpu_wait is not None:  # Linux /proc only
            r.add(SUITE, "burst_worker_cpu_per_agent", found.cpu * 1000 / found.agents, "ms", **params)
            r.add(SUITE, "burst_worker_cpu_wait", found.cpu_wait, "s", **params)
        bench.progress.advance(task)
    if sizes.takeover_agents:
        taken = await burst.takeover(
            bench.store,
            bench.namespace(SUITE, "takeover"),
            sizes.takeover_agents,
            logs,
            poll_interval=POLL_INTERVAL,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
        )
        params = {"agents": taken.agents, "heartbeat_timeout": HEARTBEAT_TIMEOUT, "poll_interval": POLL_INTERVAL}
        r.add(SUITE, "takeover_p50", percentile(taken.lag, 50), "s", **params)
        r.add(SUITE, "takeover_p95", percentile(taken.lag, 95), "s", **params)
        bench.progress.advance(task)
