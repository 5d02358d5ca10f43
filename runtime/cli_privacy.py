"""The ``durably purge``, ``sweep`` and ``reencrypt`` subcommands, and encryption keys from the environment.

    durably purge AGENT [AGENT...]                  delete agents' records, snapshots and blobs
    durably sweep --ttl finished=30d [--dry-run]    purge agents past their time-to-live
    durably reencrypt [--allow-plaintext]           rewrite frames under the current key

Keys: when ``$DURABLY_KEYS`` is set (``id=base64key,...``, see
``durably.storage.crypto.EnvKeyProvider``) every subcommand that opens a
runtime reads and writes encrypted frames with them.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Callable

import anyio
from rich.console import Console

from durably.storage.crypto import AESGCMCipher, EnvKeyProvider
from durably.storage.errors import DurablyError

from .retention import RetentionPolicy, parse_duration
from .runtime import Runtime

COMMANDS = frozenset({"purge", "sweep", "reencrypt"})


def encryption_from_env(*, allow_plaintext: bool = False) -> AESGCMCipher | None:
    """An ``AESGCMCipher`` over ``EnvKeyProvider`` when ``$DURABLY_KEYS`` is set, else None.

    Raises ``KeyConfigError`` (a ValueError) when the variables are malformed.
    """
    if not os.environ.get("DURABLY_KEYS"):
        return None
    return AESGCMCipher(EnvKeyProvider(), allow_plaintext=allow_plaintext)


def _ttl(text: str) -> tuple[str, float]:
    status, sep, duration = text.partition("=")
    if not sep or not status:
        raise argparse.ArgumentTypeError(f"{text!r} is not STATUS=DURATION (e.g. finished=30d)")
    try:
        return status.strip(), parse_duration(duration)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(sub, store_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add the three subcommands to ``sub`` (an argparse subparsers object)."""
    purge = sub.add_parser("purge", help="delete agents' records, snapshots and blobs for good")
    purge.add_argument("agent_ids", nargs="+", metavar="AGENT")
    store_args(purge)

    sweep = sub.add_parser("sweep", help="purge agents whose time-to-live has passed (from their last record)")
    sweep.add_argument("--ttl", type=_ttl, action="append", default=[], metavar="STATUS=DURATION",
                       help="keep agents with STATUS this long (30d, 12h, 90m, 45s); repeat per status")
    sweep.add_argument("--default", type=parse_duration, default=None, metavar="DURATION",
                       help="time-to-live of the statuses not named by --ttl (default: keep forever)")
    sweep.add_argument("--dry-run", action="store_true", help="only report what would be purged")
    store_args(sweep)

    reencrypt = sub.add_parser("reencrypt", help="rewrite every frame under the current key of $DURABLY_KEYS")
    reencrypt.add_argument("--allow-plaintext", action="store_true",
                           help="also read plaintext frames and encrypt them (turning encryption on for a store)")
    store_args(reencrypt)


async def _run(args: argparse.Namespace, console: Console) -> int:
    encryption = encryption_from_env(allow_plaintext=getattr(args, "allow_plaintext", False))
    if args.command == "reencrypt" and encryption is None:
        console.print("[red]error:[/] reencrypt needs keys: set DURABLY_KEYS (and DURABLY_KEY_ID)")
        return 2
    async with Runtime(args.store, namespace=args.namespace, encryption=encryption) as rt:
        if args.command == "purge":
            for agent_id in args.agent_ids:
                await rt.purge(agent_id)
                console.print(f"{agent_id}: purged from namespace {args.namespace!r}", markup=False, highlight=False)
            return 0
        if args.command == "sweep":
            policy = RetentionPolicy(dict(args.ttl), args.default)
            items = await rt.sweep(policy, now=time.time(), dry_run=args.dry_run)
            for item in items:
                age = f"{item.age / 86_400:.1f} days" if item.age is not None else "no date"
                detail = f" ({item.error})" if item.error else ""
                console.print(f"{item.stream.agent_id}: {item.outcome} [{item.status or '-'}, {age}]{detail}",
                              markup=False, highlight=False)
            counts = Counter(item.outcome for item in items)
            console.print(f"{len(items)} agents in namespace {args.namespace!r}: "
                          + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())), markup=False)
            return 1 if counts.get("unreadable") else 0
        reports = await rt.reencrypt()
        for report in reports:
            before = ", ".join(f"{k or 'plaintext'}: {n}" for k, n in sorted(report.before.items(), key=str))
            console.print(f"{report.stream.agent_id}: {report.action} ({before})", markup=False, highlight=False)
        stale = [r for r in reports if set(r.after) - {encryption.current_key_id()}]
        console.print(f"{len(reports)} streams in namespace {args.namespace!r}; "
                      f"every frame now under key {encryption.current_key_id()!r}" if not stale else
                      f"{len(stale)} streams still hold frames under other keys (written meanwhile?)", markup=False)
        return 1 if stale else 0


def run(args: argparse.Namespace, console: Console) -> int:
    """Run one of ``COMMANDS``; returns the exit status (typed errors print one line, status 1)."""
    try:
        return anyio.run(_run, args, console)
    except (DurablyError, ValueError) as exc:
        console.print(f"[red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
        return 1
