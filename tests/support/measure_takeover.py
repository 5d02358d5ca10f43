"""Measure: a worker SIGKILLed under another hostname, its agents resumed elsewhere: p50/p95 seconds.

    python tests/support/measure_takeover.py [--agents 40] [--store postgres|sqlite] [--runs 3]

Worker A runs in a UTS namespace with its own hostname (``unshare --uts``, as
root: what every container has), so no process check on B's host can see it
die: before heartbeats only its lease's expiry freed its agents (27.9 s median
at the default 30 s TTL). A runs ``--agents`` agents (steps of 0.2 s, forever);
worker B serves the same store; A is SIGKILLed; the figure per agent is the
time from the kill until B began a step of it (its resume, the tool's
reconciliation and the next model step included: an upper bound of the
takeover). Leases last ``--ttl`` (default 30 s, the ``Runtime`` default);
``--heartbeat-timeout`` is the workers' (default 5 s, the default). Not a
test (it takes a minute and needs root): CI runs the short versions in
``tests/fleet/test_worker_command.py``.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_processes import can_change_hostname, run_then_lose, submit
from pg_server import PostgresTestServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=40)
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=5.0)
    args = parser.parse_args()
    if not can_change_hostname():
        print("needs root and unshare --uts", file=sys.stderr)
        return 2
    server = PostgresTestServer().start() if args.store == "postgres" else None
    delays: list[float] = []
    try:
        for run in range(args.runs):
            folder = Path(tempfile.mkdtemp(prefix="durably-takeover-"))
            url = server.url() if server is not None else f"sqlite:///{folder}/agents.db"
            submit(url, folder, ["warm-up"], steps=1)

            def kill(worker) -> None:
                worker.send_signal(signal.SIGKILL)
                worker.wait()

            these = sorted(
                run_then_lose(
                    url,
                    folder,
                    kill,
                    args.agents,
                    hostname="another-host",
                    timeout=args.heartbeat_timeout,
                    ttl=args.ttl,
                ).values()
            )
            delays += these
            print(f"run {run + 1}: {len(these)} agents, first {these[0]:.2f} s, last {these[-1]:.2f} s", flush=True)
    finally:
        if server is not None:
            server.cleanup()
    cuts = statistics.quantiles(delays, n=20)
    print(
        f"{args.store}, {args.agents} agents x {args.runs} runs, heartbeat timeout {args.heartbeat_timeout:g} s, "
        f"lease TTL {args.ttl:g} s: p50 {statistics.median(delays):.2f} s, p95 {cuts[18]:.2f} s, "
        f"max {max(delays):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
