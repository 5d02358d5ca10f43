"""``AgentState.call_ids``: the tool call ids of the whole conversation, kept as turns are folded in,
and built again when the conversation is rewritten (compaction in place, a new list, a deep copy)."""

from __future__ import annotations

import copy
from typing import Any

from durably._loop.state import AgentState, apply
from durably.schemas._records import Kind, Record


def _turn(state: AgentState, *ids: str) -> None:
    calls = [{"id": i, "name": "note", "arguments": {}, "key": f"k-{i}"} for i in ids]
    data: dict[str, Any] = {
        "text": "",
        "tool_calls": calls,
        "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0},
    }
    apply(state, Record(state.last_seq + 1, Kind.MODEL_RESPONDED, data, 0.0))
    for i in ids:
        result = {"key": f"k-{i}", "call_id": i, "tool": "note", "result": "ok"}
        apply(state, Record(state.last_seq + 1, Kind.TOOL_RESULT, result, 0.0))


def _scanned(state: AgentState) -> set[str]:
    return {c["id"] for m in state.messages for c in m.get("tool_calls") or ()}


def _started() -> AgentState:
    state = AgentState()
    started = {"namespace": "n", "agent_id": "a", "run_id": "r", "definition": {}, "task": "t", "budget": {}}
    return apply(state, Record(1, Kind.STARTED, started, 0.0))


def test_ids_grow_with_each_turn_folded_in() -> None:
    state = _started()
    assert state.call_ids() == set()
    _turn(state, "x", "y")
    assert state.call_ids() == {"x", "y"}
    _turn(state, "z")
    assert state.call_ids() == {"x", "y", "z"} == _scanned(state)


def test_compaction_in_place_drops_the_ids_it_removed() -> None:
    state = _started()
    _turn(state, "x")
    _turn(state, "y")
    assert state.call_ids() == {"x", "y"}
    # Drop the first turn (its assistant message and its tool message), keeping a summary.
    compacted = {"first": 1, "count": 2, "summary": "x was noted"}
    apply(state, Record(state.last_seq + 1, Kind.HISTORY_COMPACTED, compacted, 0.0))
    assert state.call_ids() == {"y"} == _scanned(state)
    _turn(state, "x")  # the id is free again: nothing in the conversation holds it
    assert state.call_ids() == {"x", "y"} == _scanned(state)


def test_a_new_messages_list_or_a_copy_is_scanned_afresh() -> None:
    state = _started()
    _turn(state, "x")
    assert state.call_ids() == {"x"}
    state.messages = [m for m in state.messages if not m.get("tool_calls")]
    assert state.call_ids() == set()
    _turn(state, "y")
    twin = copy.deepcopy(state)
    _turn(twin, "z")
    assert twin.call_ids() == {"y", "z"} == _scanned(twin)
    assert state.call_ids() == {"y"} == _scanned(state)


def test_the_ids_are_not_snapshotted() -> None:
    state = _started()
    _turn(state, "x")
    state.call_ids()
    assert "_call_ids" not in state.to_wire()
    assert AgentState.from_wire(state.to_wire()).call_ids() == {"x"}
