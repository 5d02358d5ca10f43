"""The OpenTelemetry SDK as a worker process sets it up: its identity on the resource.

A library never installs an SDK; a worker process (``durably worker``) may.
``worker_resource`` names the worker the conventions' way: ``service.name``
``durably-worker`` and ``service.instance.id`` the worker id, plus
``host.name`` and ``process.pid``, under whatever the user's ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES`` say (the user's wins). ``worker_providers``
builds a tracer and a meter provider on that resource. Needs ``opentelemetry-sdk``
(the ``durably[otel]`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from durably._telemetry import HOST_NAME, PROCESS_PID, WORKER_ID

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

#: ``service.name`` of a worker when the environment names none.
SERVICE_NAME = "durably-worker"


def worker_resource(worker_id: str, host: str, pid: int | None = None) -> Resource:
    """The resource of a worker process: ``service.name`` (``durably-worker``),
    ``service.instance.id`` (``worker_id``), ``host.name`` (``host``), ``process.pid``
    and ``durably.worker.id``; ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
    override any of them. Raises ``ImportError`` without ``opentelemetry-sdk``."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    ours: dict[str, str | int] = {
        "service.name": SERVICE_NAME,
        "service.instance.id": worker_id,
        HOST_NAME: host,
        PROCESS_PID: os.getpid() if pid is None else pid,
        WORKER_ID: worker_id,
    }
    from_env = OTELResourceDetector().detect().attributes
    if os.environ.get("OTEL_SERVICE_NAME"):
        from_env = {**from_env, "service.name": os.environ["OTEL_SERVICE_NAME"]}
    return Resource.create({k: v for k, v in ours.items() if k not in from_env})


def worker_providers(
    resource: Resource, span_processors: Iterable[SpanProcessor] = (), metric_readers: Iterable[MetricReader] = ()
) -> tuple[TracerProvider, MeterProvider]:
    """A tracer provider (with ``span_processors``) and a meter provider (with
    ``metric_readers``) on ``resource``; the caller installs them (``set_tracer_provider``)
    or hands them to its ``Runtime``. Raises ``ImportError`` without ``opentelemetry-sdk``."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    tracer_provider = TracerProvider(resource=resource)
    for processor in span_processors:
        tracer_provider.add_span_processor(processor)
    return tracer_provider, MeterProvider(metric_readers=list(metric_readers), resource=resource)
