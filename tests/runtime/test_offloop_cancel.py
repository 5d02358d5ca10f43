"""Attack on off-loop framing: the runtime is left (its agents cancelled) while a large
tool result is being sealed in a worker thread. The thread is waited for (no work left
running after the runtime is gone, no seal after it), what the journal holds decodes,
and a resume finishes the agent without running the effect again for a result that
was made durable."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.offloop import OFFLOOP_BYTES
from durably.storage._crypto import AESGCMCipher, StaticKeyProvider, generate_key

BIG = os.urandom(OFFLOOP_BYTES).hex()


class GatedCipher(AESGCMCipher):
    """AES-GCM whose seal of a large payload waits at a gate (a worker thread then holds it)."""

    def __init__(self) -> None:
        super().__init__(StaticKeyProvider({"k": generate_key()}))
        self.sealing = threading.Event()
        self.gate = threading.Event()
        self.large_seals_done = 0

    def seal(self, payload: bytes, aad: bytes) -> bytes:
        if len(payload) >= OFFLOOP_BYTES // 4:
            self.sealing.set()
            self.gate.wait(10)
            sealed = super().seal(payload, aad)
            self.large_seals_done += 1
            return sealed
        return super().seal(payload, aad)


def big_agent(model: StepModel) -> tuple[AgentDefinition, list[int]]:
    """``big``, answered by ``model``: each step calls ``effect(n)``, whose result holds ``BIG``
    (a frame large enough to be sealed off the loop); and the list of the ``n`` it ran."""
    effects: list[int] = []

    @tool(name="effect")
    async def effect(n: int) -> str:
        effects.append(n)
        return f"{n}:{BIG}"

    return AgentDefinition(name="big", model=model, tools=[effect]), effects


async def test_leaving_the_runtime_while_a_large_frame_is_sealed_waits_for_it_and_loses_nothing(
    tmp_path: Path,
) -> None:
    cipher, url = GatedCipher(), f"sqlite:///{tmp_path}/agents.db"
    definition, effects = big_agent(StepModel(2, think_s=0.01))
    async with Runtime(url, agents=[definition], encryption=cipher) as rt:
        await rt.start("big", "a1", "go")
        await anyio.to_thread.run_sync(cipher.sealing.wait, 10)
        threading.Timer(0.3, cipher.gate.set).start()  # released while the runtime is being left
    seals_at_exit = cipher.large_seals_done
    assert cipher.gate.is_set() and seals_at_exit >= 1  # the exit waited for the thread's seal
    await anyio.sleep(0.2)
    assert cipher.large_seals_done == seals_at_exit  # no seal (nor write) after the runtime was left

    async with Runtime(url, agents=[definition], encryption=cipher) as rt:
        before = await rt.status("a1")
        durable = {m["tool_call_id"] for m in before.messages if m["role"] == "tool"}
        assert all(m["content"].endswith(BIG) for m in before.messages if m["role"] == "tool")
        ran_before = list(effects)
        handle = await rt.resume("a1")
        state = await handle.wait() if handle is not None else await rt.status("a1")
    assert state.status == "finished", state.reason
    again = effects[len(ran_before) :]
    assert not any(f"c{n}" in durable for n in again), "a durable result's effect ran again"
    assert [m["content"] for m in state.messages if m["role"] == "tool"] == [f"{n}:{BIG}" for n in (1, 2)]


async def test_cancelling_an_agent_while_its_large_frame_is_sealed_starts_nothing_after_the_cancel(
    tmp_path: Path,
) -> None:
    cipher, url = GatedCipher(), f"sqlite:///{tmp_path}/agents.db"
    model = StepModel(3)
    definition, effects = big_agent(model)
    async with Runtime(url, agents=[definition], encryption=cipher) as rt:
        handle = await rt.start("big", "a1", "go")
        await anyio.to_thread.run_sync(cipher.sealing.wait, 10)
        calls_at_cancel = model.calls  # the model's answers so far (the current step's included)
        threading.Timer(0.3, cipher.gate.set).start()  # the seal ends while the cancel is under way
        await rt.cancel("a1", "stop now")
        state = await handle.wait()
        assert state.status == "cancelled"
        history = await rt.status("a1")
        kinds = [entry.kind async for entry in rt.history("a1")]
    # The cancel stops the agent after its current step: no model call after it, and no
    # tool but those the model had asked for before it, each run once.
    assert model.calls == calls_at_cancel and effects == list(range(1, calls_at_cancel + 1))
    assert cipher.large_seals_done >= 1
    assert kinds[-1] == "cancelled" and kinds.count("tool_result") == len(effects)
    assert [m["content"] for m in history.messages if m["role"] == "tool"] == [f"{n}:{BIG}" for n in effects]
