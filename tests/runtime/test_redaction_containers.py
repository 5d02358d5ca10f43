"""Attack on redaction: a secret inside a tuple, a set or a frozenset (values the codec
stores as such) is redacted as it is inside a list, whether the record takes the quick
"nothing here" verdict or the full path; the value keeps its type where it can."""

from __future__ import annotations

from typing import Any

import pytest
from support_agents import StepModel

from durably import AgentDefinition, Runtime, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.redaction_policy import RedactionPolicy, TokenPattern
from durably._journal.redactor import Redactor
from durably.schemas._records import Kind

TOKEN = "sk-" + "a1B2" * 8
GATED = RedactionPolicy()  # every pattern has hints: records may take the quick verdict
FULL = RedactionPolicy(token_patterns=(*GATED.token_patterns, TokenPattern("unhinted", r"zq\d{9}", ())))


def leaks(value: Any) -> bool:
    if type(value) is str:
        return TOKEN in value
    if type(value) is dict:
        return any(leaks(k) or leaks(v) for k, v in value.items())
    if type(value) in (list, tuple, set, frozenset):
        return any(leaks(v) for v in value)
    return False


RESULTS = {
    "tuple": ("key", TOKEN),
    "set": {TOKEN, "other"},
    "frozenset": frozenset({f"Bearer {TOKEN}"}),
    "nested": [{"creds": ("x", [TOKEN])}],
    "named-in-tuple": ({"password": "hunter2-long-enough"},),
}


@pytest.mark.parametrize("policy", [GATED, FULL], ids=["gated", "full"])
@pytest.mark.parametrize("name", sorted(RESULTS))
def test_a_secret_inside_a_tuple_or_set_is_redacted(policy: RedactionPolicy, name: str) -> None:
    value = RESULTS[name]
    data = {"key": "k", "call_id": "c", "tool": "t", "result": value, "error": None}
    out = Redactor(policy).redact(Kind.TOOL_RESULT, data, "a", 5)["result"]
    assert not leaks(out) and "hunter2" not in repr(out), out
    if name in ("tuple", "set", "frozenset"):
        assert type(out) is type(value)


async def test_a_tool_returning_a_tuple_with_a_token_stores_no_token() -> None:
    @tool(name="effect")
    async def effect(n: int) -> tuple[str, str]:
        return ("key", TOKEN)

    definition = AgentDefinition(name="t", model=StepModel(1), tools=[effect])
    async with Runtime("memory://", agents=[definition], redaction=GATED) as rt:
        state = await rt.run("t", "a1", "go")
        codec, stream = RecordCodec(), rt.stream("a1")
        raw = [stored.data async for stored in rt.store.read(stream)]
        records = [record async for record in JournalReader(rt.store, codec, stream).records()]
    assert state.status == "finished"
    results = [r.data["result"] for r in records if r.kind == Kind.TOOL_RESULT]
    assert results and not any(leaks(r) for r in results), results
    assert not any(TOKEN.encode() in frame for frame in raw)
