"""The ``durably`` command: the demo, and the operator's verbs on a store.

    durably demo                      crash, resume and verify a real agent run
    durably agents                    list the agents of a namespace and their status
    durably approve AGENT APPROVAL    decide an approval (--deny to refuse)
    durably extend AGENT --steps N    raise a suspended agent's budget
    durably cancel AGENT              stop an agent for good
    durably purge AGENT...            delete agents' records, snapshots and blobs (cli_privacy)
    durably sweep --ttl STATUS=30d    purge agents past their time-to-live
    durably reencrypt                 rewrite every frame under the current key ($DURABLY_KEYS)
    durably bench [--quick|--full]    checkpoint throughput suites (durably.bench)
    durably torture --store URL       SIGKILL real agents at every journal boundary, check the invariants
    durably migrate [--dry-run]       rewrite old-version snapshots at the current schema version
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import anyio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from durably.storage.registry import open_store

from . import cli_privacy
from .migrate import migrate_store
from .errors import AgentNotFoundError
from .runtime import Runtime

DEFAULT_STORE = "sqlite:///durably.db"


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=os.environ.get("DURABLY_STORE", DEFAULT_STORE),
                        help="store URL (default: $DURABLY_STORE or %(default)s)")
    parser.add_argument("--namespace", default="default", help="namespace (tenant) of the agents")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="durably", description="Durable execution for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run a real agent, SIGKILL it mid-run, resume it and verify")
    demo.add_argument("--store", default=DEFAULT_STORE, help="store URL (default: %(default)s)")
    demo.add_argument("--out", default="durably-demo", help="folder for the tools' effects (default: %(default)s)")
    demo.add_argument("--seed", type=int, help="seed for the module choice and the crash point")
    demo.add_argument("--modules", type=int, default=24, help="how many stdlib modules to survey (default: %(default)s)")

    from durably.bench.cli import add_arguments as bench_arguments

    bench_arguments(sub.add_parser("bench", help="checkpoint throughput suites, side by side with the limit and peers"))

    from .torture.cli import add_arguments as torture_arguments

    torture_arguments(sub.add_parser("torture", help="SIGKILL real agents at every journal boundary and check the invariants"))
    cli_privacy.add_arguments(sub, _store_args)

    agents = sub.add_parser("agents", help="list agents and their status")
    _store_args(agents)

    approve = sub.add_parser("approve", help="decide an open approval")
    approve.add_argument("agent_id")
    approve.add_argument("approval_id")
    approve.add_argument("--deny", action="store_true", help="refuse instead of approve")
    approve.add_argument("--by", default=os.environ.get("USER", ""), help="who decides (recorded)")
    approve.add_argument("--note", default="")
    _store_args(approve)

    extend = sub.add_parser("extend", help="raise an agent's budget")
    extend.add_argument("agent_id")
    extend.add_argument("--steps", type=int, default=0)
    extend.add_argument("--tokens", type=int, default=0)
    extend.add_argument("--cost-usd", type=float, default=0.0)
    _store_args(extend)

    cancel = sub.add_parser("cancel", help="stop an agent for good")
    cancel.add_argument("agent_id")
    cancel.add_argument("--reason", default="cancelled from the command line")
    _store_args(cancel)

    migrate = sub.add_parser("migrate", help="rewrite snapshots written at an older schema version")
    migrate.add_argument("--dry-run", action="store_true", help="only report which streams would change and how")
    _store_args(migrate)
    return parser


async def _migrate(args: argparse.Namespace, console: Console) -> int:
    async with open_store(args.store) as store:
        reports = await migrate_store(store, args.namespace, dry_run=args.dry_run)
    for report in reports:
        console.print(report.describe(dry_run=args.dry_run), markup=False, highlight=False, soft_wrap=True)
    changed = sum(r.changes for r in reports)
    verb = "would change" if args.dry_run else "changed"
    console.print(f"{len(reports)} streams in namespace {args.namespace!r}; {changed} {verb}", markup=False,
                  highlight=False, soft_wrap=True)
    return 1 if any(r.problems for r in reports) else 0


async def _operate(args: argparse.Namespace, console: Console) -> None:
    async with Runtime(args.store, namespace=args.namespace, encryption=cli_privacy.encryption_from_env()) as rt:
        if args.command == "agents":
            states = await rt.agents()
            if not states:
                console.print(f"no agents in namespace {args.namespace!r} of {args.store} "
                              "(each namespace is separate: the demo's is 'demo')", markup=False)
                return
            running = any(state.status == "running" for state in states)
            table = Table("agent", "definition", "status", "seq", "steps", "reason",
                          title=escape(f"agents in namespace {args.namespace!r} of {args.store}"),
                          caption="running: runnable; any runtime with its definition registered resumes it"
                          if running else None)
            for state in states:
                # Everything here may quote a model, a tool or a user: shown as text, never as markup.
                cells = [state.agent_id, state.definition.get("name", ""), state.status, str(state.last_seq),
                         str(state.usage["steps"]), _reason(state)]
                table.add_row(*(escape(cell) for cell in cells))
            console.print(table)
            return
        if args.command == "approve":
            state = await rt.approve(args.agent_id, args.approval_id, approved=not args.deny,
                                     by=f"{args.by} (pid {os.getpid()})", note=args.note)
            verdict = "denied" if args.deny else "approved"
        elif args.command == "extend":
            state = await rt.extend_budget(args.agent_id, steps=args.steps, tokens=args.tokens, cost_usd=args.cost_usd)
            verdict = "budget extended"
        else:
            state = await rt.cancel(args.agent_id, args.reason)
            verdict = "cancelled"
        hint = " (a worker with its definition registered resumes it)" if state.status == "running" else ""
        console.print(f"{args.agent_id}: {verdict} at seq {state.last_seq}; status now {state.status}{hint}",
                      markup=False, soft_wrap=True)


def _reason(state) -> str:
    """The status reason, with what each open approval would run: the operator sees what they approve."""
    asks = [f"{a['approval_id']}: {a['tool']}({json.dumps(a['arguments'], sort_keys=True, default=str)})"
            for a in state.open_approvals()]
    return "; ".join([state.reason, *asks]) if asks else state.reason


def _require_database(url: str) -> None:
    """Operator verbs read an existing store: refuse to create an empty SQLite file by mistake."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite" and not Path(unquote(parts.path[1:])).exists():
        raise AgentNotFoundError(f"no durably database at {unquote(parts.path[1:])!r}: pass --store URL or set $DURABLY_STORE")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``durably`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    console = Console()
    if args.command == "bench":
        from durably.bench.cli import run as run_bench

        return run_bench(args, console)
    if args.command == "torture":
        from .torture.cli import run as run_torture

        return run_torture(args, console)
    if args.command == "demo":
        from .demo.run import run_demo

        return run_demo(args.store, Path(args.out), args.seed, args.modules, console)
    try:
        _require_database(args.store)
        if args.command in cli_privacy.COMMANDS:
            return cli_privacy.run(args, console)
        if args.command == "migrate":
            return anyio.run(_migrate, args, console)
        anyio.run(_operate, args, console)
    except Exception as exc:  # operator-facing: one clear line, typed errors carry the detail
        from durably.storage.errors import DurablyError

        if not isinstance(exc, DurablyError):
            raise
        console.print(f"[red]error:[/] {escape(f'{type(exc).__name__}: {exc}')}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
