"""The `signals` settings of a cluster and the factories that build sources from them.

```toml
[clusters.local.signals]
logs = "loki+http://loki.example:3100"   # | "victorialogs+http://vl:9428" | "file:///shared/slurm-%j.out"
prometheus = "http://prometheus.example:9090"   # optional
selector = 'cluster="a"'                 # optional extra LogQL matchers / LogsQL filter
timeout = 10.0
retries = 2

[clusters.local.signals.labels]          # backend label names per role
job_id = "slurm_job_id"
host = "hostname"
stream = "stream"

[clusters.local.signals.metrics]
host_label = "Hostname"
gpu_label = "gpu"
xid = "DCGM_FI_DEV_XID_ERRORS"
temperature = "DCGM_FI_DEV_GPU_TEMP"
throughput = "training_throughput_samples_per_second"
throughput_job_label = "job_id"
throughput_node_label = "node"
required = ["DCGM_FI_DEV_XID_ERRORS"]
```
"""

from __future__ import annotations

from typing import Literal, NamedTuple
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from resurgo.slurm.runner import CommandRunner
from resurgo.sources.base import LabelMapping, LogSource
from resurgo.sources.file import FileLogSource
from resurgo.sources.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT
from resurgo.sources.loki import LokiSource
from resurgo.sources.prometheus import (
    TEMPERATURE_METRIC,
    THROUGHPUT_METRIC,
    XID_METRIC,
    PrometheusSource,
    check_metric_name,
)
from resurgo.sources.victorialogs import VictoriaLogsSource

LogsKind = Literal["file", "loki", "victorialogs"]
_SCHEMES: dict[str, LogsKind] = {
    "loki+http": "loki",
    "loki+https": "loki",
    "victorialogs+http": "victorialogs",
    "victorialogs+https": "victorialogs",
    "vlogs+http": "victorialogs",
    "vlogs+https": "victorialogs",
}


class LogsEndpoint(NamedTuple):
    kind: LogsKind
    target: str
    """The file pattern (file) or the HTTP base URL (loki, victorialogs)."""


def parse_logs_url(url: str) -> LogsEndpoint:
    """`file:///p/slurm-%j.out`, `loki+http://h:3100`, `victorialogs+http://h:9428` (or a path)."""
    text = url.strip()
    if not text:
        raise ValueError("empty logs URL")
    if text.startswith("/"):
        return LogsEndpoint("file", text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URLs name a local path (file:///path), not {parts.netloc!r}")
        # Not percent-decoded: '%j', '%N', '%5t' are Slurm filename tokens here.
        raw = text.split("://", 1)[1] if "://" in text else text[len("file:") :]
        path = raw[len(parts.netloc) :] if parts.netloc else raw
        if not path.startswith("/"):
            raise ValueError(f"file URL needs an absolute path: {url!r}")
        return LogsEndpoint("file", path)
    if scheme in _SCHEMES:
        if not parts.netloc:
            raise ValueError(f"{url!r} has no host")
        base = f"{scheme.split('+', 1)[1]}://{parts.netloc}{parts.path.rstrip('/')}"
        return LogsEndpoint(_SCHEMES[scheme], base)
    raise ValueError(
        f"unsupported logs URL {url!r}: use file:///path/pattern, loki+http(s)://host:3100 "
        "or victorialogs+http(s)://host:9428"
    )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricsSettings(_Strict):
    host_label: str = "Hostname"
    gpu_label: str = "gpu"
    xid: str = XID_METRIC
    temperature: str = TEMPERATURE_METRIC
    throughput: str = THROUGHPUT_METRIC
    throughput_job_label: str = "job_id"
    throughput_node_label: str = "node"
    required: list[str] = Field(default_factory=lambda: [XID_METRIC])

    @field_validator("xid", "temperature", "throughput")
    @classmethod
    def _metric(cls, value: str) -> str:
        return check_metric_name(value)

    @field_validator("required")
    @classmethod
    def _metrics(cls, value: list[str]) -> list[str]:
        return [check_metric_name(v) for v in value]


class SignalsSettings(_Strict):
    """Where a cluster's signals come from (`[clusters.<name>.signals]`)."""

    logs: str | None = None
    prometheus: str | None = None
    selector: str = ""
    labels: LabelMapping = LabelMapping()
    metrics: MetricsSettings = MetricsSettings()
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0, le=300)
    retries: int = Field(default=DEFAULT_RETRIES, ge=0, le=10)

    @field_validator("logs")
    @classmethod
    def _logs(cls, value: str | None) -> str | None:
        if value is not None:
            parse_logs_url(value)
        return value

    @field_validator("prometheus")
    @classmethod
    def _prometheus(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("prometheus must be an http:// or https:// URL")
        return value


def build_log_source(
    settings: SignalsSettings, *, runner: CommandRunner | None = None
) -> LogSource:
    """The log source named by `settings.logs` (ValueError when none is configured)."""
    if settings.logs is None:
        raise ValueError("no logs source configured (signals.logs)")
    endpoint = parse_logs_url(settings.logs)
    if endpoint.kind == "file":
        return FileLogSource(endpoint.target, runner=runner, mapping=settings.labels)
    if endpoint.kind == "loki":
        return LokiSource(
            endpoint.target,
            mapping=settings.labels,
            selector=settings.selector,
            timeout=settings.timeout,
            retries=settings.retries,
        )
    return VictoriaLogsSource(
        endpoint.target,
        mapping=settings.labels,
        selector=settings.selector,
        timeout=settings.timeout,
        retries=settings.retries,
    )


def build_prometheus(settings: SignalsSettings) -> PrometheusSource | None:
    if settings.prometheus is None:
        return None
    return PrometheusSource(
        settings.prometheus,
        host_label=settings.metrics.host_label,
        gpu_label=settings.metrics.gpu_label,
        timeout=settings.timeout,
        retries=settings.retries,
    )
