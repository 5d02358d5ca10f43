"""``durably torture``: the crash-torture harness from the command line.

    durably torture --store sqlite:///tortured.db --kills 200 --workers 2
    durably torture --store "s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000" --kills 50

Prints the run's summary and every violation; the exit status is 1 when an
invariant broke, 0 otherwise. Use a store you can throw away: the harness
writes agents into its ``torture`` namespace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
from rich.console import Console

from .harness import run_torture


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The torture options, for ``durably torture`` or a parser of your own."""
    parser.add_argument("--store", required=True, help="store URL to torture (one you can throw away)")
    parser.add_argument("--kills", type=int, default=200, help="SIGKILLs of worker processes (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes at once; more than 1 adds takeovers (default: %(default)s)")
    parser.add_argument("--agents", type=int, default=4, help="agents per generation (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=5, help="tool calls per agent (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="seed of the crash plans (default: random)")
    parser.add_argument("--ledger", type=Path, help="keep the effect and acknowledgement ledgers in this folder")


def run(args: argparse.Namespace, console: Console) -> int:
    """Run the harness with ``args``; print the report; 1 if an invariant broke, else 0."""
    report = anyio.run(lambda: run_torture(args.store, kills=args.kills, workers=args.workers, agents=args.agents,
                                           steps=args.steps, seed=args.seed, ledger=args.ledger))
    console.print(report.summary(), markup=False, soft_wrap=True)
    for violation in report.violations:
        console.print(f"violation: {violation}", markup=False, soft_wrap=True)
    return 1 if report.violations else 0
