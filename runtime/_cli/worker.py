"""``durably worker`` (serve a store with your agents) and ``durably workers`` (who serves it).

    durably worker --agents myapp.agents:support     run agents until SIGTERM/SIGINT, then drain
    durably workers                                  live (and recently dead) workers, what each holds

``--agents MODULE:ATTR`` is imported with the current directory on
``sys.path`` (as ``uvicorn`` imports an app): ``ATTR`` is an
``AgentDefinition``, a list, tuple or dict of them, or a callable with no
arguments returning one of those. The worker is ``Runtime.serve`` with the
fleet's heartbeat (``durably._fleet.workers``): other workers take its agents
within ``--heartbeat-timeout`` seconds of its death, on any host.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio
import click

from durably._cli.options import (
    EXIT_OK,
    encryption_from_env,
    json_option,
    namespace_option,
    run_async,
    store_command,
    store_option,
    write_compat_option,
)
from durably._cli.output import Output, when
from durably._fleet.workers import DEFAULT_TIMEOUT, describe, forgotten, list_workers, mark_superseded
from durably._journal.write_formats import readable, release_name
from durably._loop.agent import AgentDefinition
from durably.errors import DurablyError
from durably.storage._errors import StoreError

if TYPE_CHECKING:
    from durably._runtime import Runtime

log = logging.getLogger("durably.worker")

timeout_option = click.option(
    "--heartbeat-timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="a worker silent for longer is dead (the same for every worker of a fleet)",
)


def load_agents(spec: str) -> list[AgentDefinition]:
    """The definitions ``spec`` (``MODULE:ATTR``) names, importing ``MODULE`` with the current directory
    on ``sys.path``. Raises ``click.BadParameter`` for a malformed spec, an import that fails or an
    attribute that is not a definition, a collection of them or a callable returning one."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not MODULE:ATTR", param_hint="--agents")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"{spec}: {exc}", param_hint="--agents") from None
    if callable(value) and not isinstance(value, AgentDefinition):
        value = value()
    if isinstance(value, AgentDefinition):
        found: list[Any] = [value]
    elif isinstance(value, dict):
        found = list(value.values())
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        found = list(value)
    else:
        found = []
    if not found or not all(isinstance(item, AgentDefinition) for item in found):
        raise click.BadParameter(
            f"{spec} is not an AgentDefinition, a list or dict of them, or a callable returning one",
            param_hint="--agents",
        )
    return found


def agents_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--agents MODULE:ATTR`` option (repeatable, required) into ``agent_specs``, read by ``load_agents``."""
    return click.option("--agents", "agent_specs", multiple=True, required=True, metavar="MODULE:ATTR", help=help)


@click.command()
@agents_option(
    "the agent definitions to run (repeatable): an AgentDefinition, a list or dict of them, "
    "or a callable returning one; MODULE is imported from the current directory"
)
@store_option
@namespace_option
@click.option("--max-agents", type=click.IntRange(min=1), help="most live agents in this worker (default: no cap)")
@click.option("--worker-id", help="this worker's name in leases, journals and `durably workers` (default: host:pid)")
@timeout_option
@click.option(
    "--lease-ttl", type=click.FloatRange(min=0.1), default=30.0, show_default=True, metavar="SECONDS", help="lease TTL"
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="seconds between scans of the store",
)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="on SIGTERM/SIGINT, how long the steps in flight may take before they are cancelled",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="serve HTTP /livez and /readyz on 127.0.0.1:PORT (0: any free port, printed at start)",
)
@write_compat_option(
    "while a fleet is upgraded: write only the formats this older release reads (e.g. 0.1); "
    "unset once every worker runs this release"
)
def worker(
    agent_specs: tuple[str, ...],
    store: str,
    namespace: str,
    max_agents: int | None,
    worker_id: str | None,
    heartbeat_timeout: float,
    lease_ttl: float,
    poll_interval: float,
    drain_timeout: float,
    health_port: int | None,
    write_compat: str | None,
) -> int:
    """Run agents from a store until SIGTERM or SIGINT, then drain and exit 0.

    Resumes every runnable agent of the namespace whose definition --agents
    names (new ones from Runtime.submit, approved ones, a dead worker's ones),
    heartbeats in the store, and on SIGTERM/SIGINT finishes the steps in flight,
    releases its leases and exits 0.
    """
    out = Output()
    _configure_logging()
    definitions = [d for spec in agent_specs for d in load_agents(spec)]
    try:
        run_async(
            _serve,
            out,
            definitions,
            store,
            namespace,
            worker_id,
            heartbeat_timeout,
            lease_ttl,
            poll_interval,
            drain_timeout,
            max_agents,
            health_port,
            write_compat,
        )
    except (DurablyError, ValueError) as exc:
        out.error(exc)
        return 1
    return EXIT_OK


async def _serve(
    out: Output,
    definitions: list[AgentDefinition],
    store: str,
    namespace: str,
    worker_id: str | None,
    heartbeat_timeout: float,
    lease_ttl: float,
    poll_interval: float,
    drain_timeout: float,
    max_agents: int | None,
    health_port: int | None,
    write_compat: str | None,
) -> None:
    from durably._runtime import Runtime

    async with Runtime(
        store,
        agents=definitions,
        namespace=namespace,
        worker_id=worker_id,
        lease_ttl=lease_ttl,
        heartbeat_timeout=heartbeat_timeout,
        encryption=encryption_from_env(),
        write_compat=write_compat or "",
    ) as rt:
        heartbeats = rt._activations.leases.heartbeats
        serving = False

        def ready() -> bool:
            return serving and not rt.draining and heartbeats is not None and heartbeats.healthy()

        async with anyio.create_task_group() as tg:
            if health_port is not None:
                from durably._cli.health import serve_health

                bound = await tg.start(serve_health, health_port, ready)
                out.line(f"health: http://127.0.0.1:{bound}/livez and /readyz")
            names = ", ".join(sorted(d.name for d in definitions))
            out.line(
                f"worker {rt.worker_id} serving namespace {namespace!r} on {rt.store!r} ({names}); "
                f"heartbeat timeout {heartbeat_timeout:g}s; SIGTERM or SIGINT drains"
            )
            if rt.write_formats.release is not None:
                out.line(f"writing only the formats release {rt.write_formats.release} reads (--write-compat)")
            await _warn_of_older_readers(rt, namespace, heartbeat_timeout, out)
            serving = True
            await rt.serve(
                poll_interval,
                drain_signals=(signal.SIGTERM, signal.SIGINT),
                drain_timeout=drain_timeout,
                max_agents=max_agents,
            )
            serving = False
            tg.cancel_scope.cancel()
    out.line(f"worker {rt.worker_id} drained: steps finished, leases released")


async def _warn_of_older_readers(rt: Runtime, namespace: str, timeout: float, out: Output) -> None:
    """Say which live workers cannot read what this one writes: each would refuse an agent it takes over."""
    writes = rt.write_formats.levels
    now = time.time()
    try:
        beats = await list_workers(rt.store, namespace)
    except StoreError as exc:  # an outage at start is serve()'s to ride out, not a reason to stop here
        log.warning("could not list the workers to compare formats: %s", exc)
        return
    for beat in beats:
        if beat.alive(timeout, now) and not readable(writes, beat.reads):
            older = release_name(beat.reads)
            out.line(
                f"warning: worker {beat.worker_id} ({beat.host}, pid {beat.pid}) reads only the formats of release "
                f"{older}: it cannot take over the agents this worker writes; until it is upgraded, "
                f"run every worker with --write-compat {older}"
            )


def _configure_logging() -> None:
    """Log INFO and up to stderr unless the embedder configured logging (a worker's log is its voice)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )


@click.command()
@timeout_option
@json_option
@store_command
def workers(store: str, namespace: str, heartbeat_timeout: float, json_mode: bool, out: Output) -> None:
    """The workers serving the namespace: live, draining, and recently dead or stopped.

    A worker is dead when its last heartbeat is older than --heartbeat-timeout;
    dead and stopped workers hold no agents (any worker may take them over) and
    are listed for 10 minutes after their last heartbeat, marked superseded once
    a later run uses the same worker id. "reads" and "writes"
    name the release whose formats each reads and writes (--write-compat).
    """
    from durably.storage._registry import open_store

    async def go() -> tuple[list[dict[str, Any]], str]:
        async with open_store(store) as opened:
            rows = [describe(b, heartbeat_timeout, now) for b in await list_workers(opened, namespace)]
            return mark_superseded([r for r in rows if not forgotten(r)]), repr(opened)

    now = time.time()
    rows, where = run_async(go)
    if json_mode:
        out.json({"namespace": namespace, "heartbeat_timeout": heartbeat_timeout, "workers": rows})
        return
    if not rows:
        out.line(f"no workers have served namespace {namespace!r} on {where} in the last 10 minutes")
        return
    out.table(
        ["worker", "status", "host", "pid", "agents", "last heartbeat", "started", "definitions", "reads", "writes"],
        [
            [
                r["worker_id"],
                f"{r['status']} (superseded)" if r["superseded"] else r["status"],
                r["host"],
                r["pid"],
                _held(r),
                f"{r['age_s']:.1f}s ago",
                when(r["started_at"]),
                ", ".join(r["definitions"]),
                release_name(tuple(r["reads"])),
                release_name(tuple(r["writes"])),
            ]
            for r in rows
        ],
        title=f"workers of namespace {namespace!r}",
        caption=f"a worker silent for {heartbeat_timeout:g}s counts as dead"
        + (
            "; superseded: an earlier run of a worker id a later run now uses"
            if any(r["superseded"] for r in rows)
            else ""
        ),
        keep=("worker", "status"),
    )


def _held(row: dict[str, Any]) -> str:
    ids: list[str] = row["agent_ids"]
    if not ids:
        return str(row["agents"])
    shown = ", ".join(ids[:3]) + (", ..." if row["agents"] > 3 else "")
    return f"{row['agents']} ({shown})"


COMMANDS = [worker, workers]
