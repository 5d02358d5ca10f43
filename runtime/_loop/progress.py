"""One INFO line per step of an agent, on the ``durably.steps`` logger.

Fed with every record the actor folds, it says what the step came to: the
model answered (with how many tool calls, tokens in and out, milliseconds
since the model was asked, retries included), a tool returned or failed
(milliseconds since its intent), the agent parked for an approval, was
suspended on its budget, finished, failed or was cancelled. Nothing is logged
per streamed delta, and no content (texts, arguments, results, errors' messages).
"""

from __future__ import annotations

import logging
import time

from durably._loop.state import AgentState
from durably.schemas._records import Kind, Record
from durably.storage._spi import StreamId

log = logging.getLogger("durably.steps")


def _shown(name: object) -> str:
    """A name the model may have chosen (an unknown tool's), kept to one printable line."""
    text = str(name)
    return text if text.isprintable() else ascii(text)


def _ms(since: float | None) -> int:
    return 0 if since is None else round((time.perf_counter() - since) * 1000)


class StepLog:
    """The step lines of one activation of ``stream`` (see the module docstring)."""

    def __init__(self, stream: StreamId) -> None:
        self.stream = stream
        self._asked: float | None = None
        self._intents: dict[str, float] = {}  # call key -> when its intent was folded

    def asking(self) -> None:
        """The actor is about to ask the model (the start of a model step's time)."""
        self._asked = time.perf_counter()

    def folded(self, record: Record, state: AgentState) -> None:
        """Log the line ``record`` makes, if it ends a step; ``state`` is the state right after it."""
        if not log.isEnabledFor(logging.INFO):
            return
        data, kind = record.data, record.kind
        if kind == Kind.MODEL_RESPONDED:
            usage = data.get("usage") or {}
            calls = len(data.get("tool_calls") or ())
            log.info(
                "agent %s seq %d: model answered with %d call%s (%d in + %d out tokens, %d ms)",
                self.stream,
                record.seq,
                calls,
                "" if calls == 1 else "s",
                usage.get("input_tokens", 0),
                usage.get("output_tokens", 0),
                _ms(self._asked),
            )
            self._asked = None
        elif kind == Kind.TOOL_INTENT:
            self._intents[data["key"]] = time.perf_counter()
        elif kind == Kind.TOOL_RESULT:
            outcome = "returned" if data.get("error") is None else "failed"
            took = _ms(self._intents.pop(data["key"], None))
            log.info(
                "agent %s seq %d: tool %s %s (%d ms)", self.stream, record.seq, _shown(data["tool"]), outcome, took
            )
        elif kind == Kind.APPROVAL_REQUESTED:
            approval, tool = _shown(data.get("approval_id")), _shown(data.get("tool"))
            # A function agent's own approval (Run.approval) is no tool call: its "tool" is the word "approval".
            what = (
                "" if tool == "approval" and data.get("approval_id") == data.get("call_id") else f" (a call of {tool})"
            )
            log.info(
                "agent %s seq %d: parked until a human decides approval %s%s", self.stream, record.seq, approval, what
            )
        elif kind in (Kind.BUDGET_EXCEEDED, Kind.FINISHED, Kind.CANCELLED):
            log.info("agent %s seq %d: %s", self.stream, record.seq, state.status)
        elif kind == Kind.FAILED:
            # The reason's head only ("model error", "refused"...): its tail may quote content.
            head = str(data.get("reason", "")).split(":", 1)[0]
            log.info("agent %s seq %d: failed (%s)", self.stream, record.seq, head)
