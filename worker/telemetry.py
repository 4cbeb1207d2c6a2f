"""OpenTelemetry traces and metrics, exported over OTLP/HTTP; off unless an endpoint is set.

```toml
[telemetry]
otlp_endpoint = "http://collector:4318"   # or $OTEL_EXPORTER_OTLP_ENDPOINT; unset: off
service_name = "resurgo"
```

- **Off** (the default): no SDK provider is installed, so every tracer and instrument in the code
  is the OpenTelemetry API's no-op and nothing is exported.
- **Traces**: `resurgo.workflows.client.connect` registers temporalio's `TracingInterceptor` on the
  client (workers built from it inherit it), so a recovery is one trace: `StartWorkflow` (the
  controller's discovery) → `RunWorkflow` → `StartActivity`/`RunActivity` → `slurm <cmd> <sub>`
  spans around every Slurm command (`resurgo.slurm.runner`/`ssh`). The context rides along
  continue-as-new, so a long-lived job stays one trace.
- **Metrics**: the audit events (every anomaly, attribution, advice, action and reconciliation
  passes through `record_audit`) are counted here by `AuditMetrics`; the controller's activities
  record watch results, attribution and scheduler-step durations and Slurm command durations
  (`resurgo.activities.controller`, `resurgo.slurm.runner`). Attributes are low-cardinality
only: never
  job ids, node names, paths or command arguments.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

from resurgo.config import ConfigError, TelemetrySettings
from resurgo.contracts import AuditEvent, AuditEventType

log = logging.getLogger("resurgo.telemetry")

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
EXPORTER_REQUIREMENT = "opentelemetry-exporter-otlp-proto-http"


@dataclass(frozen=True)
class Telemetry:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def flush(self) -> None:
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


_installed: Telemetry | None = None


def otlp_endpoint(settings: TelemetrySettings) -> str | None:
    """The OTLP/HTTP base URL: the config's, else $OTEL_EXPORTER_OTLP_ENDPOINT, else None (off)."""
    return settings.otlp_endpoint or os.environ.get(ENDPOINT_ENV) or None


def build_telemetry(
    settings: TelemetrySettings,
    *,
    process: str,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
) -> Telemetry:
    """Providers exporting to the configured endpoint (plus the given exporter/reader, for
    tests), not installed globally."""
    resource = Resource.create(
        {
            "service.name": settings.service_name,
            "service.instance.id": f"{process}@{socket.gethostname()}",
            "resurgo.process": process,
        }
    )
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    endpoint = otlp_endpoint(settings)
    if endpoint is not None:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ConfigError(
                f"telemetry export to {endpoint} needs the {EXPORTER_REQUIREMENT} package"
            ) from exc
        # An explicit config URL is the base; with only the environment, the exporters read
        # it themselves (with the OTEL_EXPORTER_OTLP_{TRACES,METRICS}_* refinements).
        base = settings.otlp_endpoint.rstrip("/") if settings.otlp_endpoint else None
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces" if base else None))
        )
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None),
                export_interval_millis=settings.export_interval * 1000,
            )
        )
    if span_exporter is not None:
        tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    if metric_reader is not None:
        readers.append(metric_reader)
    return Telemetry(tracer_provider, MeterProvider(resource=resource, metric_readers=readers))


def setup_telemetry(
    settings: TelemetrySettings,
    *,
    process: str,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
) -> Telemetry | None:
    """Install the global tracer and meter providers, once per process.

    Returns None, installing nothing, when no endpoint is configured (and no test exporter is
    given): every span and instrument then stays the API's no-op."""
    global _installed
    if _installed is not None:
        return _installed
    wanted = otlp_endpoint(settings) or span_exporter is not None or metric_reader is not None
    if not wanted:
        return None
    telemetry = build_telemetry(
        settings, process=process, span_exporter=span_exporter, metric_reader=metric_reader
    )
    trace.set_tracer_provider(telemetry.tracer_provider)
    metrics.set_meter_provider(telemetry.meter_provider)
    _installed = telemetry
    log.info(
        "OpenTelemetry on: service %s, exporting to %s",
        settings.service_name, otlp_endpoint(settings) or "in-process readers only",
    )  # fmt: skip
    return telemetry


# ---- metrics from the audit trail ------------------------------------------------------------

_meter = metrics.get_meter("resurgo")
AUDIT_EVENTS = _meter.create_counter(
    "resurgo.audit.events", unit="{event}", description="Audit events recorded, by type"
)
ANOMALIES = _meter.create_counter(
    "resurgo.anomalies", unit="{anomaly}", description="Anomalies detected, by kind"
)
ATTRIBUTIONS = _meter.create_counter(
    "resurgo.attributions", unit="{anomaly}", description="Attributed anomalies, by kind/category"
)
ADVICE = _meter.create_counter(
    "resurgo.advice", unit="{advice}", description="Decisions taken, by advice kind and category"
)
ACTIONS = _meter.create_counter(
    "resurgo.actions", unit="{step}", description="Scheduler steps carried out, by step/outcome"
)
RECONCILIATIONS = _meter.create_counter(
    "resurgo.reconciliations", unit="{advice}",
    description="Reconciliation outcomes, by status and reason",
)  # fmt: skip
DETECTION_LATENCY = _meter.create_histogram(
    "resurgo.detection.latency", unit="s",
    description="Anomaly detected_at minus the time stamped on its first signal line (when the "
    "line carries a timezone-aware time stamp)",
)  # fmt: skip
DECISION_LATENCY = _meter.create_histogram(
    "resurgo.decision.latency", unit="s",
    description="Advice recorded minus anomaly detected (attribution + policy)",
)  # fmt: skip

# An ISO-8601 time stamp with an explicit zone at the start of a line (optionally in brackets);
# zone-less stamps are skipped: their zone is anyone's guess.
_STAMP = re.compile(
    r"^\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?(?:Z|[+-]\d{2}:?\d{2}))"
)
_PENDING_LIMIT = 4096


def line_time(text: str) -> datetime | None:
    """The zone-aware time stamp a log line starts with, if any."""
    match = _STAMP.match(text)
    if match is None:
        return None
    stamp = match.group(1).replace(",", ".").replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def _parse_time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _label(value: object, default: str = "unknown") -> str:
    return value if isinstance(value, str) and value else default


class AuditMetrics:
    """Counts the audit trail: called by `AuditActivities.record_audit` after a batch is stored.

    Decision latency pairs an advice with its anomaly through a small bounded memory (the
    anomaly may have been recorded in an earlier batch): an advice whose anomaly went through
    another worker process is not measured."""

    def __init__(self) -> None:
        self._detected: OrderedDict[tuple[str, int | None], datetime] = OrderedDict()

    def __call__(self, events: Sequence[AuditEvent]) -> None:
        for event in events:
            try:
                self._record(event)
            except Exception:  # metrics must never fail the audit trail
                log.exception("recording metrics for audit event %s failed", event.event_id)

    def _record(self, event: AuditEvent) -> None:
        data: dict[str, Any] = event.data
        AUDIT_EVENTS.add(1, {"type": event.type})
        if event.type == AuditEventType.ANOMALY:
            kind = _label(data.get("kind"))
            ANOMALIES.add(1, {"kind": kind})
            detected = _parse_time(data.get("detected_at"))
            if detected is None:
                return
            self._detected[(event.workflow_id, event.attempt)] = detected
            while len(self._detected) > _PENDING_LIMIT:
                self._detected.popitem(last=False)
            signals = data.get("signals") or []
            first = signals[0] if isinstance(signals, list) and signals else None
            at = line_time(first.get("text", "")) if isinstance(first, dict) else None
            if at is not None and at <= detected:
                DETECTION_LATENCY.record((detected - at).total_seconds(), {"kind": kind})
        elif event.type == AuditEventType.ATTRIBUTION:
            ATTRIBUTIONS.add(
                1, {"kind": _label(data.get("kind")), "category": _label(data.get("category"))}
            )
        elif event.type == AuditEventType.ADVICE:
            attrs = {"kind": _label(data.get("kind")), "category": _label(data.get("category"))}
            ADVICE.add(1, attrs)
            attempt = data.get("attempt")
            detected = self._detected.pop(
                (event.workflow_id, attempt if isinstance(attempt, int) else event.attempt), None
            )
            if detected is not None and event.at >= detected:
                DECISION_LATENCY.record((event.at - detected).total_seconds(), attrs)
        elif event.type == AuditEventType.ACTION:
            outcome = _label(data.get("outcome"), "failed")
            ACTIONS.add(1, {"step": _label(data.get("step")), "outcome": outcome})
        elif event.type == AuditEventType.RECONCILIATION:
            RECONCILIATIONS.add(
                1, {"status": _label(data.get("status")), "reason": _label(data.get("reason"))}
            )
            if data.get("reason") == "action_failed":
                ACTIONS.add(1, {"step": _label(data.get("step")), "outcome": "failed"})
