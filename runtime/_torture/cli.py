"""``durably torture``: the crash-torture harness from the command line.

    durably torture --store sqlite:///tortured.db --kills 200 --workers 2
    durably torture --store "s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000" --kills 50

Prints the run's summary and every violation; the exit status is 1 when an
invariant broke (or the run could not be carried out), 0 otherwise. Use a
store you can throw away: the harness writes agents into its ``torture`` namespace.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import click

from durably._cli.output import Output
from durably._torture.harness import run_torture
from durably.errors import TortureError
from durably.storage._errors import DurablyError


@click.command()
@click.option("--store", required=True, metavar="URL", help="store URL to torture (one you can throw away)")
@click.option("--kills", type=click.IntRange(1), default=200, show_default=True, help="SIGKILLs of worker processes")
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="worker processes at once; more than 1 adds takeovers between them",
)
@click.option("--agents", type=click.IntRange(1), default=4, show_default=True, help="agents per generation")
@click.option("--steps", type=click.IntRange(1), default=5, show_default=True, help="tool calls per agent")
@click.option("--seed", type=int, help="seed of the crash plans (default: random)")
@click.option("--ledger", type=click.Path(path_type=Path), help="keep the effect and acknowledgement ledgers here")
def torture(
    store: str, kills: int, workers: int, agents: int, steps: int, seed: int | None, ledger: Path | None
) -> int:
    """SIGKILL real agents at every journal boundary and at random moments; check the invariants."""
    out = Output(store_urls=[store])
    try:
        with out.secrets.guarding_logs():
            report = anyio.run(
                lambda: run_torture(
                    store, kills=kills, workers=workers, agents=agents, steps=steps, seed=seed, ledger=ledger
                )
            )
    except (TortureError, DurablyError, ValueError) as exc:
        out.error(exc)
        return 1
    out.line(report.summary())
    for violation in report.violations:
        out.line(f"violation: {violation}")
    return 1 if report.violations else 0


#: The commands this module adds to ``durably`` (see ``durably._cli``).
COMMANDS = [torture]
