"""An agent's journal as an operator reads it: typed, decoded records with a one-line summary.

``history`` streams the records of one stream in seq order, page by page from
the store, so its memory stays flat however long the journal (the store's
``read`` pages; nothing here keeps what it yielded). Each ``HistoryEntry``
carries the record's seq, kind, the wall-clock time it was appended, a summary
a person can scan, and the decoded data when asked for (``payload=True``).
It needs only a store and a codec, not a running agent, so any process can
read any agent: the CLI (``durably history``), the web console, a script.
The idea is the event store's "read stream forward" (EventStoreDB) and
LangGraph's ``get_state_history``. A LangGraph thread's records (``threads``)
read as ``checkpoint``, ``writes``, ``deleted`` and ``copied_in`` entries.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._loop.state import utc_iso
from durably._reading import threads
from durably.errors import AgentNotFoundError, InvalidCommandError
from durably.schemas._records import KINDS, Kind, Record
from durably.storage._spi import Store, StreamId

_CLIP = 80  # characters of free text a summary quotes


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One journal record, decoded.

    Attributes:
        seq: The record's seq, from 1.
        kind: A ``Kind`` value.
        at: Unix seconds: when it was appended.
        summary: One line, untrusted text quoted from the model, tools and
            users: neutralise it before showing it on a terminal.
        payload: The record's data dict, or None unless asked for.
    """

    seq: int
    kind: str
    at: float
    summary: str
    payload: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry in the CLI's and console's JSON shape.

        Returns:
            ``{"seq", "kind", "at", "summary"}``, plus ``payload`` only when present.
        """
        out: dict[str, Any] = {"seq": self.seq, "kind": self.kind, "at": self.at, "summary": self.summary}
        if self.payload is not None:
            out["payload"] = self.payload
        return out


def check_kinds(kinds: Iterable[str] | None) -> frozenset[str] | None:
    """``kinds`` as a set, or None for all. Raises ``InvalidCommandError`` naming an unknown kind."""
    if kinds is None:
        return None
    wanted = frozenset(str(k) for k in kinds)
    known = KINDS | frozenset(threads.THREAD_KINDS.values())
    unknown = sorted(wanted - known)
    if unknown:
        raise InvalidCommandError(f"unknown record kind {unknown[0]!r} (kinds: {', '.join(sorted(known))})")
    return wanted


async def history(
    store: Store,
    codec: RecordCodec,
    stream: StreamId,
    *,
    after_seq: int = 0,
    kinds: Iterable[str] | None = None,
    payload: bool = False,
) -> AsyncIterator[HistoryEntry]:
    """Yield the records of ``stream`` with seq > ``after_seq`` (int >= 0) as ``HistoryEntry``.

    ``kinds``: only records of these kinds (None: all); ``payload``: include
    each record's data. Raises ``AgentNotFoundError`` when the stream has no
    records, ``InvalidCommandError`` for a negative ``after_seq`` or an unknown
    kind, ``CorruptRecordError`` / ``UnknownSchemaVersionError`` at the first
    record that cannot be read (the entries before it were yielded), and
    ``StoreUnavailableError``.
    """
    if type(after_seq) is not int or after_seq < 0:
        raise InvalidCommandError(f"after_seq must be an int >= 0, got {after_seq!r}")
    wanted = check_kinds(kinds)
    if await store.last_seq(stream) == 0:
        raise AgentNotFoundError(f"no agent {stream.agent_id!r} in namespace {stream.namespace!r}")
    reader = JournalReader(store, codec, stream)
    async for stored in store.read(stream, after_seq):
        if threads.is_thread_frame(stored.data):  # a LangGraph thread: its own records
            kind, at, summary, data = threads.thread_entry(codec.codec, stored, stream)
            if wanted is None or kind in wanted:
                yield HistoryEntry(stored.seq, kind, at, summary, data if payload else None)
            continue
        record = await reader.decode(stored)
        if wanted is not None and record.kind not in wanted:
            continue
        yield HistoryEntry(record.seq, record.kind, record.at, summarize(record), record.data if payload else None)


def summarize(record: Record) -> str:
    """One line saying what ``record`` is about (free text clipped to 80 characters)."""
    d = record.data
    try:
        return _SUMMARIES[record.kind](d)
    except (KeyError, TypeError, AttributeError, IndexError):
        return f"{record.kind} (fields: {', '.join(sorted(map(str, d)))})"


def clip(value: Any, limit: int = _CLIP) -> str:
    """``value`` as one short line: text as it is, anything else as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_text(name: Any, arguments: Any) -> str:
    """``name(arguments as JSON)``, clipped: what a tool call would run."""
    return f"{name}({clip(arguments, _CLIP)})"


def _model(d: dict[str, Any]) -> str:
    calls = ", ".join(call_text(c["name"], c["arguments"]) for c in d["tool_calls"])
    usage = d["usage"]
    model = d.get("model", "model")
    if d.get("stop_reason") == "refused":
        model = f"{model} refused"
    head = f"{model}: {clip(d['text'], 60)!s}" if d["text"] else model
    tokens = f"[{usage['input_tokens']}+{usage['output_tokens']} tokens]"
    return f"{head} -> {calls} {tokens}" if calls else f"{head} {tokens}"


def _result(d: dict[str, Any]) -> str:
    outcome = f"error: {clip(d['error'])}" if d.get("error") is not None else f"ok: {clip(d.get('result'))}"
    return f"{d['tool']} call {d['call_id']} {'reconciled ' if d.get('reconciled') else ''}{outcome}"


def _decided(d: dict[str, Any]) -> str:
    by = f" by {d['by']}" if d.get("by") else ""
    note = f": {clip(d['note'])}" if d.get("note") else ""
    happened = " (it happened; result given)" if "result" in d else ""
    return f"approval {d['approval_id']} {'approved' if d['approved'] else 'denied'}{by}{happened}{note}"


_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    Kind.STARTED: lambda d: f"started {d['definition']['name']} v{d['definition']['version']}: {clip(d['task'])}",
    Kind.RESUMED: lambda d: f"resumed by {d['worker']} (pid {d['pid']})",
    Kind.MESSAGE_RECEIVED: lambda d: f"{d['role']} message: {clip(d['content'])}",
    Kind.MODEL_RESPONDED: _model,
    Kind.TOOL_INTENT: lambda d: f"{d['tool']} call {d['call_id']} starts (attempt {d['attempt']})",
    Kind.TOOL_RESULT: _result,
    Kind.PLAN_UPDATED: lambda d: f"plan: {clip('; '.join(map(str, d['plan'])))}",
    Kind.ARTIFACT_STORED: lambda d: f"artifact {d['name']} ({d['size']} bytes)",
    Kind.APPROVAL_REQUESTED: lambda d: (
        f"approval {d['approval_id']} asked: {call_text(d['tool'], d['arguments'])}: {d['reason']}"
    ),
    Kind.APPROVAL_DECIDED: _decided,
    Kind.BUDGET_EXCEEDED: lambda d: f"budget: {d['limit']} limit {d['allowed']} reached ({d['spent']})",
    Kind.BUDGET_EXTENDED: lambda d: f"budget now {clip(d['budget'])}",
    Kind.HISTORY_COMPACTED: lambda d: (
        "conversation replaced" if "messages" in d else f"{d['count']} messages from {d['first']} compacted"
    ),
    Kind.FINISHED: lambda d: f"finished: {clip(d['result'])}",
    Kind.FAILED: lambda d: f"failed: {clip(d['reason'])}",
    Kind.CANCELLED: lambda d: f"cancelled: {clip(d.get('reason', ''))}",
    Kind.DEFINITION_CHANGED: lambda d: (
        f"definition {d['previous']['version']} -> {d['definition']['version']} ({d['policy']})"
    ),
    Kind.FORKED: lambda d: f"fork of {d['namespace']}/{d['agent_id']} at seq {d['seq']}",
    Kind.TOOL_FAILED: lambda d: (
        f"{d['tool']} call {d['call_id']} attempt {d['attempt']} {'timed out' if d['timed_out'] else 'failed'}: "
        f"{clip(d['error'])}; retry in {d['retry_in']:.2f}s"
    ),
    Kind.TOOL_HEARTBEAT: lambda d: (
        f"{d['tool']} call {d['call_id']} attempt {d['attempt']} heartbeat: {clip(d['details'])}"
    ),
    Kind.TIMER_SET: lambda d: (
        f"sleeping until {utc_iso(d['wake_at'])}" + (f" (call {d['call_id']})" if "call_id" in d else "")
    ),
    Kind.TIMER_FIRED: lambda d: f"timer for {utc_iso(d['wake_at'])} fired",
}
