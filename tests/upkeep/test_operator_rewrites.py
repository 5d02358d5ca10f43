"""Operator rewrites never discard a live worker's work.

A worker is inside a tool call (its effect happened; it holds the result to
journal). ``reencrypt`` must not rewrite the stream under it: the stream is
reported ``held`` (who holds it said) or waited for, the worker's result is
journaled, the effect ran once, and no unknown outcome is left to decide.
``durably purge`` refuses such an agent and names the worker (``--force``
purges it anyway); a sweep reports it ``held``.

Real SQLite (a store with leases) and real runtimes: the worker and the operator
are two runtimes, as two processes would be; the purge goes through the CLI in
a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest
from support_agents import StepModel

from durably import AgentDefinition, RetentionPolicy, Runtime, tool
from durably._upkeep.reencrypt import COMPACTED, HELD
from durably.errors import AgentLeaseLostError, AgentNotFoundError
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key

pytestmark = pytest.mark.anyio

K1, K2 = generate_key(), generate_key()
WORKER_ID = "pay-worker-7"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def cipher(current: str) -> AESGCMCipher:
    return AESGCMCipher(StaticKeyProvider({"k1": K1, "k2": K2}, current))


class Gate:
    """A payment tool that stops inside its call (after the effect) until the test lets it return."""

    def __init__(self, policy: str = "retry") -> None:
        self.entered, self.release = anyio.Event(), anyio.Event()
        self.effects: list[str] = []

        @tool(name="pay", on_unknown_outcome=policy)
        async def pay(n: int, *, ctx) -> int:
            self.effects.append(ctx.idempotency_key)  # the money moved
            self.entered.set()
            await self.release.wait()
            return n * 10

        self.definition = AgentDefinition(name="payer", model=StepModel(1, tool_name="pay"), tools=[pay])


def durably(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably._cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250", **(env or {})},
        stdin=subprocess.DEVNULL,  # no terminal: the command does as told
    )


async def test_reencrypt_leaves_a_worker_inside_a_tool_call_alone_and_keeps_its_result(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    gate = Gate(policy="retry")  # a lost result would make the payment run again on resume
    async with Runtime(url, agents=[gate.definition], encryption=cipher("k1"), worker_id=WORKER_ID) as worker:
        handle = await worker.start(gate.definition, "p1", "pay the invoice")
        await gate.entered.wait()
        last_seq = await worker.store.last_seq(worker.stream("p1"))
        async with Runtime(url, encryption=cipher("k2")) as operator:
            # Not waiting: the stream is reported held, by whom, and left as it was.
            (held,) = await operator.reencrypt(wait=0)
            assert held.action == HELD
            assert WORKER_ID in held.held_by and str(os.getpid()) in held.held_by
            assert set(held.after) == {"k1"}
            assert await operator.store.last_seq(operator.stream("p1")) == last_seq
            keys = {"DURABLY_KEYS": f"k1={K1.hex()},k2={K2.hex()}", "DURABLY_KEY_ID": "k2"}
            cli = await anyio.to_thread.run_sync(lambda: durably("reencrypt", "--store", url, "--wait", "0", env=keys))
            assert cli.returncode == 1, cli.stdout + cli.stderr  # a stream still under the old key
            assert f"p1: held: worker {WORKER_ID!r} on host" in cli.stdout and f"(pid {os.getpid()})" in cli.stdout
            assert await operator.store.last_seq(operator.stream("p1")) == last_seq
            # Waiting: the rewrite happens once the worker has journaled its result and finished.
            reports: list = []
            async with anyio.create_task_group() as group:

                async def rotate() -> None:
                    reports.extend(await operator.reencrypt(wait=60))

                group.start_soon(rotate)
                gate.release.set()
            final = await handle.wait()
        assert final.status == "finished", final.status
        assert final.result == "done [10]"
        (report,) = reports
        assert report.action == COMPACTED and set(report.after) == {"k2"}
        await worker.resume_all()  # nothing left to resume: no intent without a result
        assert (await worker.status("p1")).status == "finished"
    assert len(gate.effects) == 1, gate.effects  # the payment ran once


async def test_durably_purge_refuses_an_agent_a_live_worker_runs_and_names_it(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    gate = Gate()
    async with Runtime(url, agents=[gate.definition], worker_id=WORKER_ID) as worker:
        handle = await worker.start(gate.definition, "p1", "pay the invoice")
        await gate.entered.wait()
        refused = await anyio.to_thread.run_sync(lambda: durably("purge", "p1", "--store", url, "--yes"))
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "p1: not purged" in refused.stdout
        assert f"worker {WORKER_ID!r}" in refused.stdout and f"(pid {os.getpid()})" in refused.stdout
        assert "--force" in refused.stdout
        assert (await worker.describe("p1")).seq >= 1  # nothing deleted
        forced = await anyio.to_thread.run_sync(lambda: durably("purge", "p1", "--store", url, "--yes", "--force"))
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert "p1: purged" in forced.stdout
        gate.release.set()
        with pytest.raises(
            AgentLeaseLostError
        ):  # forced: the purge ended its lease; its step in flight is lost, as told
            await handle.wait()
        with pytest.raises(AgentNotFoundError):
            await worker.describe("p1")


async def test_a_sweep_keeps_an_expired_agent_a_live_worker_runs(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    gate = Gate()
    async with Runtime(url, agents=[gate.definition], worker_id=WORKER_ID) as worker:
        handle = await worker.start(gate.definition, "p1", "pay the invoice")
        await gate.entered.wait()
        async with Runtime(url) as operator:
            (item,) = await operator.sweep(RetentionPolicy({"running": 0}))
        assert item.outcome == "held" and WORKER_ID in item.error
        gate.release.set()
        assert (await handle.wait()).status == "finished"
    assert len(gate.effects) == 1
