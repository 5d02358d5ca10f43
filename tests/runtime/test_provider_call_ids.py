"""A provider that repeats tool call ids, within one reply and across turns, through
the real OpenAI client: every call the run journals has its own id, and every later
request passes a server that refuses a conversation repeating a ``tool_call_id``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiohttp import web
from model_servers import ScriptedServer, Step, openai_completion, reply

from durably import AgentDefinition, RetryPolicy, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.models.openai import OpenAIChatModel
from durably.schemas._records import Kind

ran: list[str] = []


@tool
async def note(text: str) -> str:
    """Write a note down.

    Args:
        text: what to write.
    """
    ran.append(text)
    return f"noted {text}"


def strict(body: dict[str, Any]) -> Step:
    """Answer ``body`` unless the request repeats a tool call id, as the provider does (400)."""

    def answer(request: dict[str, Any]) -> Any:
        ids = [c["id"] for m in request["messages"] for c in m.get("tool_calls") or ()]
        repeated = [i for i, n in Counter(ids).items() if n > 1]
        if repeated:
            error = {"message": f"duplicate tool_call_id {repeated}", "type": "invalid_request_error"}
            return web.json_response({"error": {**error, "code": None, "param": None}}, status=400)
        return reply(body)(request)

    return answer


async def test_repeated_call_ids_are_made_unique_in_the_whole_conversation() -> None:
    ran.clear()
    steps = [
        # Twice the id durably generates for the second call of turn 1, in one reply.
        strict(openai_completion(calls=[("call-1-1", "note", '{"text": "a"}'), ("call-1-1", "note", '{"text": "b"}')])),
        # The same id again on the next turn, and the generated id of the first call of turn 1.
        strict(openai_completion(calls=[("call-1-1", "note", '{"text": "c"}'), ("", "note", '{"text": "d"}')])),
        strict(openai_completion(calls=[("call-2-1", "note", '{"text": "e"}')])),
        strict(openai_completion(content="all noted")),
    ]
    async with ScriptedServer("/v1/chat/completions", steps) as server:
        model = OpenAIChatModel("gpt-test", base_url=f"{server.url}/v1", api_key="sk-test")
        definition = AgentDefinition(
            name="notes", model=model, tools=[note], retry=RetryPolicy(attempts=1, initial_s=0.01, jitter_s=0)
        )
        async with Runtime("memory://", agents=[definition]) as rt:
            state = await rt.run("notes", "n1", "Take notes")
            codec, stream = RecordCodec(), rt.stream("n1")
            records = [record async for record in JournalReader(rt.store, codec, stream).records()]
    assert state.status == "finished" and state.result == "all noted", state.reason
    assert sorted(ran) == ["a", "b", "c", "d", "e"]
    ids = [c["id"] for r in records if r.kind == Kind.MODEL_RESPONDED for c in r.data.get("tool_calls") or ()]
    assert len(ids) == 5 and len(set(ids)) == 5, ids
    assert len(server.requests) == 4
    final = server.requests[-1]["messages"]
    answered = [m["tool_call_id"] for m in final if m["role"] == "tool"]
    assert sorted(answered) == sorted(ids)
