"""The checks behind `resurgo signals check`: over a recent window, query the log endpoint (file
pattern, Loki or VictoriaLogs) and optionally Prometheus, and verify the log/metrics contract:

- logs: a job id label, a host label and a stream label exist and carry values (for files: `%j`
  or `slurm-<id>.out` in the path, `%N` in the path or NCCL `host:pid:tid` prefixes, and the
  file extension); a label missing under its configured name is looked for under other names
  actually present (`slurm_job_id`, `SLURM_JOB_ID`, `hostname`, ...) and proposed;
- metrics: the required metrics exist (`DCGM_FI_DEV_XID_ERRORS` at least) and carry the
  configured hostname label (else a label that looks like one is proposed);

and which failure patterns of the registry matched in the window. The result is a `CheckReport`
(`resurgo.sources.check_report`) ending with the `[clusters.<name>.signals]` TOML snippet, the
proposals applied.
"""

from __future__ import annotations

import difflib
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from resurgo.detect.registry import Registry, RegistryError
from resurgo.sources.base import ROLES, LabelMapping, LogRecord, parse_duration, utcnow
from resurgo.sources.check_report import (
    CheckOptions,
    CheckReport,
    LabelStatus,
    MetricStatus,
    PatternHit,
    UsageError,
    config_snippet,
)
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

MAX_VALUES_SHOWN = 5

_ROLE_TEXT = {"job_id": "job id", "host": "host", "stream": "stream"}


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


__all__ = ["MAX_VALUES_SHOWN", "run_check"]
