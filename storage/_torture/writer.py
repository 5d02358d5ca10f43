"""A storage-level writer process, SIGKILLed again and again; then every acknowledged record is checked.

``python -m durably.storage._torture.writer MODULE QUALNAME URL LEDGER SEED DIE_AFTER``
opens ``QUALNAME(URL)`` and appends batches of random records (1-4 records,
up to 4 KiB each) to a few streams forever, and a snapshot now and then. After
each acknowledged append it writes the batch's seqs and SHA-256 digests to the
ledger (fsynced); with ``DIE_AFTER`` > 0 it SIGKILLs itself right after that
many acknowledgements, otherwise the parent kills it at a random moment.

``crash_rounds`` is the parent: it runs the writer ``kills`` times, each time
killed (by itself right after an acknowledgement, or by the parent at a random
point in the middle of appends), then opens the store and requires every record
the ledger says was acknowledged present and byte-identical, and the stream's
last seq at least the highest acknowledged one. This is the "nothing is
acknowledged from a cache" promise, checked the way Jepsen and ALICE check
storage: kill the writer, trust only what it was told.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from durably.storage._errors import ConflictError
from durably.storage._spi import Store, StreamId

from .ledger import Ledger
from .spawn import child_environment, load_class, read_all

#: Namespace and streams the writer appends to.
NAMESPACE = "crash"
STREAMS = 3
#: Seconds one writer incarnation may live before the parent gives up on it.
ROUND_TIMEOUT = 60.0


def _stream(index: int) -> StreamId:
    return StreamId(NAMESPACE, f"writer-{index}")


async def write_forever(store: Store, ledger: Ledger, seed: int, die_after: int) -> None:
    """Append random batches to ``STREAMS`` streams, logging each acknowledgement; SIGKILL after ``die_after``."""
    rng = random.Random(seed)
    last = {index: await store.last_seq(_stream(index)) for index in range(STREAMS)}
    acknowledged = 0
    while True:
        index = rng.randrange(STREAMS)
        stream = _stream(index)
        records = [rng.randbytes(rng.randrange(1, 4096)) for _ in range(rng.randrange(1, 5))]
        try:
            new_last = await store.append(stream, last[index], records)
        except ConflictError:
            # Our previous incarnation's append may have landed unacknowledged: re-read.
            last[index] = await store.last_seq(stream)
            continue
        first = new_last - len(records) + 1
        ledger.append(
            {"agent": stream.agent_id, "first": first, "sha": [hashlib.sha256(data).hexdigest() for data in records]}
        )
        last[index] = new_last
        acknowledged += 1
        if die_after and acknowledged == die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        if rng.random() < 0.1:
            await store.put_snapshot(stream, new_last, rng.randbytes(rng.randrange(1, 2048)))


async def _main(module: str, qualname: str, url: str, ledger_path: str, seed: str, die_after: str) -> None:
    async with load_class(module, qualname)(url) as store:
        await write_forever(store, Ledger(ledger_path), int(seed), int(die_after))


@dataclass
class CrashReport:
    """What ``crash_rounds`` did: ``kills`` SIGKILLs, ``acknowledged`` batches checked, ``violations`` found."""

    kills: int = 0
    acknowledged: int = 0
    violations: list[str] = field(default_factory=list)


async def _one_round(store_class: type, url: str, ledger: Ledger, rng: random.Random) -> None:
    before = len(ledger.entries())
    die_after = rng.randrange(1, 12) if rng.random() < 0.5 else 0
    command = [
        sys.executable,
        "-m",
        __name__,
        store_class.__module__,
        store_class.__qualname__,
        url,
        str(ledger.path),
        str(rng.randrange(1 << 30)),
        str(die_after),
    ]
    process = await anyio.open_process(command, env=child_environment(), stdout=None)
    try:
        with anyio.fail_after(ROUND_TIMEOUT):
            if die_after:
                await process.wait()
            else:
                while len(ledger.entries()) == before and process.returncode is None:
                    await anyio.sleep(0.01)  # wait for the first acknowledgement of this incarnation
                await anyio.sleep(rng.uniform(0, 0.2))
                process.kill()
                await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != -signal.SIGKILL:
        errors = await read_all(process.stderr)
        raise AssertionError(f"the writer process exited with {process.returncode}, not SIGKILL: {errors[-2000:]!r}")


async def crash_rounds(store_class: type, url: str, ledger_path: Path, *, kills: int, seed: int = 0) -> CrashReport:
    """SIGKILL a writer of ``store_class(url)`` ``kills`` times, then check every acknowledged record.

    In: the adapter class and the URL it takes (the writer process builds
    ``store_class(url)``), a fresh ``ledger_path``, ``kills`` >= 1, a ``seed``.
    Out: a ``CrashReport``; its ``violations`` name each lost or altered
    acknowledged record. Raises ``AssertionError`` when a writer does not die by
    SIGKILL (it failed instead; its stderr is in the message) or hangs.
    """
    rng = random.Random(seed)
    ledger = Ledger(ledger_path)
    report = CrashReport()
    for _ in range(kills):
        await _one_round(store_class, url, ledger, rng)
        report.kills += 1
    entries = ledger.entries()
    report.acknowledged = len(entries)
    highest: dict[str, int] = {}
    async with store_class(url) as store:
        stored: dict[str, dict[int, str]] = {}
        for index in range(STREAMS):
            stream = _stream(index)
            stored[stream.agent_id] = {r.seq: hashlib.sha256(r.data).hexdigest() async for r in store.read(stream)}
        for entry in entries:
            for offset, digest in enumerate(entry["sha"]):
                seq = entry["first"] + offset
                highest[entry["agent"]] = max(highest.get(entry["agent"], 0), seq)
                found = stored[entry["agent"]].get(seq)
                if found != digest:
                    state = "missing" if found is None else "altered"
                    report.violations.append(f"{entry['agent']} seq {seq}: acknowledged, then {state} after a SIGKILL")
        for agent, seq in highest.items():
            last = await store.last_seq(StreamId(NAMESPACE, agent))
            if last < seq:
                report.violations.append(f"{agent}: last_seq {last} is below the acknowledged seq {seq}")
    return report


if __name__ == "__main__":
    module, qualname, url, ledger_path, seed, die_after = sys.argv[1:7]
    anyio.run(_main, module, qualname, url, ledger_path, seed, die_after)
