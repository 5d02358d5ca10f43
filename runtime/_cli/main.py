"""The ``durably`` command (click): the demo, reading agents, operating them, and the store's upkeep.

    durably demo                         crash, resume and verify a real agent run
    durably agents [--status S ...]      the agents of a namespace, last active first
    durably show AGENT                   status and why, lease holder, approvals, budget, times
    durably history AGENT                the journal, one line per record (--payload: the data)
    durably state AGENT --at SEQ         the folded state at a seq (time travel)
    durably approve AGENT APPROVAL       decide an approval (--deny; --happened --result JSON)
    durably send / extend / cancel / retry / fork AGENT ...
    durably purge / sweep / reencrypt    retention, erasure, keys (privacy)
    durably migrate / bench              schema upkeep, checkpoint throughput
    durably verify                       read every frame of a namespace, report damage (changes nothing)
    durably worker --agents MOD:ATTR     run agents from the store until SIGTERM; durably workers: who does
    durably submit --agents MOD:ATTR DEFINITION AGENT_ID [TASK]   hand a new agent to the workers
    durably torture --store URL          SIGKILL real agents at every journal boundary, check the invariants
    durably ui                           the web console (extra durably[ui])

Every command reads ``--store`` from ``$DURABLY_STORE`` when it is not given,
every read command takes ``--json`` (one JSON document on stdout, shapes in
``docs/cli.md``), so do the commands that act on an agent (the status after
the command and where it runs), and every exit status means one thing: 0 done, 1 not found or
refused (a typed ``DurablyError``, printed as one line), 2 a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

import click

from durably._cli.options import (
    DEFAULT_STORE,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    encryption_from_env,
    run_async,
    store_command,
    write_compat_option,
)
from durably._cli.output import Output
from durably.errors import ArgumentTypeError

#: The commands defined in other modules (each lists its own in ``COMMANDS``): command name ->
#: module. A command's module is imported only when that command runs (or ``--help`` lists
#: them all), so ``durably agents`` does not pay for the torture kit, the LangGraph importer,
#: the privacy commands or rich's tables it does not print.
LAZY_COMMANDS = {
    **dict.fromkeys(("agents", "show", "history", "state"), "durably._cli.read"),
    **dict.fromkeys(("approve", "extend", "cancel", "send", "retry", "fork"), "durably._cli.operate"),
    **dict.fromkeys(("purge", "sweep", "reencrypt"), "durably._cli.privacy"),
    "ui": "durably._cli.ui",
    "verify": "durably._cli.verify",
    **dict.fromkeys(("worker", "workers"), "durably._cli.worker"),
    "submit": "durably._cli.submit",
    "import-langgraph": "durably._cli.langgraph",
    "torture": "durably._torture.cli",
}


class _LazyGroup(click.Group):
    """A ``click.Group`` that imports a command's module (``LAZY_COMMANDS``) on first use.

    ``commands`` (what walks of the command tree read) loads every module first, so it
    is the whole tree, as with eager registration.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._commands: dict[str, click.Command] = {}
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]  # click declares a plain attribute
    def commands(self) -> dict[str, click.Command]:
        for name in LAZY_COMMANDS:
            self._load(name)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = dict(value)

    def _load(self, name: str) -> None:
        if name not in self._commands and name in LAZY_COMMANDS:
            for command in importlib.import_module(LAZY_COMMANDS[name]).COMMANDS:
                self._commands.setdefault(command.name or "", command)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Register ``cmd`` under ``name`` (default: its own), without loading the lazy ones."""
        name = name or cmd.name
        if name is None:
            raise ArgumentTypeError("a command added to durably's CLI needs a name")
        self._commands[name] = cmd  # not a chain group: nothing for click to check

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command called ``cmd_name``, its module imported now if it is a lazy one."""
        self._load(cmd_name)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, sorted (without importing the lazy commands' modules)."""
        return sorted(set(self._commands) | set(LAZY_COMMANDS))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # imported here: 20-50 ms, for --version only

    try:
        return version("durably")
    except PackageNotFoundError:
        return "unknown"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``: what ``click.version_option`` prints, the version read only when asked."""
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"durably {_version()}", color=ctx.color)
    ctx.exit()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """Durable execution for LLM agents: inspect, operate and keep the store of durably agents.

    Exit status: 0 done; 1 not found or refused (one error line on stdout, or
    {"error": ...} with --json); 2 usage error.
    """


@cli.command()
@click.option(
    "--store",
    envvar="DURABLY_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    show_envvar=True,
    metavar="URL",
    help="store URL the demo writes its agent to (namespace 'demo')",
)
@click.option(
    "--out",
    default="durably-demo",
    show_default=True,
    type=click.Path(path_type=Path),
    help="folder for the tools' effects",
)
@click.option("--seed", type=int, help="seed for the module choice and the crash point (default: random)")
@click.option(
    "--modules",
    type=click.IntRange(1, 60),
    default=24,
    show_default=True,
    help="how many standard-library modules to survey",
)
@click.option(
    "--model",
    metavar="PROVIDER:MODEL",
    help="run the survey with a real LLM, e.g. openai:gpt-4.1-mini (key from the provider's usual "
    "environment variable); default: the scripted model, checked against a reference run",
)
def demo(store: str, out: Path, seed: int | None, modules: int, model: str | None) -> int:
    """Run a real agent, SIGKILL it mid-run, resume it, approve it from another process and verify."""
    from rich.console import Console

    from durably._cli.demo.run import run_demo  # imported here: the demo pulls in its survey agent

    return run_demo(store, out, seed, modules, Console(), model=model)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``durably bench`` (its options live in ``durably.bench.cli``)."""
    from durably.bench.cli import add_arguments

    parser = argparse.ArgumentParser(prog="durably")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("bench", help="checkpoint throughput suites"))
    return parser


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.argument("options", nargs=-1, type=click.UNPROCESSED)
def bench(options: tuple[str, ...]) -> int:
    """Checkpoint throughput suites, side by side with the limit and peers (durably bench --help)."""
    from rich.console import Console

    from durably.bench.cli import run as run_bench

    try:
        args = build_parser().parse_args(["bench", *options])
    except SystemExit as exc:  # argparse printed the usage or the help
        return int(exc.code or 0)
    return run_bench(args, Console())


@cli.command()
@click.option("--dry-run", is_flag=True, help="only report which streams would change and how")
@write_compat_option(
    "while a fleet is upgraded: rewrite snapshots only up to the version this older release reads "
    "(e.g. 0.1), as the workers do; unset once every worker runs this release"
)
@store_command
def migrate(store: str, namespace: str, dry_run: bool, write_compat: str | None, out: Output) -> int:
    """Rewrite snapshots written at an older schema version (records are upcast on read).

    An encrypted store needs its keys in $DURABLY_KEYS (rewritten snapshots use $DURABLY_KEY_ID's);
    without them it is refused and nothing is written.
    """
    from durably._journal.records import RecordCodec
    from durably._journal.write_formats import write_formats
    from durably._upkeep.migrate import StreamReport, migrate_store
    from durably.storage._registry import open_store

    # The keys as every store command takes them: an encrypted snapshot is read and rewritten under the current key.
    codec = RecordCodec(cipher=encryption_from_env(), formats=write_formats(write_compat, source="--write-compat"))

    async def go() -> list[StreamReport]:
        async with open_store(store) as opened:
            return await migrate_store(opened, namespace, dry_run=dry_run, codec=codec)

    reports = run_async(go)
    for report in reports:
        out.line(report.describe(dry_run=dry_run))
    changed = sum(r.changes for r in reports)
    out.line(f"{len(reports)} streams in namespace {namespace!r}; {changed} {'would change' if dry_run else 'changed'}")
    return EXIT_REFUSED if any(r.problems for r in reports) else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``durably`` console script; returns the exit status (0, 1 or 2)."""
    try:
        status = cli.main(args=argv, prog_name="durably", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        exc.show()
        return EXIT_USAGE
    except click.Abort:
        click.echo("aborted", err=True)
        return EXIT_REFUSED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return status if isinstance(status, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
