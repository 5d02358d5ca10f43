"""``durably bench``: run the suites with a progress bar, print the tables, write --json.

durably bench --quick                          every suite, small, under a minute
durably bench                                  the 1,000-step conversation, LangGraph on it
durably bench --full --json bench.json         adds 10,000 steps and 100,000-record restore
durably bench --store sqlite:///my.db --suite append --suite restore
durably bench --plot charts/                   charts of the run (pip install 'durably[plot]')
durably bench --plot charts/ --from bench.json charts of an earlier run, without running one
durably bench --local-s3 --suite agent-steps   on the bench's own S3 server, requests counted there
durably bench --from bench.json --markdown     the README's figures tables of an earlier run, in Markdown
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from durably.errors import InvalidArgumentError

from .context import MODES
from .report import print_report, write_json
from .runner import run_bench
from .suites import SUITES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench options, for ``durably bench`` or a parser of your own."""
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--quick", action="store_const", const="quick", dest="mode", help="small sizes, under a minute")
    length.add_argument(
        "--full",
        action="store_const",
        const="full",
        dest="mode",
        help="adds the 10,000-step conversation, the 100,000-record restore, "
        "1,000 agents at once and the 100,000-agent scan",
    )
    parser.set_defaults(mode="medium")
    parser.add_argument(
        "--store", default=None, help="store URL to measure (default: a temporary SQLite file, synchronous=FULL)"
    )
    parser.add_argument(
        "--suite",
        action="append",
        choices=list(SUITES),
        dest="suites",
        help="run only this suite (repeatable; default: all)",
    )
    parser.add_argument("--json", type=Path, dest="json_path", help="write every figure to this JSON file")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default: %(default)s)")
    parser.add_argument(
        "--plot",
        type=Path,
        dest="plot_dir",
        metavar="DIR",
        help="write PNG charts of the run into DIR (needs the 'plot' extra: matplotlib)",
    )
    parser.add_argument(
        "--from",
        type=Path,
        dest="from_json",
        metavar="JSON",
        help="with --plot or --markdown: use this earlier --json file instead of running the bench",
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the README's figures tables (headline figures, limits, targets) in Markdown",
    )
    parser.add_argument(
        "--local-s3",
        action="store_true",
        dest="local_s3",
        help="run a local S3-compatible server on 127.0.0.1 (moto) and measure s3:// on it; "
        "requests per step are counted at that server (needs the 'bench-s3' extra)",
    )


class _RichProgress:
    """Adapts rich's ``Progress`` to the suites' ``start``/``advance``."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def start(self, description: str, total: int) -> Any:
        return self._progress.add_task(description, total=total)

    def advance(self, task: Any, amount: int = 1) -> None:
        self._progress.advance(task, amount)


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run the bench for parsed ``args`` (or, with ``--from``, only chart or tabulate a saved
    run); returns the exit status: 0, 1 when a suite failed (the others ran, and their
    figures are printed and written), 2 for options that do not go together or a file
    that is not a bench run."""
    console = console or Console()
    if args.from_json is not None:
        if args.plot_dir is None and not args.markdown:
            console.print("--from needs --plot DIR or --markdown")
            return 2
        try:
            doc = _saved_run(args.from_json)
            if args.markdown:
                _markdown(doc, console)
        except InvalidArgumentError as exc:
            console.print(str(exc), markup=False)
            return 2
        return 0 if args.plot_dir is None else _plot(doc, args.plot_dir, console)
    suites = args.suites or list(SUITES)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with contextlib.ExitStack() as stack:
        store, requests = args.store, None
        if args.local_s3:
            from .s3_server import BenchS3Server

            server = stack.enter_context(BenchS3Server())
            store, requests = server.url(args.store), server.counts
        with Progress(*columns, console=console, transient=False) as bar:
            results = anyio.run(
                lambda: run_bench(
                    store,
                    suites,
                    MODES[args.mode],
                    mode=args.mode,
                    seed=args.seed,
                    progress=_RichProgress(bar),
                    argv=sys.argv[1:],
                    requests=requests,
                    keep_going=True,
                )
            )
    print_report(results, console)
    if args.json_path:
        write_json(results, args.json_path)
        console.print(f"wrote {args.json_path}")
    if args.markdown:
        _markdown(results.to_json(), console)
    if args.plot_dir is not None:
        _plot(results.to_json(), args.plot_dir, console)
    if results.failed:
        console.print(f"failed: {', '.join(results.failed)} (see the notes)", markup=False)
        return 1
    return 0


def _saved_run(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a ``--json`` file); ``InvalidArgumentError`` naming the
    file when it cannot be read, holds no JSON object, or lacks the fields of a bench run
    (``--plot`` and ``--markdown`` read the same ones)."""
    from .markdown import results_from_json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgumentError(f"{path}: not a durably bench --json file ({exc})") from exc
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"{path}: not a durably bench --json file (a JSON {type(doc).__name__})")
    try:
        results_from_json(doc)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{path}: {exc}") from exc
    return doc


def _markdown(doc: dict[str, Any], console: Console) -> None:
    from .markdown import markdown

    console.print(markdown(doc), markup=False, highlight=False, soft_wrap=True, end="")


def _plot(doc: dict[str, Any], folder: Path, console: Console) -> int:
    from .plot import plot

    for path in plot(doc, folder):
        console.print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m durably.bench.cli``: the same as ``durably bench``."""
    parser = argparse.ArgumentParser(prog="durably bench", description="Checkpoint throughput suites.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
