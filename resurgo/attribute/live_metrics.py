"""GPU metrics for live attribution: what Prometheus knows about the job's nodes.

The rules read metrics as Prometheus exposition text (`metrics.txt` of an evidence bundle, see
`resurgo.attribute.metrics`), so the live path renders what it queries in that same form:
one line per GPU and metric, under dcgm-exporter's metric names (which the rules recognise)
whatever the cluster's metrics are called, with the host as `Hostname`. The lines are evidence
too: an attribution that names a GPU shows the sample that did.

- XIDs: only those raised during the attempt (`xid_events` over its window). DCGM's XID gauge
  holds a GPU's *last* XID for as long as the exporter runs, so its current value alone would
  blame a node for a fault of some earlier job.
- Health: the current temperature, volatile double-bit ECC count and row-remap failures.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from resurgo.contracts import LogLine
from resurgo.sources import MetricsSettings, PrometheusSource
from resurgo.sources.labels import quote_string
from resurgo.sources.prometheus import (
    DEFAULT_HEALTH_METRICS,
    TEMPERATURE_METRIC,
    XID_METRIC,
)

SOURCE = "prometheus"
# Without a known start, look back this far for XIDs.
DEFAULT_WINDOW = timedelta(hours=1)
# Prometheus scrapes every 15-30 s: an XID raised just before the attempt started is as likely
# what broke it as one raised just after.
MIN_WINDOW = timedelta(minutes=2)


def exposition_line(metric: str, host: str, gpu: str, value: float, uuid: str | None) -> str:
    labels = [f"Hostname={quote_string(host)}", f"gpu={quote_string(gpu)}"]
    if uuid:
        labels.append(f"UUID={quote_string(uuid)}")
    return f"{metric}{{{','.join(labels)}}} {value:g}"


async def job_gpu_metrics(
    prom: PrometheusSource,
    settings: MetricsSettings,
    nodes: list[str],
    attempt_start: datetime | None,
    now: datetime,
) -> list[LogLine]:
    """The job's nodes' GPU metrics as exposition lines (raises what the source raises)."""
    if not nodes:
        return []
    window = now - attempt_start if attempt_start is not None else DEFAULT_WINDOW
    texts = [
        exposition_line(XID_METRIC, r.host, r.gpu, r.value, r.uuid)
        for r in await prom.xid_events(max(window, MIN_WINDOW), nodes, metric=settings.xid)
    ]
    # The cluster's own names, rendered under dcgm-exporter's (what the rules know).
    names = {settings.temperature: TEMPERATURE_METRIC}
    names.update(
        {m: m for m in DEFAULT_HEALTH_METRICS if m not in (XID_METRIC, TEMPERATURE_METRIC)}
    )
    for health in (await prom.gpu_health(nodes, metrics=list(names))).values():
        for metric, value in sorted(health.metrics.items()):
            texts.append(
                exposition_line(names[metric], health.host, health.gpu, value, health.uuid)
            )
    return [LogLine(source=SOURCE, line_no=n, text=text) for n, text in enumerate(texts, 1)]
