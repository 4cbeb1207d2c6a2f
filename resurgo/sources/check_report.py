"""What `resurgo signals check` takes and reports: its options, the report (each log label and
metric with its status and proposal, the registry patterns that matched), and the
`[clusters.<name>.signals]` TOML snippet made from the checked settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, Field

from resurgo.sources.base import ROLES
from resurgo.sources.config import SignalsSettings

LabelState = Literal["ok", "missing", "empty", "unverified"]
MetricState = Literal["ok", "missing", "no_host_label", "unverified"]


class CheckOptions(BaseModel):
    logs: str
    prometheus: str | None = None
    job_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    metrics_host_label: str = "Hostname"
    required_metrics: list[str] = Field(default_factory=list)
    window: str = "15m"
    selector: str = ""
    cluster: str = "local"
    max_lines: int = Field(default=200_000, ge=1)
    timeout: float = Field(default=10.0, gt=0)
    retries: int = Field(default=2, ge=0)
    registry: str | None = None


class LabelStatus(BaseModel):
    role: str
    label: str
    """The backend label checked (for files: where the value comes from)."""
    status: LabelState
    values: list[str] = Field(default_factory=list)
    value_count: int = 0
    proposal: str | None = None
    candidates: list[str] = Field(default_factory=list)
    detail: str = ""


class PatternHit(BaseModel):
    id: str
    kind: str
    category: str
    role: str
    severity: str
    count: int
    example: str


class MetricStatus(BaseModel):
    metric: str
    required: bool
    status: MetricState
    series: int = 0
    host_label: str = ""
    hosts: list[str] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    proposal: str | None = None
    detail: str = ""


class CheckReport(BaseModel):
    ok: bool = False
    logs_url: str
    logs_kind: str
    prometheus_url: str | None = None
    window: str
    window_seconds: float
    job_id: str | None = None
    labels: list[LabelStatus] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    lines_scanned: int = 0
    truncated: bool = False
    jobs_seen: list[str] = Field(default_factory=list)
    hosts_seen: list[str] = Field(default_factory=list)
    patterns: list[PatternHit] = Field(default_factory=list)
    metrics: list[MetricStatus] = Field(default_factory=list)
    xid_now: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    settings: SignalsSettings | None = None
    snippet: str = ""
    elapsed_seconds: float = 0.0


class UsageError(ValueError):
    """Bad command-line arguments (exit 2)."""


def parse_label_overrides(items: Sequence[str]) -> dict[str, str]:
    """`["job_id=slurm_job_id", "host=hostname"]` → dict (ValueError on bad items)."""
    out: dict[str, str] = {}
    for item in items:
        role, sep, name = item.partition("=")
        role, name = role.strip(), name.strip()
        if not sep or not role or not name:
            raise ValueError(f"--label expects ROLE=NAME (e.g. job_id=slurm_job_id), got {item!r}")
        if role not in ROLES:
            raise ValueError(f"--label role must be one of {', '.join(ROLES)}, got {role!r}")
        out[role] = name
    return out


def config_snippet(settings: SignalsSettings, cluster: str, *, file_source: bool) -> str:
    """The `[clusters.<cluster>.signals]` section for these settings (TOML written by tomli-w,
    so any cluster name, label or selector is quoted and escaped correctly)."""
    signals: dict[str, Any] = {}
    if settings.logs is not None:
        signals["logs"] = settings.logs
    if settings.prometheus is not None:
        signals["prometheus"] = settings.prometheus
    if settings.selector:
        signals["selector"] = settings.selector
    if not file_source:
        signals["labels"] = {role: getattr(settings.labels, role) for role in ROLES}
    if settings.prometheus is not None:
        m = settings.metrics
        signals["metrics"] = {
            "host_label": m.host_label,
            "xid": m.xid,
            "temperature": m.temperature,
            "throughput": m.throughput,
            "required": list(m.required),
        }
    return tomli_w.dumps({"clusters": {cluster: {"signals": signals}}})


__all__ = [
    "CheckOptions",
    "CheckReport",
    "LabelState",
    "LabelStatus",
    "MetricState",
    "MetricStatus",
    "PatternHit",
    "UsageError",
    "config_snippet",
    "parse_label_overrides",
]
