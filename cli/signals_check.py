"""`resurgo signals check`: verify the log/metrics contract and print the config to paste.

Given a log endpoint (file pattern, Loki or VictoriaLogs), optionally Prometheus and a job id,
it checks over a recent window that:

- logs: a job id label, a host label and a stream label exist and carry values (for files: `%j`
  or `slurm-<id>.out` in the path, `%N` in the path or NCCL `host:pid:tid` prefixes, and the
  file extension); a label missing under its configured name is looked for under other names
  actually present (`slurm_job_id`, `SLURM_JOB_ID`, `hostname`, ...) and proposed;
- metrics: the required metrics exist (`DCGM_FI_DEV_XID_ERRORS` at least) and carry the
  configured hostname label (else a label that looks like one is proposed);

and reports which failure patterns of the registry matched in the window. The report ends with
the `[clusters.<name>.signals]` TOML snippet (with the proposals applied). Exit codes: 0 contract
met, 1 not met (the report says why), 2 bad arguments.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from resurgo.detect.registry import Registry, RegistryError
from resurgo.sources.base import ROLES, LabelMapping, LogRecord, parse_duration, utcnow
from resurgo.sources.config import (
    MetricsSettings,
    SignalsSettings,
    build_log_source,
    parse_logs_url,
)
from resurgo.sources.errors import SourceError
from resurgo.sources.file import FileLogSource
from resurgo.sources.labels import propose_label, rank_candidates
from resurgo.sources.loki import LokiSource
from resurgo.sources.prometheus import (
    XID_METRIC,
    PrometheusSource,
    check_metric_name,
)
from resurgo.sources.victorialogs import VictoriaLogsSource

EXIT_OK = 0
EXIT_CONTRACT = 1
EXIT_USAGE = 2
MAX_VALUES_SHOWN = 5

LabelState = Literal["ok", "missing", "empty", "unverified"]
_ROLE_TEXT = {"job_id": "job id", "host": "host", "stream": "stream"}
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


# ---------------------------------------------------------------------- the check
async def run_check(opts: CheckOptions) -> CheckReport:
    started = time.monotonic()
    try:
        endpoint = parse_logs_url(opts.logs)
        window = parse_duration(opts.window)
        mapping = LabelMapping().with_overrides(opts.labels)
        required = _dedupe([XID_METRIC, *(check_metric_name(m) for m in opts.required_metrics)])
        registry = Registry.load(opts.registry) if opts.registry else Registry.default()
        if opts.prometheus is not None and not opts.prometheus.startswith(("http://", "https://")):
            raise ValueError(f"--prometheus must be an http(s) URL, got {opts.prometheus!r}")
    except (ValueError, RegistryError) as exc:
        raise UsageError(str(exc)) from exc

    report = CheckReport(
        logs_url=opts.logs,
        logs_kind=endpoint.kind,
        prometheus_url=opts.prometheus,
        window=opts.window,
        window_seconds=window,
        job_id=opts.job_id,
    )
    until = utcnow()
    since = until - timedelta(seconds=window)
    settings = SignalsSettings(
        logs=opts.logs,
        prometheus=opts.prometheus,
        selector=opts.selector,
        labels=mapping,
        metrics=MetricsSettings(host_label=opts.metrics_host_label, required=required),
        timeout=opts.timeout,
        retries=opts.retries,
    )

    if endpoint.kind == "file":
        effective = await _check_file_logs(endpoint.target, opts, since, registry, report)
    else:
        effective = await _check_remote_logs(settings, opts, since, until, registry, report)
    settings = settings.model_copy(update={"labels": effective})

    if opts.prometheus is not None:
        host_label = await _check_metrics(settings, opts, since, until, report)
        metrics = settings.metrics.model_copy(update={"host_label": host_label})
        settings = settings.model_copy(update={"metrics": metrics})
    else:
        report.notes.append("no --prometheus given: GPU metrics were not checked")

    report.settings = settings
    report.snippet = config_snippet(settings, opts.cluster, file_source=endpoint.kind == "file")
    report.ok = not report.problems
    report.elapsed_seconds = round(time.monotonic() - started, 3)
    return report


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _scan(
    records: Sequence[LogRecord], registry: Registry, report: CheckReport
) -> tuple[set[str], set[str]]:
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    jobs: set[str] = set()
    hosts: set[str] = set()
    for record in records:
        if record.job_id:
            jobs.add(record.job_id)
        if record.host:
            hosts.add(record.host)
        for match in registry.scan(record.text):
            counts[match.id] += 1
            examples.setdefault(match.id, record.text[:200])
    report.lines_scanned = len(records)
    report.jobs_seen = sorted(jobs, key=_natural)
    report.hosts_seen = sorted(hosts, key=_natural)
    order = {e.id: i for i, e in enumerate(registry.entries)}
    for pattern_id, count in sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0]])):
        entry = registry.get(pattern_id)
        report.patterns.append(
            PatternHit(
                id=pattern_id,
                kind=str(entry.kind),
                category=str(entry.category),
                role=entry.role,
                severity=entry.severity,
                count=count,
                example=examples[pattern_id],
            )
        )
    return jobs, hosts


def _natural(text: str) -> tuple[int, str]:
    digits = "".join(ch for ch in text if ch.isdigit())
    return (int(digits) if digits and len(digits) < 19 else 0, text)


async def _check_remote_logs(
    settings: SignalsSettings,
    opts: CheckOptions,
    since: datetime,
    until: datetime,
    registry: Registry,
    report: CheckReport,
) -> LabelMapping:
    mapping = settings.labels
    source = build_log_source(settings)
    assert isinstance(source, LokiSource | VictoriaLogsSource)
    what = "label" if isinstance(source, LokiSource) else "field"
    try:
        try:
            names = await source.label_names(since, until)
        except SourceError as exc:
            report.problems.append(f"logs: {exc}")
            report.labels = [
                LabelStatus(role=r, label=getattr(mapping, r), status="unverified") for r in ROLES
            ]
            return mapping
        effective: dict[str, str] = {}
        for role in ROLES:
            configured = getattr(mapping, role)
            others = {getattr(mapping, r) for r in ROLES if r != role}
            status = LabelStatus(role=role, label=configured, status="missing")
            target: str | None = configured if configured in names else None
            if target is None:
                ranked = rank_candidates(role, names, configured, exclude=others)
                status.candidates = [c.name for c in ranked[:3]]
                status.proposal = propose_label(role, names, configured, exclude=others)
                target = status.proposal
            values: list[str] = []
            if target is not None:
                try:
                    values = await source.label_values(target, since, until)
                except SourceError as exc:
                    status.detail = str(exc)
            status.values = sorted(values, key=_natural)[:MAX_VALUES_SHOWN]
            status.value_count = len(values)
            if configured in names:
                status.status = "ok" if values else "empty"
            if status.status == "empty":
                report.problems.append(
                    f"logs: {what} '{configured}' (the {_ROLE_TEXT[role]}) exists but has no "
                    f"values in the last {opts.window}"
                )
            elif status.status == "missing":
                found = ", ".join(sorted(names)[:12]) or "none"
                message = (
                    f"logs: no {what} '{configured}' for the {_ROLE_TEXT[role]} in the last "
                    f"{opts.window} ({what}s present: {found})"
                )
                if status.proposal:
                    message += f"; '{status.proposal}' looks like it: --label {role}="
                    message += status.proposal
                report.problems.append(message)
                status.detail = status.detail or (
                    f"proposed: {status.proposal}" if status.proposal else "no candidate found"
                )
            if status.proposal and values:
                effective[role] = status.proposal
            report.labels.append(status)
        if effective:
            mapping = mapping.with_overrides(effective)
            report.notes.append(
                "label mapping proposals applied to the snippet: "
                + ", ".join(f"{r}={n}" for r, n in effective.items())
            )
        job_status = report.labels[0]
        if opts.job_id is not None and job_status.value_count:
            await _check_job_listed(source, mapping.job_id, opts, since, until, report)
        if mapping.job_id in names or "job_id" in effective:
            await _scan_remote(settings, mapping, opts, since, until, registry, report)
        else:
            report.notes.append("log lines were not scanned: no job id label to select them by")
        return mapping
    finally:
        await source.aclose()


async def _check_job_listed(
    source: LokiSource | VictoriaLogsSource,
    label: str,
    opts: CheckOptions,
    since: datetime,
    until: datetime,
    report: CheckReport,
) -> None:
    try:
        values = await source.label_values(label, since, until)
    except SourceError:
        return
    if opts.job_id not in values:
        report.problems.append(
            f"logs: job {opts.job_id} has no log lines labelled {label}={opts.job_id} "
            f"in the last {opts.window}"
        )


async def _scan_remote(
    settings: SignalsSettings,
    mapping: LabelMapping,
    opts: CheckOptions,
    since: datetime,
    until: datetime,
    registry: Registry,
    report: CheckReport,
) -> None:
    source = build_log_source(settings.model_copy(update={"labels": mapping}))
    try:
        stream = source.read(opts.job_id, since=since, until=until, max_records=opts.max_lines)
        records = await stream.collect()
        report.truncated = stream.truncated
    except SourceError as exc:
        report.problems.append(f"logs: reading lines failed: {exc}")
        return
    finally:
        await source.aclose()
    _scan(records, registry, report)
    if not records:
        report.notes.append(f"no log lines in the last {opts.window}")


async def _check_file_logs(
    pattern: str, opts: CheckOptions, since: datetime, registry: Registry, report: CheckReport
) -> LabelMapping:
    source = FileLogSource(pattern)
    path = source.pattern
    everything = await source.files(opts.job_id)
    recent = await source.files(opts.job_id, since)
    report.files = [f.path for f in recent][:50]
    scope = f" for job {opts.job_id}" if opts.job_id else ""
    if not everything:
        report.problems.append(f"logs: no file matches {path.glob(opts.job_id)}{scope}")
    elif not recent:
        newest = max(everything, key=lambda f: Path(f.path).stat().st_mtime)
        age = time.time() - Path(newest.path).stat().st_mtime
        report.problems.append(
            f"logs: no file matching {path.glob(opts.job_id)}{scope} was modified in the last "
            f"{opts.window} (newest: {newest.path}, {age / 60:.0f} min ago); widen --window"
        )
    reader = source.read(opts.job_id, since=since, max_records=opts.max_lines)
    records = await reader.collect()
    report.truncated = reader.truncated
    jobs, hosts = _scan(records, registry, report)
    jobs |= {f.job_id for f in recent if f.job_id}
    hosts |= {f.host for f in recent if f.host}
    report.jobs_seen = sorted(jobs, key=_natural)
    report.hosts_seen = sorted(hosts, key=_natural)

    job_source = {"j": "%j in the path", "A": "%A in the path", "J": "%J in the path"}
    job_label = job_source.get(path.job_token or "", "slurm-<id>.out file name")
    job = LabelStatus(role="job_id", label=job_label, status="ok" if jobs else "missing")
    host_label = "%N in the path" if path.has_host else "NCCL host:pid:tid prefixes"
    host = LabelStatus(role="host", label=host_label, status="ok" if hosts else "missing")
    streams = sorted({r.stream for r in records if r.stream} | {f.stream for f in recent})
    stream = LabelStatus(
        role="stream", label="file extension (.out/.err)", status="ok" if streams else "empty"
    )
    for status, values in ((job, jobs), (host, hosts), (stream, set(streams))):
        status.values = sorted(values, key=_natural)[:MAX_VALUES_SHOWN]
        status.value_count = len(values)
    if recent and not jobs:
        job.detail = "put %j in the pattern, e.g. file:///shared/logs/slurm-%j.out"
        report.problems.append(
            f"logs: no job id in the file names matched by {pattern} ({job.detail})"
        )
    if recent and not hosts:
        host.detail = (
            "put %N in the pattern (sbatch --output=.../%N-%j.out) or run with NCCL_DEBUG=INFO "
            "so that lines carry NCCL's host:pid:tid prefix"
        )
        report.problems.append(f"logs: no host found in paths or lines ({host.detail})")
    report.labels = [job, host, stream]
    if not path.has_host and hosts:
        report.notes.append("hosts come from NCCL prefixes: lines without one have no host")
    return LabelMapping()


async def _check_metrics(
    settings: SignalsSettings,
    opts: CheckOptions,
    since: datetime,
    until: datetime,
    report: CheckReport,
) -> str:
    """Check the metrics; returns the host label to configure (a proposal when one fits)."""
    assert settings.prometheus is not None
    host_label = settings.metrics.host_label
    prom = PrometheusSource(
        settings.prometheus, host_label=host_label, timeout=opts.timeout, retries=opts.retries
    )
    m = settings.metrics
    required = m.required
    optional = [x for x in (m.temperature, m.throughput) if x not in required]
    try:
        try:
            names = set(await prom.metric_names(since, until))
        except SourceError as exc:
            report.problems.append(f"metrics: {exc}")
            report.metrics = [
                MetricStatus(metric=m, required=m in required, status="unverified")
                for m in [*required, *optional]
            ]
            return host_label
        proposals: list[str] = []
        for metric in [*required, *optional]:
            is_required = metric in required
            label = m.throughput_node_label if metric == m.throughput else host_label
            status = MetricStatus(
                metric=metric, required=is_required, status="missing", host_label=label
            )
            report.metrics.append(status)
            if metric not in names:
                close = difflib.get_close_matches(metric, sorted(names), n=1, cutoff=0.8)
                status.detail = f"did you mean {close[0]}?" if close else ""
                if is_required:
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    report.problems.append(
                        f"metrics: required metric {metric} not found in the last "
                        f"{opts.window}{hint}"
                    )
                else:
                    report.notes.append(f"optional metric {metric} not found")
                continue
            try:
                label_sets = await prom.series([metric], since, until)
            except SourceError as exc:
                status.status = "unverified"
                status.detail = str(exc)
                report.problems.append(f"metrics: {exc}")
                continue
            present = sorted({k for s in label_sets for k in s} - {"__name__"})
            status.series = len(label_sets)
            status.labels = present
            hosts = {s[label] for s in label_sets if s.get(label)}
            if label == "instance":
                hosts = {prom.host_of(s) or "" for s in label_sets} - {""}
            status.hosts = sorted(hosts, key=_natural)
            if hosts:
                status.status = "ok"
                continue
            status.status = "no_host_label"
            status.proposal = propose_label("host", present, label)
            hint = f"; '{status.proposal}' looks like it" if status.proposal else ""
            status.detail = f"no '{label}' label{hint}"
            message = (
                f"metrics: {metric} has no '{label}' label (labels: {', '.join(present)}){hint}"
            )
            if is_required:
                if status.proposal:
                    message += f": --metrics-host-label {status.proposal}"
                    proposals.append(status.proposal)
                report.problems.append(message)
            else:
                report.notes.append(message)
        if opts.job_id is not None and m.throughput in names:
            per_node = await prom.throughput(
                opts.job_id,
                metric=m.throughput,
                job_label=m.throughput_job_label,
                node_label=m.throughput_node_label,
            )
            if not per_node:
                report.notes.append(f"no {m.throughput} series for job {opts.job_id}")
        if m.xid in names and not proposals:
            try:
                report.xid_now = [
                    f"{r.host}/gpu{r.gpu}: XID {r.xid}" for r in await prom.xid_errors(metric=m.xid)
                ]
            except SourceError as exc:
                report.notes.append(f"could not read current XID values: {exc}")
        if proposals:
            report.notes.append(
                f"metrics host label proposal applied to the snippet: {proposals[0]}"
            )
            return proposals[0]
        return host_label
    finally:
        await prom.aclose()


# ---------------------------------------------------------------------- output
def _toml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def config_snippet(settings: SignalsSettings, cluster: str, *, file_source: bool) -> str:
    """The `[clusters.<cluster>.signals]` section for these settings (valid TOML)."""
    table = f"clusters.{_toml(cluster) if not cluster.isidentifier() else cluster}.signals"
    lines = [f"[{table}]"]
    if settings.logs is not None:
        lines.append(f"logs = {_toml(settings.logs)}")
    if settings.prometheus is not None:
        lines.append(f"prometheus = {_toml(settings.prometheus)}")
    if settings.selector:
        lines.append(f"selector = {_toml(settings.selector)}")
    if not file_source:
        lines += ["", f"[{table}.labels]"]
        lines += [f"{role} = {_toml(getattr(settings.labels, role))}" for role in ROLES]
    if settings.prometheus is not None:
        m = settings.metrics
        required = ", ".join(_toml(r) for r in m.required)
        lines += [
            "",
            f"[{table}.metrics]",
            f"host_label = {_toml(m.host_label)}",
            f"xid = {_toml(m.xid)}",
            f"temperature = {_toml(m.temperature)}",
            f"throughput = {_toml(m.throughput)}",
            f"required = [{required}]",
        ]
    return "\n".join(lines) + "\n"


_STATUS_STYLE = {
    "ok": "green",
    "missing": "red",
    "empty": "red",
    "no_host_label": "red",
    "unverified": "yellow",
}


def render(report: CheckReport, console: Console) -> None:
    head = Text("Resurgo signals check", style="bold")
    head.append(f"  window {report.window}")
    if report.job_id:
        head.append(f"  job {report.job_id}")
    console.print(head)
    console.print(Text(f"logs: {report.logs_url} ({report.logs_kind})"))
    if report.prometheus_url:
        console.print(Text(f"metrics: {report.prometheus_url} (prometheus)"))

    labels = Table(title="Log labels", title_justify="left")
    for column in ("role", "label", "status", "values", "proposal / detail"):
        labels.add_column(column)
    for s in report.labels:
        shown = ", ".join(s.values) + (" …" if s.value_count > len(s.values) else "")
        labels.add_row(
            s.role,
            Text(s.label),
            Text(s.status, style=_STATUS_STYLE.get(s.status, "")),
            Text(f"{s.value_count}: {shown}" if s.value_count else "-"),
            Text(s.proposal or s.detail or ("candidates: " + ", ".join(s.candidates))
                 if (s.proposal or s.detail or s.candidates) else ""),
        )  # fmt: skip
    console.print(labels)
    summary = f"{report.lines_scanned} line(s) scanned"
    if report.truncated:
        summary += " (limit reached)"
    if report.files:
        summary += f" from {len(report.files)} file(s)"
    summary += f"; jobs: {', '.join(report.jobs_seen[:8]) or '-'}"
    summary += f"; hosts: {', '.join(report.hosts_seen[:8]) or '-'}"
    console.print(Text(summary))

    patterns = Table(
        title=f"Registry patterns matched (last {report.window})", title_justify="left"
    )
    for column in ("pattern", "kind", "category", "role", "severity", "count"):
        patterns.add_column(column, justify="right" if column == "count" else "left")
    for p in report.patterns:
        patterns.add_row(p.id, p.kind, p.category, p.role, p.severity, str(p.count))
    if not report.patterns:
        patterns.add_row("(none)", "", "", "", "", "0")
    console.print(patterns)

    if report.metrics:
        metrics = Table(title="Metrics", title_justify="left")
        for column in ("metric", "required", "status", "series", "host label", "hosts / detail"):
            metrics.add_column(column)
        for m in report.metrics:
            hosts = ", ".join(m.hosts[:6]) + (" …" if len(m.hosts) > 6 else "")
            metrics.add_row(
                m.metric,
                "yes" if m.required else "no",
                Text(m.status, style=_STATUS_STYLE.get(m.status, "")),
                str(m.series),
                m.host_label,
                Text(hosts or m.detail),
            )
        console.print(metrics)
        if report.xid_now:
            console.print(Text("GPUs with a non-zero XID now: " + "; ".join(report.xid_now)))

    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
    if report.problems:
        console.print(Text("CONTRACT NOT MET", style="bold red"))
        for problem in report.problems:
            console.print(Text(f"  - {problem}", style="red"), soft_wrap=True)
    else:
        console.print(Text("contract met", style="bold green"))
    console.print(Text("\nConfig snippet (paste into the Resurgo config):", style="bold"))
    console.print(report.snippet, markup=False, highlight=False, end="")


def check_command(
    *,
    logs: str,
    prometheus: str | None = None,
    job_id: str | None = None,
    labels: Sequence[str] = (),
    metrics_host_label: str = "Hostname",
    required_metrics: Sequence[str] = (),
    window: str = "15m",
    selector: str = "",
    cluster: str = "local",
    max_lines: int = 200_000,
    timeout: float = 10.0,
    registry: str | None = None,
    as_json: bool = False,
) -> int:
    """Run the check, print the report (tables or JSON); returns the exit code."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    err = Console(stderr=True)
    try:
        overrides = parse_label_overrides(labels)
        opts = CheckOptions(
            logs=logs,
            prometheus=prometheus,
            job_id=job_id,
            labels=overrides,
            metrics_host_label=metrics_host_label,
            required_metrics=list(required_metrics),
            window=window,
            selector=selector,
            cluster=cluster,
            max_lines=max_lines,
            timeout=timeout,
            registry=registry,
        )
        report = asyncio.run(run_check(opts))
    except (UsageError, ValueError) as exc:
        err.print(Text(f"error: {exc}", style="red"))
        return EXIT_USAGE
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        render(report, console)
    return EXIT_OK if report.ok else EXIT_CONTRACT


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
