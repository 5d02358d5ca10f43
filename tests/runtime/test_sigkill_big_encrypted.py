"""Attack on off-loop framing with encryption, from outside the process: a worker whose
tool results are large (each frame sealed in a worker thread) is SIGKILLed mid-run.
Every record it left decodes, seqs have no gap, each result is whole; the key is then
rotated and ``reencrypt`` moves the journal to the new key, after which a runtime that
holds only the new key reads it all and finishes the agent without running again an
effect whose result was durable."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.offloop import OFFLOOP_BYTES
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

SUPPORT = Path(__file__).resolve().parents[1] / "support"
STEPS = 12  # the model's last answer quotes every result: under its 4 MiB reply limit
RESULT_CHARS = OFFLOOP_BYTES + 2  # hex text: a payload over the off-loop threshold

WORKER = f"""
import os, sys, anyio
sys.path.insert(0, {str(SUPPORT)!r})
from support_agents import StepModel
from durably import AgentDefinition, Runtime, tool
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider

url, key, effects = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3]

@tool(name="effect", on_unknown_outcome="retry")
async def effect(n: int) -> str:
    with open(effects, "a") as fh:
        fh.write(f"{{n}}\\n"); fh.flush(); os.fsync(fh.fileno())
    return f"{{n}}:" + os.urandom({RESULT_CHARS // 2}).hex()

async def main() -> None:
    cipher = AESGCMCipher(StaticKeyProvider({{"k1": key}}))
    definition = AgentDefinition(name="big", model=StepModel({STEPS}), tools=[effect])
    async with Runtime(url, agents=[definition], encryption=cipher) as rt:
        await rt.run("big", "a1", "go")

anyio.run(main)
"""


def ran(effects: Path) -> list[int]:
    return [int(line) for line in effects.read_text().split()] if effects.exists() else []


def results(state) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {m["tool_call_id"]: m["content"] for m in state.messages if m["role"] == "tool"}


async def test_a_worker_killed_mid_run_with_large_sealed_results_leaves_a_readable_rotatable_journal(
    tmp_path: Path,
) -> None:
    url, effects = f"sqlite:///{tmp_path}/agents.db", tmp_path / "effects"
    old, new = generate_key(), generate_key()
    worker = await anyio.open_process([sys.executable, "-c", WORKER, url, old.hex(), str(effects)])
    try:
        with anyio.fail_after(60):
            while len(ran(effects)) < 4 and worker.returncode is None:
                await anyio.sleep(0.005)
    finally:
        if worker.returncode is None:
            worker.send_signal(signal.SIGKILL)
        await worker.wait()
    assert worker.returncode == -signal.SIGKILL, "the worker ended before it was killed"

    @tool(name="effect", on_unknown_outcome="retry")  # as the worker's: the killed attempt may run again
    async def effect(n: int) -> str:
        with effects.open("a") as fh:
            fh.write(f"{n}\n")
        return f"{n}:" + os.urandom(RESULT_CHARS // 2).hex()

    definition = AgentDefinition(name="big", model=StepModel(STEPS), tools=[effect])
    async with open_store(url) as store:
        seqs = [r.seq async for r in store.read(StreamId("default", "a1"))]
    assert seqs == list(range(1, len(seqs) + 1))

    old_only = AESGCMCipher(StaticKeyProvider({"k1": old}))
    async with Runtime(url, agents=[definition], encryption=old_only) as rt:
        killed = await rt.status("a1")
    durable = results(killed)
    assert durable and all(len(text.split(":", 1)[1]) == RESULT_CHARS for text in durable.values())
    assert {int(call_id[1:]) for call_id in durable} <= set(ran(effects))

    rotated = AESGCMCipher(StaticKeyProvider({"k1": old, "k2": new}, current="k2"))
    async with Runtime(url, agents=[definition], encryption=rotated) as rt:
        reports = await rt.reencrypt(wait=5)
    assert reports

    new_only = AESGCMCipher(StaticKeyProvider({"k2": new}))
    async with Runtime(url, agents=[definition], encryption=new_only) as rt:
        assert results(await rt.status("a1")) == durable  # all of it, under the new key alone
        before = len(ran(effects))
        handle = await rt.resume("a1")
        state = await handle.wait() if handle is not None else await rt.status("a1")
    assert state.status == "finished", state.reason
    again = ran(effects)[before:]
    assert not any(f"c{n}" in durable for n in again), "a durable result's effect ran again"
    assert len(again) == len(set(again)) == STEPS - len(durable)
    final = results(state)
    assert {k: v for k, v in final.items() if k in durable} == durable
    assert sorted(int(k[1:]) for k in final) == list(range(1, STEPS + 1))
