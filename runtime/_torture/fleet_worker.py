"""One serving worker of the fleet torture: ``Runtime.serve()`` on the shared store until SIGTERM drains it.

``fleet_worker_main(spec, error_path, ready)`` runs in a process the fleet harness
started: it opens the store (wrapped in a ``LedgeredStore`` that logs every
acknowledged append with its fencing token, and every lease grant and release,
to fsynced ledgers), registers the fleet agent and serves. A SIGTERM drains it
and it exits 0; any other exit is something the judge reports.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import traceback
from pathlib import Path
from typing import Any

import anyio

from durably._runtime import Runtime
from durably._torture.fleet_agents import FLEET_NAMESPACE, fleet_definition
from durably._torture.ledgered_store import LedgeredStore
from durably.storage._registry import open_store
from durably.storage._torture import Ledger


async def serve_fleet(spec: dict[str, Any], terminated: threading.Event | None = None) -> None:
    """Serve ``spec``'s store (URL, ledger directory, worker id, steps, lease ttl, poll interval) until drained.

    ``terminated`` set (a SIGTERM came before ``serve()`` handled it): return once the runtime is up, serving nothing.
    """
    ledger = Path(spec["ledger"])
    definition = fleet_definition(spec["steps"], Ledger(ledger / "effects.jsonl"))
    store = LedgeredStore(
        open_store(spec["store"]),
        Ledger(ledger / "acks.jsonl"),
        spec["worker"],
        lambda boundary: None,
        grants=Ledger(ledger / "grants.jsonl"),
    )
    async with (
        store,
        Runtime(store, agents=[definition], namespace=FLEET_NAMESPACE, lease_ttl=spec["lease_ttl"]) as rt,
    ):
        if terminated is None or not terminated.is_set():
            await rt.serve(spec["poll_interval"], drain_timeout=spec["drain_timeout"])


def fleet_worker_main(spec: dict[str, Any], error_path: str, ready: Any = None) -> None:
    """A fleet worker process's entry: serve ``spec``; on an error, its traceback to ``error_path``.

    ``ready`` (a multiprocessing Event, or None) is set once a SIGTERM would drain this worker.
    """
    # Fenced activations and lost leases are what the chaos makes: not news here.
    logging.getLogger("durably").setLevel(logging.CRITICAL)
    os.environ.clear()
    os.environ.update(spec["environ"])
    # A SIGTERM while the runtime starts is a drain of nothing, not a death by the OS default;
    # ``serve()`` handles the later ones.
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    if ready is not None:
        ready.set()
    try:
        anyio.run(serve_fleet, spec, terminated)
    except BaseException:
        Path(error_path).write_text(traceback.format_exc())
        raise
