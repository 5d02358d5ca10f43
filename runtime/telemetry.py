"""OpenTelemetry spans and their attribute names, in one place.

Span names and ``gen_ai.*`` attributes follow the OpenTelemetry GenAI semantic
conventions (``invoke_agent {name}``, ``chat {model}``, ``execute_tool {name}``);
durably's own spans are ``durably.checkpoint.save``, ``durably.checkpoint.restore``
and ``durably.snapshot.save``; ``durably.journal.append`` comes from the group
committer in ``durably.storage.group_commit``. Attributes carry ids and sizes only,
never content: prompts, arguments and results may hold personal data.

Without an SDK configured the API's no-op tracer makes all of this nearly free.
"""

from __future__ import annotations

from opentelemetry import trace

TRACER_NAME = "durably"

AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
OPERATION = "gen_ai.operation.name"
MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
NAMESPACE = "durably.namespace"
SEQ = "durably.seq"
RECORD_COUNT = "durably.record.count"
RAW_BYTES = "durably.bytes.raw"
STORED_BYTES = "durably.bytes.stored"
SNAPSHOT_SEQ = "durably.snapshot.seq"
TOOL_ATTEMPT = "durably.tool.attempt"
STATUS = "durably.agent.status"


def tracer(provider: trace.TracerProvider | None = None) -> trace.Tracer:
    """The durably tracer from ``provider`` (default: the global one)."""
    return trace.get_tracer(TRACER_NAME, tracer_provider=provider)
