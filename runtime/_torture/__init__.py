"""Crash torture: a real agent in worker processes, SIGKILLed at random moments and at every journal boundary.

    report = await run_torture("sqlite:///tortured.db", kills=200, workers=2)
    assert not report.violations, report.violations

``durably torture --store URL [--kills N] [--workers K]`` runs it from the
command line; ``TortureConformance`` (``durably._torture.testing``) is
its pytest entry for an adapter's test suite. The invariants, checked from
external fsynced ledgers of effects and acknowledgements: the final state
equals an uninterrupted run, no effect happens twice under ``reconcile`` or
``fail``, no acknowledged record is lost, nothing is stuck. The storage half
(the ledger, a storage-level SIGKILLed writer) is ``durably.storage._torture``.

The fleet mode, ``run_fleet_torture`` (``durably torture --fleet``), runs
serving workers side by side under SIGKILL, SIGSTOP past the lease, SIGTERM
and database restarts, with an operator approving as agents park; its judge
(``fleet_invariants``) checks that no two activations of an agent overlap,
every effect happens once, every acknowledged approval is acted on, no worker
exits and nothing is stuck.
"""

from durably._torture.fleet import FleetReport, run_fleet_torture
from durably._torture.harness import TortureReport, run_torture

__all__ = ["FleetReport", "TortureReport", "run_fleet_torture", "run_torture"]
