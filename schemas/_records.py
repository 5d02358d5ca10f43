"""The journal's record kinds and the wire shape of records and snapshots.

A record is the CBOR map ``{"s": seq, "k": kind, "t": unix seconds, "d": data}``;
a snapshot is ``{"s": seq, "state": {...}}``. ``record-v1.cddl`` and
``snapshot-v1.cddl`` beside this module describe them in CDDL (RFC 8610),
``frame.cddl`` the frame header; one file per schema version, frozen once
released. ``upcasters.py`` lifts older versions to the current one.
This module imports nothing of durably: it is the vocabulary everyone shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

#: Frame schema ids (one byte in the frame header) and their names.
RECORD_SCHEMA_ID = 1
SNAPSHOT_SCHEMA_ID = 2
SCHEMA_NAMES = {RECORD_SCHEMA_ID: "durably.record", SNAPSHOT_SCHEMA_ID: "durably.snapshot"}

#: The version this build writes for each schema id; it reads this and older ones.
CURRENT_VERSIONS = {RECORD_SCHEMA_ID: 5, SNAPSHOT_SCHEMA_ID: 6}


class Kind(StrEnum):
    """Every record kind of an agent's journal."""

    STARTED = "started"  # the task, the agent definition's name, version and digest, the run id
    RESUMED = "resumed"  # a worker took the agent over (worker id, pid; version 4: its trace reference)
    MESSAGE_RECEIVED = "message_received"  # a message delivered to the agent's conversation
    MODEL_RESPONDED = "model_responded"  # the model's answer: text, tool calls, usage
    TOOL_INTENT = "tool_intent"  # a tool call is about to run (durable before the side effect)
    TOOL_RESULT = "tool_result"  # its outcome (after the side effect)
    PLAN_UPDATED = "plan_updated"
    ARTIFACT_STORED = "artifact_stored"  # a reference (digest, size, name) to a blob
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    BUDGET_EXCEEDED = "budget_exceeded"
    BUDGET_EXTENDED = "budget_extended"
    HISTORY_COMPACTED = "history_compacted"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # resumed under a changed definition (policy continue or migrate): old and new
    # definition info and, for migrate, the state fields the user's hook rewrote
    DEFINITION_CHANGED = "definition_changed"
    # (version 2) the first record after a copied history: this agent is a fork of
    # another one (its namespace, agent id, run id) at that agent's seq
    FORKED = "forked"
    MODEL_FAILED = "model_failed"  # (version 3) one failed model attempt: number, error type, no content
    RETRIED = "retried"  # (version 3) an operator resumed a failed agent (Runtime.retry)
    # (version 5) one failed tool attempt that another follows (error type and message,
    # attempt, timed out or not, the pause chosen): journaled before the pause
    TOOL_FAILED = "tool_failed"
    TOOL_HEARTBEAT = "tool_heartbeat"  # (version 5) a running tool's progress details (ctx.heartbeat), rate-limited
    TIMER_SET = "timer_set"  # (version 5) the agent parks until a time (wake_at)
    TIMER_FIRED = "timer_fired"  # (version 5) its timer fired: it runs on
    # (version 5) in a parent: a tool call started a child agent (its id, definition); the parent waits for it
    CHILD_STARTED = "child_started"
    # (version 5) in a parent: that child ended (its status, result or error), the call's result
    CHILD_ENDED = "child_ended"


KINDS = frozenset(k.value for k in Kind)


class WireShapeError(ValueError):
    """A decoded value does not have the shape of a record or snapshot."""


@dataclass(frozen=True, slots=True)
class Record:
    """One journal entry: ``seq`` (int, from 1), ``kind`` (a ``Kind`` value),
    ``data`` (plain-data dict), ``at`` (unix seconds, float)."""

    seq: int
    kind: str
    data: dict[str, Any]
    at: float

    def to_wire(self) -> dict[str, Any]:
        """The CBOR map stored for this record."""
        return {"s": self.seq, "k": self.kind, "t": self.at, "d": self.data}

    @classmethod
    def from_wire(cls, value: Any) -> Record:
        """Rebuild a record; raises ``WireShapeError`` when ``value`` is not one."""
        if not isinstance(value, dict):
            raise WireShapeError(f"record is a {type(value).__name__}, not a map")
        try:
            seq, kind, at, data = value["s"], value["k"], value["t"], value["d"]
        except KeyError as exc:
            raise WireShapeError(f"record lacks field {exc.args[0]!r}") from None
        if type(seq) is not int or kind not in KINDS or not isinstance(at, (int, float)) or not isinstance(data, dict):
            raise WireShapeError("record fields have the wrong types or an unknown kind")
        return cls(seq, kind, data, float(at))


def snapshot_to_wire(seq: int, state: dict[str, Any]) -> dict[str, Any]:
    """The CBOR map stored for a snapshot of ``state`` (a plain dict) at ``seq``."""
    return {"s": seq, "state": state}


def snapshot_from_wire(value: Any) -> tuple[int, dict[str, Any]]:
    """``(seq, state)`` from a snapshot map; raises ``WireShapeError``."""
    if not isinstance(value, dict) or type(value.get("s")) is not int or not isinstance(value.get("state"), dict):
        raise WireShapeError("snapshot is not a map with int 's' and map 'state'")
    return value["s"], value["state"]


#: Upcasters: ``(schema_id, version) -> fn(value) -> value at version + 1``.
#: Each version after the first adds one entry, registered with
#: ``durably.schemas._upcasters.upcaster`` (see that module, which holds them).
UPCASTERS: dict[tuple[int, int], Any] = {}
