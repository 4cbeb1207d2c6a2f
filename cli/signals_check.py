"""`resurgo signals check`: verify the log/metrics contract and print the config to paste.

Given a log endpoint (file pattern, Loki or VictoriaLogs), optionally Prometheus and a job id,
it checks over a recent window that the log and metrics contract holds (the checks:
`resurgo.sources.check`), and reports which failure patterns of the registry matched in the
window. The report ends with the `[clusters.<name>.signals]` TOML snippet (with the proposals
applied). Exit codes: 0 contract met, 1 not met (the report says why), 2 bad arguments.

This module holds the command and prints the report (tables or JSON).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from resurgo.cli.exits import ExitCode
from resurgo.cli.output import console as default_console
from resurgo.cli.output import err as default_err
from resurgo.cli.output import show
from resurgo.sources.check import run_check
from resurgo.sources.check_report import (
    CheckOptions,
    CheckReport,
    UsageError,
    parse_label_overrides,
)

EXIT_OK = ExitCode.OK
EXIT_CONTRACT = ExitCode.FAILURE
EXIT_USAGE = ExitCode.USAGE


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
    show(labels, console)
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
    show(patterns, console)

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
        show(metrics, console)
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
    console, err = default_console, default_err
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
