"""The conversation's call ids, kept without a rescan per step: each message is read once,
and what a step appends, inserts or compacts away is reflected (a superset never misses an id)."""

from __future__ import annotations

from typing import Any

from durably._loop.call_ids import ConversationCallIds


class CountingMessage(dict[str, Any]):
    """A message that counts how often its calls are read."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingMessage.reads += 1
        return super().get(key, default)


def assistant(*ids: str) -> dict[str, Any]:
    return CountingMessage(role="assistant", content="", tool_calls=[{"id": i, "name": "t"} for i in ids])


def tool_result(call_id: str) -> dict[str, Any]:
    return CountingMessage(role="tool", tool_call_id=call_id, content="ok")


def test_each_message_is_read_once_however_many_steps() -> None:
    ids, messages = ConversationCallIds(), [CountingMessage(role="user", content="go")]
    CountingMessage.reads = 0
    for step in range(200):
        assert f"c{step}" not in ids.of(messages)
        messages += [assistant(f"c{step}"), tool_result(f"c{step}")]
        assert f"c{step}" in ids.of(messages)
    assert CountingMessage.reads == 1 + 2 * 200, "no message is scanned twice"


def test_an_insert_before_the_end_skips_no_message() -> None:
    ids, messages = ConversationCallIds(), [assistant("a", "b"), tool_result("b")]
    assert ids.of(messages) == {"a", "b"}
    messages.insert(1, tool_result("a"))  # a result placed in call order, before a later one
    messages.append(assistant("c"))
    assert ids.of(messages) == {"a", "b", "c"}


def test_a_shorter_or_another_conversation_is_scanned_whole() -> None:
    ids, messages = ConversationCallIds(), [assistant("a"), tool_result("a"), assistant("b"), tool_result("b")]
    assert ids.of(messages) == {"a", "b"}
    messages[0:2] = []  # compacted away without a summary
    assert ids.of(messages) == {"b"}
    restored = [assistant("x")]
    assert ids.of(restored) == {"x"}, "a restored state's list is not the cached one"


def test_an_idempotency_key_is_the_one_existing_journals_hold() -> None:
    """A function agent derives its calls' keys again on every activation to find them in its
    ledger: the key of given coordinates never changes (these are SHA-256's, 32 hex chars)."""
    from durably._tools.tool import idempotency_key

    assert idempotency_key("default", "agent-1", "run-1", "position:1") == "f768c1d9ea87e015e594c757b10d6ad9"
    assert idempotency_key("ns", "a", "r", "1:0:call-1-0") == "e87bad0ce4caea0280efcee1c7b021a2"
