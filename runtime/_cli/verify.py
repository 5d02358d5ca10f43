"""The ``durably verify`` command: read every frame of a namespace, report damage, change nothing.

    durably verify [--store URL] [--namespace NS] [--json] [--rebuild-index]

Exit status 0 when every stream is sound, 1 when any has a problem (the
report names the stream, what is wrong and at which seq). The logic is
``durably._reading.verify``; keys come from ``$DURABLY_KEYS`` as for the other commands.
"""

from __future__ import annotations

import click

from durably._cli.options import EXIT_OK, EXIT_REFUSED, encryption_from_env, json_option, run_async, store_command
from durably._cli.output import Output
from durably._journal.records import RecordCodec
from durably._journal.status_index import RebuildReport, indexed, rebuild
from durably._reading.verify import StreamReport, verify_namespace
from durably._telemetry import Telemetry
from durably.storage._registry import open_store


@click.command()
@click.option(
    "--rebuild-index",
    is_flag=True,
    help="then rewrite the namespace's status index from the journals (stores with one; the only write)",
)
@json_option
@store_command
def verify(store: str, namespace: str, rebuild_index: bool, json_mode: bool, out: Output) -> int:
    """Read every record and snapshot of a namespace and report damage, changing nothing (but --rebuild-index)."""
    codec = RecordCodec(cipher=encryption_from_env(allow_plaintext=True))
    if rebuild_index:
        return _rebuild(store, namespace, codec, json_mode, out)

    async def go() -> list[StreamReport]:
        async with open_store(store) as opened:
            return [report async for report in verify_namespace(opened, codec, namespace)]

    reports = run_async(go)
    bad = [r for r in reports if not r.ok]
    if json_mode:
        out.json({"store": store, "namespace": namespace, "ok": not bad, "streams": [r.to_json() for r in reports]})
        return EXIT_REFUSED if bad else EXIT_OK
    for report in reports:
        summary = f"{report.records} records, {report.snapshots} snapshots, last seq {report.last_seq}"
        out.line(f"{report.stream.agent_id}: {'ok' if report.ok else 'DAMAGED'} ({summary})")
        for problem in report.problems:
            out.line(f"  {problem.where} at seq {problem.seq}: {problem.error}: {problem.detail}")
    out.line(
        f"{len(reports)} streams in namespace {namespace!r}: "
        + (f"{len(bad)} damaged" if bad else "every frame reads back")
    )
    return EXIT_REFUSED if bad else EXIT_OK


def _rebuild(store: str, namespace: str, codec: RecordCodec, json_mode: bool, out: Output) -> int:
    async def go() -> list[RebuildReport] | None:
        async with open_store(store) as opened:
            if not indexed(opened):
                return None
            return [report async for report in rebuild(opened, codec, namespace, Telemetry(namespace))]

    reports = run_async(go)
    if reports is None:
        out.line(f"{store} keeps no status index (CAP_STATUS_INDEX): its scans read every journal; nothing to rebuild")
        return EXIT_REFUSED
    if json_mode:
        out.json(
            {
                "store": store,
                "namespace": namespace,
                "rebuilt": [
                    {
                        "agent_id": r.stream.agent_id,
                        "status": r.entry.status if r.entry else None,
                        "changed": r.changed,
                        "raced": r.raced,
                        "error": r.error,
                    }
                    for r in reports
                ],
            }
        )
        return EXIT_OK
    for r in reports:
        if r.changed or r.raced or r.error:
            what = r.error or (f"now {r.entry.status}" if r.entry else "removed")
            out.line(f"{r.stream.agent_id}: {what}{' (appended meanwhile: left to its writer)' if r.raced else ''}")
    changed = sum(r.changed for r in reports)
    out.line(f"status index of namespace {namespace!r} rebuilt: {len(reports)} streams, {changed} entries corrected")
    return EXIT_OK


COMMANDS = [verify]
