"""The ``durably purge``, ``sweep`` and ``reencrypt`` commands, and encryption keys from the environment.

    durably purge AGENT [AGENT...] [--yes|--dry-run] [--force]   delete agents' records, snapshots and blobs
    durably sweep --ttl finished=30d [--yes|--dry-run]           purge agents past their time-to-live
    durably reencrypt [--allow-plaintext] [--wait SECONDS]       rewrite frames under the current key

``purge`` and ``sweep`` delete for good: on a terminal they show what they
would delete and ask first (``--yes`` skips the question, ``--dry-run`` only
shows); without a terminal (a script, a cron job) there is no one to ask, so
they delete only with ``--yes`` and otherwise refuse (exit status 1).

None of them rewrites an agent a live worker runs: ``purge`` refuses it and
says which worker holds it (``--force`` purges it anyway), ``sweep`` reports it
``held``, and ``reencrypt`` waits for it up to ``--wait`` seconds, then reports
it ``held`` (run it again once that agent parked or finished).

Keys: when ``$DURABLY_KEYS`` is set (``id=base64key,...``, see
``durably.storage._crypto.EnvKeyProvider``) every command that opens a
runtime reads and writes encrypted frames with them.
"""

from __future__ import annotations

import time
from collections import Counter

import click

from durably._cli.options import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, encryption_from_env, run_async, store_command
from durably._cli.output import Output, stdin_is_terminal, when
from durably._fleet.owner import OwnerIdentity
from durably._runtime import Runtime
from durably._upkeep.reencrypt import ReencryptReport
from durably._upkeep.retention import RetentionPolicy, SweepItem, parse_duration
from durably.errors import AgentLeasedError, InvalidCommandError


def _ttl(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, float]:
    ttls: dict[str, float] = {}
    try:
        for text in values:
            status, sep, duration = text.partition("=")
            if not sep or not status.strip():
                raise click.BadParameter(f"{text!r} is not STATUS=DURATION (e.g. finished=30d)")
            ttls[status.strip()] = parse_duration(duration)
        RetentionPolicy(ttls)  # an unknown status is a usage error, before any store is opened
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return ttls


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    try:
        return None if value is None else parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def require_someone_to_ask(*, yes: bool, dry_run: bool) -> None:
    """Refuse a deletion nobody confirmed: without ``--yes`` or ``--dry-run`` and no terminal to ask on.

    Raises ``InvalidCommandError`` (before anything is read or deleted): a script must
    say ``--yes`` to delete for good."""
    if not yes and not dry_run and not stdin_is_terminal():
        raise InvalidCommandError(
            "purge not confirmed: no terminal to ask on; pass --yes to delete for good "
            "(or --dry-run to see what would be deleted)"
        )


def confirmed(out: Output, question: str, *, yes: bool) -> bool:
    """True to go ahead: ``--yes``, or the person on the terminal said yes."""
    return yes or click.confirm(question, default=False)


yes_option = click.option(
    "--yes", "-y", is_flag=True, help="delete without asking (required when there is no terminal to ask on)"
)
dry_run_option = click.option("--dry-run", is_flag=True, help="only show what would be purged; delete nothing")


def holder_text(owner: str | None) -> str:
    """Who a lease owner string names, for a person: worker id, host and pid when the owner
    is one durably wrote (``durably._fleet.owner``), else the string itself."""
    if not owner:
        return "another worker"
    identity = OwnerIdentity.parse(owner)
    if identity is None:
        return owner
    return f"worker {identity.worker_id!r} on host {identity.host} (pid {identity.pid})"


@click.command()
@click.argument("agent_ids", nargs=-1, required=True, metavar="AGENT...")
@yes_option
@dry_run_option
@click.option(
    "--force",
    is_flag=True,
    help="purge also an agent a live worker runs now (that worker's step in flight is lost)",
)
@store_command
def purge(
    store: str, namespace: str, agent_ids: tuple[str, ...], yes: bool, dry_run: bool, force: bool, out: Output
) -> int:
    """Delete agents' records, snapshots and blobs for good (the id may then start anew)."""
    encryption = encryption_from_env()

    async def describe() -> list[str]:
        async with Runtime(store, namespace=namespace, encryption=encryption) as rt:
            lines = []
            for agent_id in agent_ids:
                info = await rt.describe(agent_id)  # AgentNotFoundError before anything is deleted
                lines.append(
                    f"{agent_id}: {info.status}, {info.seq} records, last active {when(info.last_activity_at)}"
                )
            return lines

    async def go() -> int:
        refused = 0
        async with Runtime(store, namespace=namespace, encryption=encryption) as rt:
            for agent_id in agent_ids:
                try:
                    await rt.purge(agent_id, force=force)
                except AgentLeasedError as exc:
                    refused += 1
                    until = f", lease until {when(exc.expires_at)}" if exc.expires_at is not None else ""
                    out.line(
                        f"{agent_id}: not purged: {holder_text(exc.owner)} runs it now{until} "
                        "(wait until it parks or finishes, or purge it anyway with --force)"
                    )
                    continue
                out.line(f"{agent_id}: purged from namespace {namespace!r}")
        return refused

    require_someone_to_ask(yes=yes, dry_run=dry_run)
    if dry_run or not yes:
        for line in run_async(describe):
            out.line(("would purge " if dry_run else "") + line)
        if dry_run:
            return EXIT_OK
    if not confirmed(out, f"purge {len(agent_ids)} agent(s) from namespace {namespace!r} for good?", yes=yes):
        out.line("nothing purged")
        return EXIT_REFUSED
    return EXIT_REFUSED if run_async(go) else EXIT_OK


def _sweep_line(item: SweepItem) -> str:
    age = f"{item.age / 86_400:.1f} days" if item.age is not None else "no date"
    detail = f" ({item.error})" if item.error else ""
    return f"{item.stream.agent_id}: {item.outcome} [{item.status or '-'}, {age}]{detail}"


@click.command()
@click.option(
    "--ttl",
    "ttls",
    multiple=True,
    callback=_ttl,
    metavar="STATUS=DURATION",
    help="keep agents with STATUS this long after their last record (30d, 12h, 90m, 45s); repeat per status",
)
@click.option(
    "--default",
    "default_ttl",
    callback=_duration,
    metavar="DURATION",
    help="time-to-live of the statuses not named by --ttl (default: keep forever)",
)
@yes_option
@dry_run_option
@store_command
def sweep(
    store: str, namespace: str, ttls: dict[str, float], default_ttl: float | None, yes: bool, dry_run: bool, out: Output
) -> int:
    """Purge agents whose time-to-live has passed (counted from their last record)."""
    policy = RetentionPolicy(ttls, default_ttl)

    async def go(dry: bool) -> list[SweepItem]:
        async with Runtime(store, namespace=namespace, encryption=encryption_from_env()) as rt:
            return await rt.sweep(policy, now=time.time(), dry_run=dry)

    require_someone_to_ask(yes=yes, dry_run=dry_run)
    ask = not dry_run and not yes
    items = run_async(go, True) if ask else []
    expired = [i for i in items if i.outcome == "expired"]
    if ask:
        for item in expired:
            out.line(_sweep_line(item))
        if not expired:
            out.line(f"nothing to purge in namespace {namespace!r}")
            return EXIT_OK
        if not confirmed(out, f"purge these {len(expired)} agent(s) for good?", yes=False):
            out.line("nothing purged")
            return EXIT_REFUSED
    items = run_async(go, dry_run)
    for item in items:
        out.line(_sweep_line(item))
    counts = Counter(item.outcome for item in items)
    out.line(
        f"{len(items)} agents in namespace {namespace!r}: "
        + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    )
    return EXIT_REFUSED if counts.get("unreadable") else EXIT_OK


@click.command()
@click.option(
    "--allow-plaintext",
    is_flag=True,
    help="also read plaintext frames and encrypt them (turning encryption on for a store)",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0, max=86_400),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="how long to keep trying the agents live workers run before reporting them held",
)
@store_command
def reencrypt(store: str, namespace: str, allow_plaintext: bool, wait: float, out: Output) -> int:
    """Rewrite every frame under the current key of $DURABLY_KEYS (history compacted into a snapshot)."""
    encryption = encryption_from_env(allow_plaintext=allow_plaintext)
    if encryption is None:
        out.line("error: reencrypt needs keys: set DURABLY_KEYS (and DURABLY_KEY_ID)")
        return EXIT_USAGE

    async def go() -> list[ReencryptReport]:
        async with Runtime(store, namespace=namespace, encryption=encryption) as rt:
            return await rt.reencrypt(wait=wait)

    reports = run_async(go)
    for report in reports:
        before = ", ".join(f"{k or 'plaintext'}: {n}" for k, n in sorted(report.before.items(), key=str))
        held = (
            f": {holder_text(report.held_by)} runs it; run this again once it parks" if report.action == "held" else ""
        )
        out.line(f"{report.stream.agent_id}: {report.action}{held} ({before})")
    stale = [r for r in reports if set(r.after) - {encryption.current_key_id()}]
    out.line(
        f"{len(reports)} streams in namespace {namespace!r}; every frame now under key {encryption.current_key_id()!r}"
        if not stale
        else f"{len(stale)} streams still hold frames under other keys (written meanwhile?)"
    )
    # True of the files' bytes too, or said: another connection may keep the old ones in the WAL.
    residue = next((r for r in reports if r.files_scrubbed is False), None)
    if residue is not None:
        out.line(f"warning: the old bytes may still be in the store's files: {residue.residue}")
    return EXIT_REFUSED if stale or residue is not None else EXIT_OK


COMMANDS = [purge, sweep, reencrypt]
