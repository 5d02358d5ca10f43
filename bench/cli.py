"""``durably bench``: run the suites with a progress bar, print the tables, write --json.

    durably bench --quick                          every suite, small, under a minute
    durably bench                                  the 1,000-step conversation, LangGraph on it
    durably bench --full --json bench.json         adds 10,000 steps and 100,000-record restore
    durably bench --store sqlite:///my.db --suite append --suite restore
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .context import MODES
from .report import print_report, write_json
from .runner import run_bench
from .suites import SUITES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench options, for ``durably bench`` or a parser of your own."""
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--quick", action="store_const", const="quick", dest="mode", help="small sizes, under a minute")
    length.add_argument("--full", action="store_const", const="full", dest="mode",
                        help="adds the 10,000-step conversation and the 100,000-record restore")
    parser.set_defaults(mode="medium")
    parser.add_argument("--store", default=None,
                        help="store URL to measure (default: a temporary SQLite file, synchronous=FULL)")
    parser.add_argument("--suite", action="append", choices=list(SUITES), dest="suites",
                        help="run only this suite (repeatable; default: all)")
    parser.add_argument("--json", type=Path, dest="json_path", help="write every figure to this JSON file")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default: %(default)s)")


class _RichProgress:
    """Adapts rich's ``Progress`` to the suites' ``start``/``advance``."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def start(self, description: str, total: int) -> Any:
        return self._progress.add_task(description, total=total)

    def advance(self, task: Any, amount: int = 1) -> None:
        self._progress.advance(task, amount)


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run the bench for parsed ``args``; returns the exit status (0)."""
    console = console or Console()
    suites = args.suites or list(SUITES)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        results = anyio.run(lambda: run_bench(args.store, suites, MODES[args.mode], mode=args.mode, seed=args.seed,
                                              progress=_RichProgress(bar), argv=sys.argv[1:]))
    print_report(results, console)
    if args.json_path:
        write_json(results, args.json_path)
        console.print(f"wrote {args.json_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m durably.bench.cli``: the same as ``durably bench``."""
    parser = argparse.ArgumentParser(prog="durably bench", description="Checkpoint throughput suites.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
