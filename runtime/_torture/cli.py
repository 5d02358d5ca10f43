"""``durably torture``: the crash-torture harness from the command line.

    durably torture --store sqlite:///tortured.db --kills 200 --workers 2
    durably torture --store "s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000" --kills 50
    durably torture --fleet --store sqlite:///fleet.db --workers 4 --agents 2000
    durably torture --fleet --store sqlite:///fleet.db --agents 20000 --steps 2 --chaos-interval 3 --timeout 3600

``--fleet`` runs the fleet mode instead (``durably._torture.fleet``): serving
workers under SIGKILL, SIGSTOP past the lease and SIGTERM, an operator
approving as agents park; ``--kills`` does not apply to it, and ``--chaos-interval``
and ``--timeout`` apply to it alone. Database restarts
are in the Python API only (``run_fleet_torture(restart_database=...)``): the
command cannot know how your database is run.

Prints the run's summary and every violation; the exit status is 1 when an
invariant broke (or the run could not be carried out), 0 otherwise. A fleet run
in which the chaos loop dealt no fault (every agent finished first) also exits 1:
it tested nothing, and a CI job gating on the exit status must not count it as a
pass. Use a store you can throw away: the harness writes agents into its
``torture`` namespace.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import click

from durably._cli.output import Output
from durably._torture.fleet import FleetReport, run_fleet_torture
from durably._torture.harness import TortureReport, run_torture
from durably.errors import TortureError
from durably.storage._errors import DurablyError


@click.command()
@click.option("--store", required=True, metavar="URL", help="store URL to torture (one you can throw away)")
@click.option(
    "--kills",
    type=click.IntRange(1),
    default=200,
    show_default=True,
    help="SIGKILLs of worker processes; ignored by --fleet, whose chaos loop deals faults until every agent finished",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    help="worker processes at once; more than 1 adds takeovers between them  [default: 1; --fleet: 4]",
)
@click.option("--agents", type=click.IntRange(1), help="agents per generation  [default: 4; --fleet: 200 in all]")
@click.option("--fleet", is_flag=True, help="fleet mode: serving workers, an operator approving, chaos")
@click.option("--steps", type=click.IntRange(1), default=5, show_default=True, help="tool calls per agent")
@click.option("--seed", type=int, help="seed of the crash plans (default: random)")
@click.option("--ledger", type=click.Path(path_type=Path), help="keep the effect and acknowledgement ledgers here")
@click.option(
    "--chaos-interval",
    type=click.FloatRange(0.1),
    metavar="SECONDS",
    help="--fleet: a fault about every SECONDS  [default: 1.0]",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1.0),
    metavar="SECONDS",
    help="--fleet: time for every agent to finish; past it the rest are reported stuck  [default: 600]",
)
def torture(
    store: str,
    kills: int,
    workers: int | None,
    agents: int | None,
    fleet: bool,
    steps: int,
    seed: int | None,
    ledger: Path | None,
    chaos_interval: float | None,
    timeout: float | None,
) -> int:
    """SIGKILL real agents at every journal boundary and at random moments; check the invariants."""
    out = Output(store_urls=[store])
    if not fleet and (chaos_interval is not None or timeout is not None):
        raise click.UsageError("--chaos-interval and --timeout apply to --fleet only")
    report: TortureReport | FleetReport
    try:
        with out.secrets.guarding_logs():
            if fleet:
                report = anyio.run(
                    lambda: run_fleet_torture(
                        store,
                        workers=workers or 4,
                        agents=agents or 200,
                        steps=steps,
                        seed=seed,
                        ledger=ledger,
                        chaos_interval=chaos_interval or 1.0,
                        timeout=timeout or 600.0,
                    )
                )
            else:
                report = anyio.run(
                    lambda: run_torture(
                        store,
                        kills=kills,
                        workers=workers or 1,
                        agents=agents or 4,
                        steps=steps,
                        seed=seed,
                        ledger=ledger,
                    )
                )
    except (TortureError, DurablyError, ValueError) as exc:
        out.error(exc)
        return 1
    out.line(report.summary())
    for violation in report.violations:
        out.line(f"violation: {violation}")
    invalid = isinstance(report, FleetReport) and report.tested_nothing
    return 1 if report.violations or invalid else 0


#: The commands this module adds to ``durably`` (see ``durably._cli``).
COMMANDS = [torture]
