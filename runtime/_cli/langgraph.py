"""The ``durably import-langgraph`` command: LangGraph SQLite threads moved to a durably store.

    durably import-langgraph checkpoints.sqlite --to sqlite:///agents.db [--thread ID...]

A thin shell over ``durably.integrations.langgraph.import_sqlite_threads``
(the logic and its guarantees are there and in docs/langgraph.md). The target
store is created if needed; ``$DURABLY_KEYS`` encrypts what is written, as for
every command.
"""

from __future__ import annotations

from pathlib import Path

import click

from durably._cli.options import DEFAULT_STORE, EXIT_OK, EXIT_REFUSED, encryption_from_env, json_option, run_async
from durably._cli.output import Output
from durably.storage._errors import DurablyError


@click.command("import-langgraph")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--to",
    "store",
    envvar="DURABLY_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    show_envvar=True,
    metavar="URL",
    help="durably store URL to copy the threads into (created if needed)",
)
@click.option("--namespace", default="langgraph", show_default=True, help="namespace of the DurablySaver threads")
@click.option("--thread", "threads", multiple=True, metavar="ID", help="only this thread (repeatable; default: all)")
@json_option
def import_langgraph(source: Path, store: str, namespace: str, threads: tuple[str, ...], json_mode: bool) -> int:
    """Copy the threads of a LangGraph SQLite checkpoint database (AsyncSqliteSaver) into a durably store."""
    out = Output(json_mode, store_urls=[store])
    try:
        from durably.integrations.langgraph import DurablySaver, import_sqlite_threads
        from durably.integrations.langgraph._importer import ImportedThread
    except ImportError as exc:
        raise click.ClickException(
            f"LangGraph is not installed (pip install -e '.[langgraph]' in durably's clone): {exc}"
        ) from exc

    async def go() -> list[ImportedThread]:
        async with DurablySaver.from_url(store, namespace=namespace, cipher=encryption_from_env()) as saver:
            return await import_sqlite_threads(source, saver, thread_ids=list(threads) or None)

    try:
        with out.secrets.guarding_logs():
            imported = run_async(go)
    except (DurablyError, ValueError) as exc:
        out.error(exc)
        return EXIT_REFUSED
    if json_mode:
        out.json(
            {
                "store": store,
                "namespace": namespace,
                "threads": [
                    {"thread_id": t.thread_id, "checkpoints": t.checkpoints, "writes": t.writes} for t in imported
                ],
            }
        )
        return EXIT_OK
    for thread in imported:
        out.line(f"{thread.thread_id}: {thread.checkpoints} checkpoints, {thread.writes} pending writes")
    out.line(f"{len(imported)} threads imported into {store} (namespace {namespace!r})")
    return EXIT_OK


COMMANDS = [import_langgraph]
