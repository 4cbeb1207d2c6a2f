"""Prometheus metrics with conventional names and units, for every long-running process.

Recovery facts (jobs watched, pending approvals, holds, anomalies, actions, latencies) come
from the audit trail through `AuditCollector`, so every process that can read the store
reports the same numbers, however many replicas run, and they survive restarts (dashboards
take their `max`). Process facts (Slurm command and log/metric source errors, the breaker) are
counted where they happen, in `resurgo.metrics.process.PROCESS`, which every registry here serves.

Which process serves what: the API on its own port (`/metrics` next to the console), the worker
the recovery metrics and its process facts, controllers and the watchdog their process facts
(Slurm errors, source errors, breaker), each on its own port (`[metrics]` in the config, or
$RESURGO_METRICS_PORT per process). `DEPLOYED_PORTS` are the ports the compose file and the
Helm chart give them (the code's default is off).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Gauge, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from resurgo.audit.store import AuditStore, AuditStoreUnavailable
from resurgo.metrics.digest import LATENCY_BUCKETS, AuditDigest, LatencyFold
from resurgo.metrics.process import PROCESS, ProcessCounters
from resurgo.metrics.reader import DigestReader

log = logging.getLogger("resurgo.metrics")

PORT_ENV = "RESURGO_METRICS_PORT"
HOST_ENV = "RESURGO_METRICS_HOST"
# The ports the compose file and the Helm chart serve /metrics on (tests keep them in step);
# distinct because the quickstart's controller and watchdog share one network namespace.
DEPLOYED_PORTS = {"worker": 9464, "controller": 9465, "watchdog": 9466}


class AuditCollector(Collector):
    """Recovery metrics read (incrementally) from the audit store at scrape time."""

    def __init__(self, reader: DigestReader) -> None:
        self.reader = reader

    def collect(self) -> Iterator[Metric]:
        try:
            families = self.reader.view(_families)
        except AuditStoreUnavailable as exc:
            log.warning("metrics: audit store unavailable: %s", exc)
            up = GaugeMetricFamily("resurgo_audit_store_up", "the audit store answered")
            up.add_metric([], 0)
            yield up
            return
        up = GaugeMetricFamily("resurgo_audit_store_up", "the audit store answered")
        up.add_metric([], 1)
        yield up
        yield from families


def _families(d: AuditDigest) -> list[Metric]:
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float) -> None:
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], value)
        out.append(g)

    gauge("resurgo_jobs_watched", "jobs whose monitoring started and has not ended", d.jobs_watched)
    gauge("resurgo_pending_approvals", "advice waiting for an operator's decision", len(d.pending))
    gauge(
        "resurgo_holds_outstanding",
        "jobs held by Resurgo and not yet released",
        d.holds_outstanding,
    )
    anomalies = CounterMetricFamily(
        "resurgo_anomalies", "failures attributed, by category", labels=["category"]
    )
    for category, n in sorted(d.anomalies.items()):
        anomalies.add_metric([category], n)
    out.append(anomalies)
    actions = CounterMetricFamily(
        "resurgo_actions", "scheduler actions applied, by step", labels=["type"]
    )
    for step, n in sorted(d.actions.items()):
        actions.add_metric([step], n)
    out.append(actions)
    ended = CounterMetricFamily(
        "resurgo_jobs_ended",
        "monitored jobs whose monitoring ended, by outcome",
        labels=["outcome"],
    )
    for outcome, n in sorted(d.outcomes.items()):
        ended.add_metric([outcome], n)
    out.append(ended)
    out.append(
        _histogram(
            "resurgo_detection_latency_seconds",
            "from an anomaly's detection to the first scheduler action after it",
            d.detection_to_action,
        )
    )
    out.append(
        _histogram(
            "resurgo_recovery_latency_seconds",
            "from an anomaly's detection to the job's next attempt running",
            d.failure_to_running,
        )
    )
    return out


def _histogram(name: str, doc: str, fold: LatencyFold) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc)
    h.add_metric([], fold.cumulative(), sum_value=fold.total)
    return h


def recovery_registry(
    store: AuditStore, registry: CollectorRegistry | None = None
) -> tuple[CollectorRegistry, ProcessCounters]:
    """A registry with the audit-derived metrics and this process's counters."""
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(AuditCollector(DigestReader(store)))
    registry.register(PROCESS)
    return registry, PROCESS


def metrics_port(configured: int, environ: Mapping[str, str] | None = None) -> int:
    """The port to serve on: $RESURGO_METRICS_PORT when set (one process per container), else
    the configured one; 0 is off."""
    env = os.environ if environ is None else environ
    raw = env.get(PORT_ENV, "").strip() or str(configured)
    if not raw.isdigit() or not 0 <= int(raw) < 65536:
        raise ValueError(f"${PORT_ENV} must be a TCP port (0: off), got {raw[:20]!r}")
    return int(raw)


def start_process_metrics(
    process: str,
    store: AuditStore | None,
    environ: Mapping[str, str] | None = None,
    *,
    port: int = 0,
    host: str = "0.0.0.0",
) -> ProcessCounters | None:
    """`/metrics` for a worker, controller or watchdog on `port` ($RESURGO_METRICS_PORT wins;
    0: off), with the recovery metrics when the process reads the audit store. Returns the
    process counters when serving, None when off."""
    env = os.environ if environ is None else environ
    chosen = metrics_port(port, env)
    if not chosen:
        return None
    registry = CollectorRegistry()
    info = Gauge("resurgo_process", "1 per running Resurgo process", ["process"], registry=registry)
    info.labels(process).set(1)
    registry.register(PROCESS)
    if store is not None:
        registry.register(AuditCollector(DigestReader(store)))
    serve_metrics(chosen, registry, env.get(HOST_ENV, "").strip() or host)
    return PROCESS


def serve_metrics(port: int, registry: CollectorRegistry, host: str = "0.0.0.0") -> None:
    """`/metrics` on its own port, from a daemon thread (worker, controller, watchdog)."""
    start_http_server(port, addr=host, registry=registry)
    log.info("Prometheus metrics on http://%s:%s/metrics", host, port)


__all__ = [
    "DEPLOYED_PORTS",
    "LATENCY_BUCKETS",
    "PROCESS",
    "AuditCollector",
    "ProcessCounters",
    "metrics_port",
    "recovery_registry",
    "serve_metrics",
    "start_process_metrics",
]
