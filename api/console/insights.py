"""The cluster banners, the nodes page and the overview page, from the audit digest.

Charts are server-rendered inline SVG: this module computes the shapes (rectangles with
coordinates and a tooltip) and the templates draw them, so the page needs no chart library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from resurgo.audit.store import AuditStoreUnavailable
from resurgo.config import ResurgoConfig
from resurgo.metrics.digest import AuditDigest, percentile
from resurgo.metrics.reader import DigestReader

# One colour per category, stable across pages (colour-blind safe Okabe-Ito order).
COLOURS = {
    "hardware_gpu": "#d55e00",
    "hardware_network": "#e69f00",
    "hardware_host": "#cc79a7",
    "system_software": "#0072b2",
    "application": "#56b4e9",
    "scheduler": "#009e73",
    "unknown": "#999999",
    "none": "#bbbbbb",
}
DAYS = 14


@dataclass
class Gates:
    cluster: str
    acknowledged: bool
    partitions: list[str]
    breaker: str
    remediated: int | None
    per_node_cap: int
    allow_drain: bool


def gates_of(config: ResurgoConfig, reader: DigestReader) -> dict[str, Gates]:
    """Each configured cluster's gates, with how many nodes Resurgo excluded or drained inside
    the breaker's window according to the audit trail (None when the store is down)."""
    now = datetime.now(UTC)
    out: dict[str, Gates] = {}
    for name, c in sorted(config.clusters.items()):
        window = timedelta(seconds=c.breaker_window_seconds)

        def remediated(d: AuditDigest, window: timedelta = window) -> int:
            return sum(
                1
                for rec in d.nodes.values()
                if (rec.excluded_jobs or rec.drained_jobs)
                and rec.last_at is not None
                and now - rec.last_at <= window
            )

        try:
            recent: int | None = reader.view(remediated)
        except AuditStoreUnavailable:
            recent = None
        out[name] = Gates(
            cluster=name,
            acknowledged=c.acknowledge_scheduler_actions,
            partitions=list(c.partitions),
            breaker=f"at most {c.max_excluded_share:.0%} of the nodes (at least one) excluded or "
            f"drained per {_duration(c.breaker_window_seconds)}",
            remediated=recent,
            per_node_cap=c.max_remediations_per_node,
            allow_drain=c.allow_drain,
        )
    return out


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 60:.0f} min" if seconds % 60 == 0 else f"{seconds:.0f} s"


@dataclass
class NodeLine:
    name: str
    implicated: int
    implicated_jobs: list[str]
    excluded_jobs: list[str]
    drained_jobs: list[str]
    last_at: datetime | None


def nodes_view(reader: DigestReader) -> list[NodeLine]:
    def read(d: AuditDigest) -> list[NodeLine]:
        lines = [
            NodeLine(
                name,
                r.implicated,
                sorted(r.implicated_jobs),
                sorted(r.excluded_jobs),
                sorted(r.drained_jobs),
                r.last_at,
            )
            for name, r in d.nodes.items()
        ]
        return sorted(
            lines,
            key=lambda n: (
                -(len(n.drained_jobs) * 100 + len(n.excluded_jobs) * 10 + n.implicated),
                n.name,
            ),
        )

    return reader.view(read)


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    colour: str
    title: str


@dataclass
class Chart:
    bars: list[Bar] = field(default_factory=list)
    labels: list[tuple[float, str]] = field(default_factory=list)
    top: int = 0
    legend: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Overview:
    failures: Chart
    actions: Chart
    tiles: list[tuple[str, str, str]]
    latencies: list[tuple[str, str, str, int]]
    stops: list[tuple[datetime, str, str]]
    outcomes: list[tuple[str, int]]


WIDTH, HEIGHT, LEFT, BOTTOM = 640.0, 180.0, 30.0, 20.0


def _days(today: date) -> list[date]:
    return [today - timedelta(days=i) for i in range(DAYS - 1, -1, -1)]


def _stacked(per_day: dict[date, dict[str, int]], days: list[date]) -> Chart:
    totals = [sum(per_day.get(day, {}).values()) for day in days]
    top = max([*totals, 1])
    slot = (WIDTH - LEFT) / len(days)
    chart = Chart(top=top)
    seen: set[str] = set()
    for i, day in enumerate(days):
        y = HEIGHT - BOTTOM
        for category, n in sorted(per_day.get(day, {}).items()):
            h = (HEIGHT - BOTTOM - 10) * n / top
            y -= h
            colour = COLOURS.get(category, "#555555")
            chart.bars.append(
                Bar(
                    LEFT + i * slot + 2,
                    y,
                    slot - 4,
                    h,
                    colour,
                    f"{day.isoformat()}: {n} {category}",
                )
            )
            seen.add(category)
        if i % 2 == 0:
            chart.labels.append((LEFT + i * slot + slot / 2, day.strftime("%m-%d")))
    chart.legend = [(c, COLOURS.get(c, "#555555")) for c in sorted(seen)]
    return chart


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.0f} s"
    return f"{value / 60:.1f} min" if value < 7200 else f"{value / 3600:.1f} h"


def overview_view(reader: DigestReader) -> Overview:
    def read(d: AuditDigest) -> Overview:
        days = _days(datetime.now(UTC).date())
        failures = _stacked({k: dict(v) for k, v in d.failures_by_day.items()}, days)
        actions = _stacked({k: {"action": v} for k, v in d.actions_by_day.items()}, days)
        for bar in actions.bars:
            bar.colour = "#0072b2"
        actions.legend = []
        tiles = [
            ("jobs watched", str(d.jobs_watched), "monitoring started, not yet ended"),
            ("pending approvals", str(len(d.pending)), "advice waiting for an operator"),
            ("holds outstanding", str(d.holds_outstanding), "jobs Resurgo holds right now"),
            ("failures attributed", str(sum(d.anomalies.values())), "all time"),
            ("scheduler actions", str(sum(d.actions.values())), "all time, applied"),
        ]
        latencies = [
            (
                "detection → action",
                _seconds(percentile(d.detection_to_action, 0.5)),
                _seconds(percentile(d.detection_to_action, 0.95)),
                len(d.detection_to_action),
            ),
            (
                "failure → next attempt running",
                _seconds(percentile(d.failure_to_running, 0.5)),
                _seconds(percentile(d.failure_to_running, 0.95)),
                len(d.failure_to_running),
            ),
        ]
        return Overview(
            failures,
            actions,
            tiles,
            latencies,
            sorted(d.stops, reverse=True)[:50],
            d.outcomes.most_common(),
        )

    return reader.view(read)


__all__ = ["COLOURS", "Gates", "Overview", "gates_of", "nodes_view", "overview_view"]
