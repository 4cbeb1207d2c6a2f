"""The Prometheus source: instant and range queries, series/label discovery and GPU helpers.

Endpoints (Prometheus HTTP API v1): `/api/v1/query` (vector, scalar, string results),
`/api/v1/query_range` (matrix), `/api/v1/series`, `/api/v1/labels`, `/api/v1/label/<n>/values`.
Responses are `{"status": "success"|"error", "data": ..., "errorType": ..., "error": ...,
"warnings": [...]}`; sample values are `[<unix seconds float>, "<value string>"]` where the
string may be `NaN`, `+Inf` or `-Inf`.

The GPU helpers read DCGM exporter metrics (`DCGM_FI_DEV_XID_ERRORS`: the last XID error code of
a GPU, `DCGM_FI_DEV_GPU_TEMP`, ...) and a training throughput metric. The host label is
configurable (`Hostname` for dcgm-exporter, `instance` for a plain scrape, whose `:port` is
dropped).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from resurgo.sources.errors import SourceContractError
from resurgo.sources.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, HttpApi
from resurgo.sources.labels import check_selector_label, quote_string

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
TEMPERATURE_METRIC = "DCGM_FI_DEV_GPU_TEMP"
THROUGHPUT_METRIC = "training_throughput_samples_per_second"
DEFAULT_HEALTH_METRICS = (
    XID_METRIC,
    TEMPERATURE_METRIC,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one series at one time (instant query result)."""

    labels: Mapping[str, str]
    time: float
    value: float


@dataclass(frozen=True, slots=True)
class Series:
    """One series over time (range query result)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's value of one metric."""

    host: str
    gpu: str
    value: float
    uuid: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def xid(self) -> int | None:
        """The value read as an XID code (None for 0, NaN or non-integers)."""
        if not math.isfinite(self.value) or self.value <= 0 or self.value != int(self.value):
            return None
        return int(self.value)


@dataclass
class GpuHealth:
    host: str
    gpu: str
    uuid: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def temperature(self) -> float | None:
        return self.metrics.get(TEMPERATURE_METRIC)

    @property
    def last_xid(self) -> int | None:
        value = self.metrics.get(XID_METRIC)
        if value is None or not math.isfinite(value) or value <= 0:
            return None
        return int(value)


# ---------------------------------------------------------------------- parsing
def _float(raw: Any, where: str) -> float:
    if not isinstance(raw, str):
        raise SourceContractError(f"{where}: sample value must be a string, got {raw!r:.40}")
    try:
        return float(raw)
    except ValueError:
        raise SourceContractError(f"{where}: sample value {raw[:40]!r} is not a number") from None


def _point(raw: Any, where: str) -> tuple[float, float]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise SourceContractError(f'{where}: expected [<time>, "<value>"], got {raw!r:.80}')
    stamp = raw[0]
    if not isinstance(stamp, int | float) or isinstance(stamp, bool):
        raise SourceContractError(f"{where}: sample time must be a number, got {stamp!r:.40}")
    return float(stamp), _float(raw[1], where)


def _labels(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise SourceContractError(f"{where}: 'metric' must map strings to strings")
    return dict(raw)


def unwrap(payload: Any, what: str) -> Any:
    """The `data` of a success response (SourceContractError with the server's error otherwise)."""
    if not isinstance(payload, dict):
        raise SourceContractError(f"{what}: expected a JSON object, got {type(payload).__name__}")
    status = payload.get("status")
    if status == "error":
        kind = payload.get("errorType", "error")
        raise SourceContractError(f"{what}: {kind}: {payload.get('error', 'no message')}")
    if status != "success" or "data" not in payload:
        raise SourceContractError(f"{what}: not a Prometheus API response (status {status!r})")
    return payload["data"]


def parse_instant(payload: Any, what: str = "prometheus query") -> list[Sample]:
    """Samples of a `vector` result; a `scalar` becomes one sample without labels."""
    data = unwrap(payload, what)
    if not isinstance(data, dict):
        raise SourceContractError(f"{what}: 'data' is not an object")
    kind, result = data.get("resultType"), data.get("result")
    if kind in ("scalar", "string"):
        stamp, value = _point(result, f"{what}: result")
        return [Sample({}, stamp, value)] if kind == "scalar" else []
    if kind == "matrix":
        raise SourceContractError(f"{what}: got a matrix; use query_range for range vectors")
    if kind != "vector" or not isinstance(result, list):
        raise SourceContractError(f"{what}: unexpected resultType {kind!r}")
    out: list[Sample] = []
    for i, item in enumerate(result):
        where = f"{what}: result[{i}]"
        if not isinstance(item, dict):
            raise SourceContractError(f"{where} is not an object")
        stamp, value = _point(item.get("value"), where)
        out.append(Sample(_labels(item.get("metric", {}), where), stamp, value))
    return out


def parse_range(payload: Any, what: str = "prometheus query_range") -> list[Series]:
    data = unwrap(payload, what)
    if not isinstance(data, dict):
        raise SourceContractError(f"{what}: 'data' is not an object")
    kind, result = data.get("resultType"), data.get("result")
    if kind != "matrix" or not isinstance(result, list):
        raise SourceContractError(f"{what}: unexpected resultType {kind!r}, expected 'matrix'")
    out: list[Series] = []
    for i, item in enumerate(result):
        where = f"{what}: result[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("values"), list):
            raise SourceContractError(f"{where} has no 'values' list")
        points = tuple(_point(p, f"{where}.values[{j}]") for j, p in enumerate(item["values"]))
        out.append(Series(_labels(item.get("metric", {}), where), points))
    return out


def parse_label_sets(payload: Any, what: str) -> list[dict[str, str]]:
    data = unwrap(payload, what)
    if not isinstance(data, list):
        raise SourceContractError(f"{what}: 'data' is not a list")
    return [_labels(item, f"{what}: data[{i}]") for i, item in enumerate(data)]


def parse_names(payload: Any, what: str) -> list[str]:
    data = unwrap(payload, what)
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
        raise SourceContractError(f"{what}: 'data' must be a list of strings")
    return list(data)


def check_metric_name(name: str) -> str:
    if _METRIC_NAME.fullmatch(name) is None:
        raise ValueError(f"{name!r} is not a valid Prometheus metric name")
    return name


def _unix(value: datetime | float) -> str:
    return f"{value.timestamp() if isinstance(value, datetime) else value:.3f}"


# ---------------------------------------------------------------------- client
class PrometheusSource:
    """A Prometheus HTTP API client with typed results and DCGM/throughput helpers."""

    kind = "prometheus"

    def __init__(
        self,
        base_url: str,
        *,
        host_label: str = "Hostname",
        gpu_label: str = "gpu",
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.host_label = check_selector_label(host_label)
        self.gpu_label = check_selector_label(gpu_label)
        self.api = HttpApi(
            base_url,
            name="prometheus",
            timeout=timeout,
            retries=retries,
            headers=headers,
            client=client,
        )

    async def aclose(self) -> None:
        await self.api.aclose()

    @property
    def _where(self) -> str:
        return f"prometheus at {self.api.base_url}"

    # ------------------------------------------------------------------ raw API
    async def query(self, expr: str, at: datetime | None = None) -> list[Sample]:
        params = {"query": expr} | ({"time": _unix(at)} if at is not None else {})
        payload = await self.api.get_json("/api/v1/query", params)
        return parse_instant(payload, f"{self._where}: query {expr!r}")

    async def query_range(
        self, expr: str, start: datetime, end: datetime, step: float | timedelta
    ) -> list[Series]:
        seconds = step.total_seconds() if isinstance(step, timedelta) else float(step)
        if seconds <= 0:
            raise ValueError("step must be positive")
        params = {"query": expr, "start": _unix(start), "end": _unix(end), "step": f"{seconds:g}"}
        payload = await self.api.get_json("/api/v1/query_range", params)
        return parse_range(payload, f"{self._where}: query_range {expr!r}")

    async def series(
        self, match: Sequence[str], start: datetime | None = None, end: datetime | None = None
    ) -> list[dict[str, str]]:
        params: dict[str, str | Sequence[str]] = {"match[]": list(match)}
        if start is not None:
            params["start"] = _unix(start)
        if end is not None:
            params["end"] = _unix(end)
        payload = await self.api.get_json("/api/v1/series", params)
        return parse_label_sets(payload, f"{self._where}: series")

    async def label_values(
        self, name: str, start: datetime | None = None, end: datetime | None = None
    ) -> list[str]:
        check_selector_label(name)
        params = {"start": _unix(start)} if start is not None else {}
        if end is not None:
            params["end"] = _unix(end)
        payload = await self.api.get_json(f"/api/v1/label/{name}/values", params)
        return parse_names(payload, f"{self._where}: values of {name}")

    async def metric_names(
        self, start: datetime | None = None, end: datetime | None = None
    ) -> list[str]:
        return await self.label_values("__name__", start, end)

    # ------------------------------------------------------------------ helpers
    def host_of(self, labels: Mapping[str, str]) -> str | None:
        host = labels.get(self.host_label)
        if host and self.host_label == "instance":
            host = _strip_port(host)
        return host or None

    def selector(self, metric: str, hosts: Iterable[str] | None = None, **match: str) -> str:
        """`metric{Hostname=~"node1|node2",k="v"}` with every value quoted."""
        check_metric_name(metric)
        matchers = [f"{check_selector_label(k)}={quote_string(v)}" for k, v in match.items()]
        wanted = sorted(set(hosts or ()))
        if wanted:
            alternatives = "|".join(re.escape(h) for h in wanted)
            if self.host_label == "instance":
                alternatives = f"(?:{alternatives})(?::[0-9]+)?"
            matchers.insert(0, f"{self.host_label}=~{quote_string(alternatives)}")
        return metric + ("{" + ",".join(matchers) + "}" if matchers else "")

    def _gpu(self, sample: Sample) -> GpuReading | None:
        host = self.host_of(sample.labels)
        if host is None:
            return None
        return GpuReading(
            host=host,
            gpu=sample.labels.get(self.gpu_label, ""),
            value=sample.value,
            uuid=sample.labels.get("UUID") or sample.labels.get("uuid"),
            labels=sample.labels,
        )

    async def gpu_metric(
        self, metric: str, hosts: Iterable[str] | None = None, at: datetime | None = None
    ) -> list[GpuReading]:
        """Current per-GPU values of one metric (series without the host label are ignored)."""
        samples = await self.query(self.selector(metric, hosts), at)
        readings = [r for r in (self._gpu(s) for s in samples) if r is not None]
        return sorted(readings, key=lambda r: (r.host, r.gpu))

    async def xid_errors(
        self, hosts: Iterable[str] | None = None, *, metric: str = XID_METRIC
    ) -> list[GpuReading]:
        """GPUs whose last XID error (DCGM_FI_DEV_XID_ERRORS) is non-zero right now."""
        return [r for r in await self.gpu_metric(metric, hosts) if r.xid is not None]

    async def xid_events(
        self, window: timedelta, hosts: Iterable[str] | None = None, *, metric: str = XID_METRIC
    ) -> list[GpuReading]:
        """GPUs whose XID value changed to a non-zero code within `window` (value: the code)."""
        seconds = max(int(window.total_seconds()), 1)
        inner = self.selector(metric, hosts)
        expr = f"({inner} != 0) and (changes({inner}[{seconds}s]) > 0)"
        samples = await self.query(expr)
        readings = [r for r in (self._gpu(s) for s in samples) if r is not None]
        return sorted(readings, key=lambda r: (r.host, r.gpu))

    async def gpu_health(
        self, hosts: Iterable[str] | None = None, metrics: Sequence[str] = DEFAULT_HEALTH_METRICS
    ) -> dict[tuple[str, str], GpuHealth]:
        """Per (host, gpu): the current value of each health metric that exists."""
        names = "|".join(re.escape(check_metric_name(m)) for m in metrics)
        matchers = [f"__name__=~{quote_string(names)}"]
        wanted = sorted(set(hosts or ()))
        if wanted:
            alternatives = "|".join(re.escape(h) for h in wanted)
            if self.host_label == "instance":
                alternatives = f"(?:{alternatives})(?::[0-9]+)?"
            matchers.append(f"{self.host_label}=~{quote_string(alternatives)}")
        out: dict[tuple[str, str], GpuHealth] = {}
        for sample in await self.query("{" + ",".join(matchers) + "}"):
            reading = self._gpu(sample)
            name = sample.labels.get("__name__")
            if reading is None or name is None:
                continue
            health = out.setdefault(
                (reading.host, reading.gpu), GpuHealth(reading.host, reading.gpu, reading.uuid)
            )
            health.metrics[name] = reading.value
        return dict(sorted(out.items()))

    async def throughput(
        self,
        job_id: str | None = None,
        *,
        metric: str = THROUGHPUT_METRIC,
        job_label: str = "job_id",
        node_label: str = "node",
    ) -> dict[str, float]:
        """Current throughput per node (summed over the node's series) for one job or all."""
        match = {job_label: job_id} if job_id is not None else {}
        expr = f"sum by ({check_selector_label(node_label)}) ({self.selector(metric, **match)})"
        out: dict[str, float] = {}
        for sample in await self.query(expr):
            node = sample.labels.get(node_label)
            if node:
                out[node] = sample.value
        return dict(sorted(out.items()))

    async def throughput_range(
        self,
        job_id: str,
        start: datetime,
        end: datetime,
        step: float | timedelta,
        *,
        metric: str = THROUGHPUT_METRIC,
        job_label: str = "job_id",
        node_label: str = "node",
    ) -> dict[str, tuple[tuple[float, float], ...]]:
        """Throughput per node over time for one job."""
        expr = (
            f"sum by ({check_selector_label(node_label)}) "
            f"({self.selector(metric, **{job_label: job_id})})"
        )
        out: dict[str, tuple[tuple[float, float], ...]] = {}
        for series in await self.query_range(expr, start, end, step):
            node = series.labels.get(node_label)
            if node:
                out[node] = series.points
        return dict(sorted(out.items()))


def _strip_port(instance: str) -> str:
    if instance.startswith("["):  # [::1]:9400
        return instance[1 : instance.find("]")] if "]" in instance else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and host else instance
