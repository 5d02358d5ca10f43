"""The live model gets each redacted text's own original back.

Two messages "use key sk-aaa..." and "use key sk-bbb..." mask to the same
stored text; the originals are kept by record and position, so the model's
view shows each message's own key. The same holds for tool results of a
provider that reuses one call id on every turn.
"""

from __future__ import annotations

import anyio

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, tool

KEY_A = "sk-" + "a" * 32
KEY_B = "sk-" + "b" * 32


async def test_two_messages_masking_alike_keep_their_own_secrets_in_the_model_view():
    seen: list[list[dict]] = []
    gate = anyio.Event()

    @tool(name="noop")
    async def noop(*, ctx) -> str:
        return "ok"

    class Recorder:
        name = "recorder"

        async def respond(self, messages, tools):
            seen.append([dict(m) for m in messages])
            if len(seen) == 1:
                await gate.wait()  # the operator's message arrives while the model thinks
                return ModelResponse("", (ToolCall("c1", "noop", {}),))
            return ModelResponse("done")

    definition = AgentDefinition(name="rec", model=Recorder(), tools=[noop])
    async with Runtime("memory://", agents=[definition]) as rt:
        handle = await rt.start(definition, "a1", f"use key {KEY_A}")
        while not seen:
            await anyio.sleep(0.01)
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.send, "a1", f"use key {KEY_B}")
            await anyio.sleep(0.05)
            gate.set()
        state = await handle.wait()
        stored = [m["content"] for m in state.messages if m["role"] == "user"]
        assert stored[0] == stored[1] == "use key [REDACTED:openai-key]"
    contents = [m["content"] for m in seen[-1] if m["role"] == "user"]
    assert contents == [f"use key {KEY_A}", f"use key {KEY_B}"]  # main: KEY_B twice


async def test_tool_results_under_a_reused_call_id_keep_their_own_secrets():
    seen: list[list[dict]] = []

    @tool(name="fetch")
    async def fetch(n: int, *, ctx) -> str:
        return f"token {KEY_A if n == 1 else KEY_B}"

    class SameId:
        name = "same-id"

        async def respond(self, messages, tools):
            seen.append([dict(m) for m in messages])
            done = sum(m["role"] == "tool" for m in messages)
            if done < 2:
                return ModelResponse("", (ToolCall("call", "fetch", {"n": done + 1}),))
            return ModelResponse("done")

    definition = AgentDefinition(name="same", model=SameId(), tools=[fetch])
    async with Runtime("memory://", agents=[definition]) as rt:
        assert (await rt.run(definition, "a1", "go")).status == "finished"
    tools = [m["content"] for m in seen[-1] if m["role"] == "tool"]
    assert tools == [f"token {KEY_A}", f"token {KEY_B}"]  # main: KEY_B twice
