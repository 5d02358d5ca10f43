"""OpenTelemetry spans and metrics, by the GenAI semantic conventions, in one place.

Spans: ``invoke_agent {agent}`` (one activation of an agent: a start, a resume
or a retry; INTERNAL, the agent runs in this process), ``chat {model}`` (one
model call; CLIENT), ``execute_tool {tool}`` (one tool call; INTERNAL), named
and attributed as the OpenTelemetry GenAI semantic conventions say
(``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.conversation.id``
= the agent id, response model, finish reasons, usage, ``error.type`` and status
ERROR on failure). durably's own spans are ``durably.checkpoint.save``,
``durably.checkpoint.restore``, ``durably.snapshot.save`` and the group
committer's ``durably.journal.append`` (``durably.storage._group_commit``). Every span carries ``durably.namespace``
(the tenant). A resumed activation's ``invoke_agent`` span links to the one of
the activation it continues: each ``started`` / ``resumed`` / ``retried``
record holds its activation's trace and span id (record schema version 4) and
the state keeps the latest (snapshot schema version 4).

Metrics (``Metrics``): checkpoint save / restore and snapshot latency
(seconds) and size (bytes), ``gen_ai.client.operation.duration`` and
``gen_ai.client.token.usage``, counters of conflicts, fencings, retries and
resumes.

Attributes carry ids, names and sizes only, never content: prompts,
arguments and results may hold personal data.

When nothing records (no SDK configured: the API's no-op or proxy providers),
``Telemetry`` says so once, at construction, and the runtime then creates no
span or instrument object at all: the step loop pays one ``is None`` test.
OpenTelemetry itself is imported when the first ``Telemetry`` is built, not
when durably is imported (it is a tenth of ``import durably._runtime``), and
not at all while nothing could have installed a provider (``_api_untouched``):
a process that never imported the API (a ``durably`` command) skips it.
See https://opentelemetry.io/docs/specs/semconv/gen-ai/ for the conventions.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry import metrics, trace

TRACER_NAME = "durably"

# GenAI semantic conventions (attribute names).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
# durably's own.
NAMESPACE = "durably.namespace"
RUN_ID = "durably.run.id"
SEQ = "durably.seq"
RECORD_COUNT = "durably.record.count"
RAW_BYTES = "durably.bytes.raw"
STORED_BYTES = "durably.bytes.stored"
SNAPSHOT_SEQ = "durably.snapshot.seq"
TOOL_ATTEMPT = "durably.tool.attempt"
STATUS = "durably.agent.status"
RETRY_KIND = "durably.retry.kind"
LIMIT_KEY = "durably.limit.key"
# The worker running an activation (resource attribute names of the conventions, as span attributes).
WORKER_ID = "durably.worker.id"
HOST_NAME = "host.name"
PROCESS_PID = "process.pid"

#: ``error.type`` when nothing more specific is known (the conventions' fallback).
OTHER_ERROR = "_OTHER"
#: ``gen_ai.provider.name`` of a model that does not declare its ``provider``.
UNKNOWN_PROVIDER = "unknown"

#: durably's stop reasons (``ModelResponse.stop_reason``) as the conventions'
#: finish reasons; a provider's own word passes through.
_FINISH_REASONS = {"end": "stop", "tool_use": "tool_calls", "max_tokens": "length", "refused": "content_filter"}

# The conventions' advisory bucket boundaries for the two gen_ai.client histograms.
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
# Checkpoint latencies are milliseconds, not the seconds of a model call.
_STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A person deciding an approval: seconds to a day.
_HUMAN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 43200.0, 86400.0)
_BYTES_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


def _api_untouched() -> bool:
    """True when no global provider can exist yet: neither API module is imported (a provider
    is installed through them) and no ``OTEL_PYTHON_*_PROVIDER`` variable names one. The
    getters would then return the API's proxies, which ``_from_api_only`` says record nothing."""
    return not (
        {"opentelemetry.trace", "opentelemetry.metrics"} & sys.modules.keys()
        or {"OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"} & os.environ.keys()
    )


def _from_api_only(provider: object) -> bool:
    """Whether ``provider`` is one of the API package's own (the no-op one, or the
    proxy that stands in until an SDK is installed): nothing would be recorded."""
    return type(provider).__module__.startswith(("opentelemetry.trace", "opentelemetry.metrics"))


class Metrics:
    """The instruments durably records, created from one ``metrics.Meter``.

    Histograms (unit in brackets): ``durably.checkpoint.save.duration`` (s),
    ``durably.checkpoint.save.size`` (By), the same for ``restore`` and for
    ``durably.snapshot.save``; ``gen_ai.client.operation.duration`` (s) and
    ``gen_ai.client.token.usage`` ({token}) as the GenAI conventions define them.
    Counters: ``durably.conflicts`` (appends whose expected seq was stale),
    ``durably.fencings`` (appends refused for good: another writer owns the
    stream), ``durably.retries`` (a model call or a tool call tried again,
    ``durably.retry.kind``), ``durably.resumes`` (activations from a journal),
    ``durably.model.streams.interrupted`` (model streams that broke off after
    some text arrived: a cut connection, a cancel; the call is asked again).
    The fleet's (docs/observability.md): ``durably.approval.wait.duration`` and
    ``durably.approval.resume.duration`` (s), counters ``durably.lease.takeovers``,
    ``durably.lease.lost`` and ``durably.activation.overlaps`` (always 0 unless two
    activations of one agent overlapped), gauges ``durably.resume.backlog`` and
    ``durably.agents`` (by ``durably.agent.status``).
    """

    def __init__(self, meter: metrics.Meter) -> None:
        def histogram(name: str, unit: str, text: str, buckets: tuple[float, ...]) -> metrics.Histogram:
            return meter.create_histogram(
                name, unit=unit, description=text, explicit_bucket_boundaries_advisory=buckets
            )

        self.save_duration = histogram(
            "durably.checkpoint.save.duration",
            "s",
            "Time to make one batch of an agent's records durable",
            _STORE_BUCKETS,
        )
        self.save_size = histogram(
            "durably.checkpoint.save.size", "By", "Stored bytes of one checkpoint save", _BYTES_BUCKETS
        )
        self.restore_duration = histogram(
            "durably.checkpoint.restore.duration",
            "s",
            "Time to restore an agent's state (snapshot + tail)",
            _STORE_BUCKETS,
        )
        self.restore_size = histogram(
            "durably.checkpoint.restore.size", "By", "Stored bytes read by one restore", _BYTES_BUCKETS
        )
        self.snapshot_duration = histogram(
            "durably.snapshot.save.duration", "s", "Time to encode and store one snapshot", _STORE_BUCKETS
        )
        self.snapshot_size = histogram(
            "durably.snapshot.save.size", "By", "Stored bytes of one snapshot", _BYTES_BUCKETS
        )
        self.operation_duration = histogram(
            "gen_ai.client.operation.duration", "s", "GenAI operation duration", _DURATION_BUCKETS
        )
        self.token_usage = histogram(
            "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used", _TOKEN_BUCKETS
        )
        self.conflicts = meter.create_counter(
            "durably.conflicts", unit="{conflict}", description="Appends whose expected seq was stale"
        )
        self.fencings = meter.create_counter(
            "durably.fencings", unit="{fencing}", description="Appends refused for good: another writer owns the stream"
        )
        self.retries = meter.create_counter(
            "durably.retries", unit="{retry}", description="Model or tool calls tried again"
        )
        self.streams_interrupted = meter.create_counter(
            "durably.model.streams.interrupted",
            unit="{stream}",
            description="Model streams that broke off after some text arrived (the call is asked again)",
        )
        self.resumes = meter.create_counter(
            "durably.resumes", unit="{resume}", description="Agent activations resumed from a journal"
        )
        self.serve_outages = meter.create_counter(
            "durably.serve.outages",
            unit="{scan}",
            description="serve() scans that failed because the store was unavailable",
        )
        self.approval_wait = histogram(
            "durably.approval.wait.duration",
            "s",
            "Time from an approval request to its decision (the records' timestamps)",
            _HUMAN_BUCKETS,
        )
        self.approval_resume = histogram(
            "durably.approval.resume.duration",
            "s",
            "Time from an approval decision to the activation that acts on it",
            _DURATION_BUCKETS,
        )
        self.takeovers = meter.create_counter(
            "durably.lease.takeovers", unit="{lease}", description="Leases taken from another owner by an activation"
        )
        self.lost_leases = meter.create_counter(
            "durably.lease.lost", unit="{lease}", description="Leases an activation lost while it ran"
        )
        self.overlaps = meter.create_counter(
            "durably.activation.overlaps",
            unit="{activation}",
            description="Activations that saw another activation's records interleaved with their own (must stay 0)",
        )
        self.resume_backlog = meter.create_gauge(
            "durably.resume.backlog",
            unit="{agent}",
            description="Runnable agents a serving worker listed at its last scan and did not start",
        )
        self.limit_wait = histogram(
            "durably.limit.wait.duration",
            "s",
            "Time a model call waited for a fleet limit (durably.limit.key); its count is the waits",
            _DURATION_BUCKETS,
        )
        self.agents = meter.create_gauge(
            "durably.agents", unit="{agent}", description="Agents of the namespace by status (the status index)"
        )


class Telemetry:
    """The tracer and instruments of one runtime, or None for whatever nothing records.

    In: ``namespace`` (put on every span and measurement as ``durably.namespace``),
    ``tracer_provider`` / ``meter_provider`` (default: the global ones, read
    now: a global provider installed after this is created is not seen).
    ``tracer`` is None and ``metrics`` is None when their provider is the API's
    no-op or proxy one; callers test that and then do no telemetry work at all.
    ``attributes`` is ``{"durably.namespace": namespace}``, shared, not to be mutated.
    """

    def __init__(
        self,
        namespace: str,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        worker: dict[str, str | int] | None = None,
    ) -> None:
        self.namespace = namespace
        self.attributes = {NAMESPACE: namespace}
        self.worker: dict[str, str | int] = dict(worker or {})
        self.fleet_attributes: dict[str, str | int] = {**self.attributes, **self.worker}
        self.tracer: trace.Tracer | None = None
        self.metrics: Metrics | None = None
        if tracer_provider is None and meter_provider is None and _api_untouched():
            return  # what the API's proxies would give, without importing it
        from opentelemetry import metrics, trace

        tracer_provider = tracer_provider or trace.get_tracer_provider()
        meter_provider = meter_provider or metrics.get_meter_provider()
        if not _from_api_only(tracer_provider):
            self.tracer = tracer_provider.get_tracer(TRACER_NAME)
        if not _from_api_only(meter_provider):
            self.metrics = Metrics(meter_provider.get_meter(TRACER_NAME))
            self.metrics.overlaps.add(0, self.fleet_attributes)  # reported as 0, not absent, until one happens

    @classmethod
    def disabled(cls) -> Telemetry:
        """A ``Telemetry`` that records nothing, whatever the global providers are."""
        off = cls.__new__(cls)
        off.namespace, off.attributes, off.tracer, off.metrics = "", {}, None, None
        off.worker, off.fleet_attributes = {}, {}
        return off

    def count(self, instrument: str) -> None:
        """Add 1 to the fleet counter named by its ``Metrics`` attribute (``takeovers``,
        ``lost_leases``, ``overlaps``), with the worker's attributes; nothing when nothing records."""
        if self.metrics is not None:
            getattr(self.metrics, instrument).add(1, self.fleet_attributes)

    def span(self, name: str, *, client: bool = False) -> contextlib.AbstractContextManager[Any]:
        """``tracer.start_as_current_span(name)`` with ``durably.namespace`` (kind
        CLIENT if ``client``, else INTERNAL), or a shared null context yielding
        None when nothing records. Exceptions are
        marked on the span by type only (``record_error``), never with their message;
        a cancellation is not an error."""
        if self.tracer is None:
            return _NO_SPAN
        return _recorded(self.tracer, name, client, self.attributes)

    def tool_span(
        self, tool: str, call_id: str, attempt: int, agent_id: str, agent_name: str
    ) -> contextlib.AbstractContextManager[Any]:
        """The ``execute_tool {tool}`` span around one run of a function tool, as ``span``
        (current, INTERNAL, exceptions marked by type) with the call's attributes: operation,
        tool name and type, call id, attempt, agent id and name, conversation id (the agent's).
        Yields the span, or None when nothing records."""
        if self.tracer is None:
            return _NO_SPAN
        attributes: dict[str, str | int] = {
            **self.attributes,
            OPERATION: "execute_tool",
            TOOL_NAME: tool,
            TOOL_TYPE: "function",
            TOOL_CALL_ID: call_id,
            TOOL_ATTEMPT: attempt,
            AGENT_ID: agent_id,
            AGENT_NAME: agent_name,
            CONVERSATION_ID: agent_id,
        }
        return _recorded(self.tracer, f"execute_tool {tool}", False, attributes)

    def activation_span(
        self, agent_name: str, agent_id: str, run_id: str, provider: str, model: str, continues: dict[str, Any] | None
    ) -> trace.Span | None:
        """A started, not current, ``invoke_agent`` span for one activation of an
        agent, linked to the span of the activation it ``continues`` (a trace
        reference from ``trace_reference``), or None when nothing records."""
        if self.tracer is None:
            return None
        from opentelemetry.trace import Link, SpanKind

        links = [Link(context, {"durably.link": "continues"})] if (context := _context(continues)) else None
        return self.tracer.start_span(
            f"invoke_agent {agent_name}",
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={
                **self.attributes,
                OPERATION: "invoke_agent",
                PROVIDER: provider,
                AGENT_ID: agent_id,
                AGENT_NAME: agent_name,
                CONVERSATION_ID: agent_id,
                MODEL: model,
                RUN_ID: run_id,
                **self.worker,
            },
            record_exception=False,
            set_status_on_exception=False,
        )


_NO_SPAN = contextlib.nullcontext()


@contextlib.contextmanager
def _recorded(
    tracer: trace.Tracer, name: str, client: bool, attributes: Mapping[str, str | int]
) -> Iterator[trace.Span]:
    from opentelemetry.trace import SpanKind

    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with tracer.start_as_current_span(
        name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except Exception as exc:
            record_exception(span, exc)
            raise


def worker_attributes(worker_id: str, host: str, pid: int) -> dict[str, str | int]:
    """The attributes naming a worker: ``durably.worker.id``, ``host.name``, ``process.pid``."""
    return {WORKER_ID: worker_id, HOST_NAME: host, PROCESS_PID: pid}


def trace_reference(span: trace.Span | None) -> dict[str, str] | None:
    """What a record keeps of ``span`` for a later link: ``trace_id`` (32 hex
    digits) and ``span_id`` (16), or None when it is not recorded."""
    if span is None or not span.is_recording():
        return None
    context = span.get_span_context()
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def _context(reference: dict[str, Any] | None) -> trace.SpanContext | None:
    if not reference:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    try:
        context = SpanContext(
            int(reference["trace_id"], 16),
            int(reference["span_id"], 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except (KeyError, TypeError, ValueError):
        return None  # a reference this build cannot read only costs the link
    return context if context.is_valid else None


@contextlib.contextmanager
def activated(span: trace.Span | None, *, end: bool) -> Iterator[None]:
    """Make ``span`` current for the body (nothing when it is None); end it after if ``end``."""
    if span is None:
        yield
        return
    from opentelemetry import trace

    with trace.use_span(span, end_on_exit=end, record_exception=False, set_status_on_exception=False):
        yield


def provider_of(model: object) -> str:
    """``gen_ai.provider.name`` for ``model``: its ``provider`` attribute (the
    conventions' value, e.g. ``openai``, ``anthropic``) or ``unknown``."""
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) and provider else UNKNOWN_PROVIDER


def finish_reason(stop_reason: str) -> str:
    """durably's ``stop_reason`` as a GenAI finish reason (``stop``, ``tool_calls``, ``length``...)."""
    return _FINISH_REASONS.get(stop_reason, stop_reason)


def error_type(exc: BaseException) -> str:
    """The low-cardinality ``error.type`` of ``exc``: its fully qualified class name."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def record_error(span: trace.Span | None, kind: str) -> None:
    """Mark ``span`` failed: status ERROR and ``error.type`` = ``kind`` (see ``error_type``).
    The exception's message is never recorded: it may quote arguments or results
    (personal data, secrets), which spans never carry."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, kind))
    span.set_attribute(ERROR_TYPE, kind)


def record_exception(span: trace.Span | None, exc: BaseException) -> None:
    """``record_error`` for an exception, plus an ``exception`` event naming its
    ``exception.type`` (no ``exception.message``, no stack trace: both may quote content)."""
    if span is None:
        return
    kind = error_type(exc)
    record_error(span, kind)
    span.add_event("exception", {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}"})


def tracer(provider: trace.TracerProvider | None = None) -> trace.Tracer:
    """The durably tracer from ``provider`` (default: the global one); may be a no-op tracer."""
    from opentelemetry import trace

    return trace.get_tracer(TRACER_NAME, tracer_provider=provider)
