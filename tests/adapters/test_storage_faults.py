"""Storage faults under a real agent: a full disk (a tiny tmpfs mounted by the test), S3 5xx and timeouts.

* **Full disk.** The store lives on a 1 MiB tmpfs and the agent's tool results
  are large: an append fails with the typed ``StoreUnavailableError`` (the agent
  stops, its handle says why), every acknowledged record is still there byte for
  byte, and once the tmpfs is remounted larger the agent resumes and ends as an
  uninterrupted run would, every effect exactly once. SQLite and file://.
  Needs root (mount); skipped with that reason otherwise.
* **S3 5xx and timeouts.** Faults injected through the local server's hooks
  (``tests/support/s3_server.py``): 503 SlowDown, 500, and stalls past the client's read
  timeout on a share of requests; the agents finish through the retries, with
  no duplicate effect. Then a lasting outage: the append fails typed, and the
  agent resumes once the server answers again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest
from s3_server import Fault
from support_agents import StepModel

from durably import AgentDefinition, Reconciled, Runtime, SnapshotPolicy, tool
from durably.storage._errors import StoreUnavailableError
from durably.storage._spi import StreamId

STEPS = 12
#: Bytes of each tool result: incompressible, so a dozen of them overflow 1 MiB.
RESULT_BYTES = 120_000


def big_agent(effects: list) -> AgentDefinition:
    """An agent whose tool records its effect in ``effects`` and returns ``RESULT_BYTES`` of hex."""

    async def happened(ctx) -> Reconciled | None:
        found = [n for key, n in effects if key == ctx.idempotency_key]
        return Reconciled(_payload(found[0])) if found else None

    @tool(name="effect", on_unknown_outcome="reconcile", reconcile=happened)
    async def effect(n: int, *, ctx) -> str:
        effects.append((ctx.idempotency_key, n))
        return _payload(n)

    return AgentDefinition(name="big-agent", model=StepModel(STEPS), tools=[effect])


def _payload(n: int) -> str:
    return hashlib.shake_256(str(n).encode()).hexdigest(RESULT_BYTES // 2)


async def _stored(store, stream: StreamId) -> dict[int, bytes]:
    return {record.seq: record.data async for record in store.read(stream)}


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs at ``tmp_path / "disk"``; yields a function that grows it to 64 MiB. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        yield disk, lambda: subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
async def test_a_full_disk_fails_typed_loses_nothing_and_the_agent_resumes(tiny_disk, scheme) -> None:
    disk, grow = tiny_disk
    url = f"sqlite:///{disk / 'agents.db'}" if scheme == "sqlite" else (disk / "store").as_uri()
    effects: list = []
    policy = SnapshotPolicy(every_records=0)  # only the journal, so the disk fills with records
    async with Runtime(url, agents=[big_agent(effects)], snapshot_policy=policy) as rt:
        handle = await rt.start("big-agent", "filler", "fill the disk")
        with pytest.raises(StoreUnavailableError):
            await handle.wait()
        stream = rt.stream("filler")
        before = await _stored(rt.store, stream)
        assert before and (await rt.status("filler")).status == "running", "the disk filled before the agent finished"
        grow()
        resumed = await rt.resume("filler")
        state = await resumed.wait()
        after = await _stored(rt.store, stream)
    assert state.status == "finished", (state.status, state.reason)
    assert state.result == f"done {[_payload(n) for n in range(1, STEPS + 1)]}"
    assert {seq: after.get(seq) for seq in before} == before, (
        "every record acknowledged before the disk filled is intact"
    )
    assert sorted(n for _, n in effects) == list(range(1, STEPS + 1)), "each effect exactly once"


def _faulty(server, times: int) -> None:
    for method, kind in (("PUT", "slowdown"), ("GET", "internal"), ("PUT", "internal"), ("GET", "slowdown")):
        server.inject(Fault(method, "/data/", kind, times=times))
    server.inject(Fault("GET", "/data/", "stall", times=2, delay=2.5))


async def test_s3_5xx_and_timeouts_are_ridden_out_then_a_lasting_outage_fails_typed(s3_server, tmp_path) -> None:
    url = s3_server.url(f"faults-{tmp_path.name}", read_timeout=1, max_attempts=12, deadline=30)
    effects: list = []
    async with Runtime(url, agents=[big_agent(effects)], snapshot_policy=SnapshotPolicy(every_records=4)) as rt:
        _faulty(s3_server, times=3)
        states = [await rt.run("big-agent", f"through-faults-{n}", "count") for n in range(2)]
        assert sum(fault.hits for fault in s3_server._faults) > 10, "the faults were hit"
        s3_server.clear_faults()
        assert [s.status for s in states] == ["finished", "finished"]
        assert sorted(n for _, n in effects) == sorted(list(range(1, STEPS + 1)) * 2), "no effect twice"

    effects.clear()
    brief = s3_server.url(f"faults-{tmp_path.name}", read_timeout=1, max_attempts=3, deadline=5)  # gives up soon
    async with Runtime(brief, agents=[big_agent(effects)], snapshot_policy=SnapshotPolicy(every_records=4)) as rt:
        handle = await rt.start("big-agent", "outage", "count")
        for method in ("GET", "PUT", "POST", "DELETE", "HEAD"):
            s3_server.inject(Fault(method, "", "internal", times=1 << 30))
        try:
            with pytest.raises(StoreUnavailableError):
                await handle.wait()
        finally:
            s3_server.clear_faults()
        state = await (await rt.resume("outage")).wait()
    assert state.status == "finished" and sorted(n for _, n in effects) == list(range(1, STEPS + 1))
