"""An agent's journal as the console's timeline: calls paired with results, crashes named as such.

Rows are built from ``history`` entries, one pass, in seq order: a
``tool_intent`` and its ``tool_result`` (same idempotency key) become one row
saying how the call ended; a ``resumed`` record that follows a running agent
(it was not parked waiting for a decision) is marked as a resume after the
previous activation stopped mid-run: a crash, a kill or a shutdown; one after a
human decision, or after an operator's ``retry`` of a failed agent (marked as
a retry itself), is a plain resume. An intent whose result never came before
the next resume is marked interrupted.

What a row may show of the record's content is decided by ``ContentPolicy``:
by default only the shape (kind, seq, time, tool names, call ids, statuses);
with ``show`` the content too, after the redaction policy masked whatever
looks like a secret (secret-named fields, credential patterns), even if the
record was stored without redaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from durably._journal.redaction_policy import RedactionPolicy
from durably._journal.redactor import Redactor
from durably._reading.history import HistoryEntry, call_text, clip
from durably.schemas._records import Kind

_PARKING = {Kind.APPROVAL_REQUESTED, Kind.BUDGET_EXCEEDED}


@dataclass(frozen=True)
class ContentPolicy:
    """Whether the console sends record content to the page (``show``) and the
    ``redaction`` policy applied to it first (default: ``RedactionPolicy()``)."""

    show: bool = False
    redaction: RedactionPolicy = field(default_factory=RedactionPolicy)

    def view(self, kind: str, data: dict[str, Any], agent: str | None) -> dict[str, Any] | None:
        """The data a page may show for a record (None: nothing of its content)."""
        if not self.show:
            return None
        return Redactor(self.redaction).redact(kind, data, agent)

    def redacted(self, kind: str, data: dict[str, Any], agent: str | None) -> dict[str, Any]:
        """The data of a record after the redaction policy, whatever ``show`` says: for what
        a person must see to decide (the arguments of the call an approval would run)."""
        return Redactor(self.redaction).redact(kind, data, agent)


@dataclass
class Row:
    """One line of the timeline: ``seq`` (of its first record), ``at`` (unix
    seconds), ``kind`` (``call`` for a paired tool call, else the record kind),
    ``title`` (content-free), ``detail`` (content, when the policy allows),
    ``mark`` (``crash``, ``resume``, ``retry``, ``interrupted``, ``failed``,
    ``park`` or ``""``), ``result_seq`` (a call's result record, when it came)."""

    seq: int
    at: float
    kind: str
    title: str
    detail: str = ""
    mark: str = ""
    result_seq: int | None = None


async def timeline(
    entries: AsyncIterator[HistoryEntry],
    content: ContentPolicy,
    agent: str | None,
    limit: int = 500,
    *,
    newest: bool = True,
) -> list[Row]:
    """The rows of ``entries`` (a ``history`` with payloads): the last ``limit`` of them
    (``newest``), or the first ``limit``.

    Memory: the rows kept (``limit``) and the calls still open.
    """
    rows: list[Row] = []
    open_calls: dict[str, Row] = {}
    running_since_resume = False  # True while the agent runs with nobody waiting on a decision
    async for entry in entries:
        data = entry.payload or {}
        shown = content.view(entry.kind, data, agent)
        row = _row(entry, data, shown)
        if entry.kind == Kind.TOOL_INTENT:
            open_calls[data["key"]] = row
        elif entry.kind == Kind.TOOL_RESULT and data.get("key") in open_calls:
            call = open_calls.pop(data["key"])
            call.result_seq = entry.seq
            failed = data.get("error") is not None
            call.title += " failed" if failed else (" reconciled" if data.get("reconciled") else " done")
            call.mark = "failed" if failed else ""
            if shown is not None:
                outcome = shown.get("error") if failed else shown.get("result")
                call.detail = f"{call.detail} -> {clip(outcome, 160)}"
            continue
        elif entry.kind == Kind.RESUMED:
            if running_since_resume:
                row.mark = "crash"
                row.title = f"previous activation stopped mid-run (crash, kill or shutdown); {row.title}"
            else:
                row.mark = "resume"
            for call in open_calls.values():
                call.mark, call.title = "interrupted", call.title + " interrupted (no result before the resume)"
            open_calls.clear()
            running_since_resume = True
        if entry.kind == Kind.STARTED:
            running_since_resume = True
        elif entry.kind in _PARKING:
            running_since_resume, row.mark = False, "park"
        elif entry.kind in (Kind.FAILED, Kind.CANCELLED):
            running_since_resume, row.mark = False, "failed"
        elif entry.kind == Kind.FINISHED:
            running_since_resume = False
        elif entry.kind == Kind.RETRIED:
            running_since_resume, row.mark = False, "retry"
        if not newest and len(rows) >= limit:
            break
        rows.append(row)
        if len(rows) > limit:
            dropped = rows.pop(0)
            open_calls = {k: r for k, r in open_calls.items() if r is not dropped}
    return rows


def _row(entry: HistoryEntry, data: dict[str, Any], shown: dict[str, Any] | None) -> Row:
    kind, d = entry.kind, data
    title_of = _TITLES.get(kind)
    title = title_of(d) if title_of is not None else kind.replace("_", " ")
    detail = _detail(kind, shown) if shown is not None else ""
    return Row(entry.seq, entry.at, "call" if kind == Kind.TOOL_INTENT else kind, title, detail)


def _detail(kind: str, d: dict[str, Any]) -> str:
    if kind == Kind.MODEL_RESPONDED:
        calls = ", ".join(call_text(c.get("name"), c.get("arguments")) for c in d.get("tool_calls") or ())
        return clip(d.get("text", ""), 200) + (f" -> {calls}" if calls else "")
    if kind == Kind.APPROVAL_REQUESTED:
        return call_text(d.get("tool"), d.get("arguments"))
    keys: dict[str, str] = {
        Kind.STARTED: "task",
        Kind.MESSAGE_RECEIVED: "content",
        Kind.FINISHED: "result",
        Kind.FAILED: "reason",
        Kind.RETRIED: "reason",
        Kind.CANCELLED: "reason",
        Kind.APPROVAL_DECIDED: "note",
        Kind.PLAN_UPDATED: "plan",
        Kind.TOOL_FAILED: "error",
        Kind.TOOL_HEARTBEAT: "details",
    }
    return clip(d.get(keys[kind]), 200) if kind in keys and d.get(keys[kind]) not in (None, "") else ""


def _safe(d: dict[str, Any], key: str) -> str:
    return str(d.get(key, "?"))


_TITLES: dict[str, Callable[[dict[str, Any]], str]] = {
    Kind.STARTED: lambda d: f"started {_safe(d.get('definition') or {}, 'name')}",
    Kind.RESUMED: lambda d: f"resumed by {_safe(d, 'worker')}",
    Kind.MESSAGE_RECEIVED: lambda d: f"{_safe(d, 'role')} message",
    Kind.MODEL_RESPONDED: lambda d: (
        f"model turn: {len(d.get('tool_calls') or ())} tool call(s), "
        f"{(d.get('usage') or {}).get('output_tokens', '?')} output tokens"
    ),
    Kind.TOOL_INTENT: lambda d: f"call {_safe(d, 'tool')} {_safe(d, 'call_id')} (attempt {_safe(d, 'attempt')})",
    Kind.TOOL_RESULT: lambda d: (
        f"result of {_safe(d, 'tool')} {_safe(d, 'call_id')}"
        + (" (failed)" if d.get("error") is not None else "")
        + (" (reconciled: it had happened)" if d.get("reconciled") else "")
    ),
    Kind.APPROVAL_REQUESTED: lambda d: (
        f"approval {_safe(d, 'approval_id')} asked for {_safe(d, 'tool')}: {_safe(d, 'reason')}"
    ),
    Kind.APPROVAL_DECIDED: lambda d: (
        f"approval {_safe(d, 'approval_id')} {'approved' if d.get('approved') else 'denied'} by {_safe(d, 'by')}"
    ),
    Kind.BUDGET_EXCEEDED: lambda d: f"suspended: {_safe(d, 'limit')} budget spent",
    Kind.BUDGET_EXTENDED: lambda d: "budget extended",
    Kind.RETRIED: lambda d: f"retried by an operator ({_safe(d, 'worker')}) after the failure",
    Kind.FINISHED: lambda d: "finished",
    Kind.FAILED: lambda d: "failed",
    Kind.CANCELLED: lambda d: "cancelled",
    Kind.FORKED: lambda d: f"fork of {_safe(d, 'agent_id')} at seq {_safe(d, 'seq')}",
    Kind.TOOL_FAILED: lambda d: (
        f"{_safe(d, 'tool')} {_safe(d, 'call_id')} attempt {_safe(d, 'attempt')} "
        f"{'timed out' if d.get('timed_out') else 'failed'} ({_safe(d, 'error_type')}), "
        f"retry in {_safe(d, 'retry_in')}s"
    ),
    Kind.TOOL_HEARTBEAT: lambda d: (
        f"{_safe(d, 'tool')} {_safe(d, 'call_id')} heartbeat (attempt {_safe(d, 'attempt')})"
    ),
}
