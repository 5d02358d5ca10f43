"""The ``durably verify`` command: read every frame of a namespace, report damage, change nothing.

    durably verify [--store URL] [--namespace NS] [--json]

Exit status 0 when every stream is sound, 1 when any has a problem (the
report names the stream, what is wrong and at which seq). The logic is
``durably.runtime.verify``; keys come from ``$DURABLY_KEYS`` as for the other commands.
"""

from __future__ import annotations

import click

from durably.runtime.record_codec import RecordCodec
from durably.storage.registry import open_store

from .options import EXIT_OK, EXIT_REFUSED, json_option, run_async, store_command
from .output import Output
from .privacy import encryption_from_env
from durably.runtime.verify import StreamReport, verify_namespace


@click.command()
@json_option
@store_command
def verify(store: str, namespace: str, json_mode: bool, out: Output) -> int:
    """Read every record and snapshot of a namespace and report damage, changing nothing."""
    codec = RecordCodec(cipher=encryption_from_env(allow_plaintext=True))

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
    out.line(f"{len(reports)} streams in namespace {namespace!r}: "
             + (f"{len(bad)} damaged" if bad else "every frame reads back"))
    return EXIT_REFUSED if bad else EXIT_OK


COMMANDS = [verify]
