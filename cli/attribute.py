"""`resurgo attribute BUNDLE_DIR [--json]`: offline attribution of an evidence bundle.

Same rules as the live attribute activity (`resurgo.attribute.rules`), plus what the default
policy would do. `--json` prints exactly one object:

    {"kind", "category", "culprit_nodes", "action", "confidence", "fingerprint", "evidence",
     ...extra detail fields}

Exit codes: 0 attributed, 2 the bundle cannot be used (missing/empty job.log, unreadable).
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from resurgo.attribute.offline import BundleError, Report, analyse_bundle

EXIT_OK = 0
EXIT_BAD_BUNDLE = 2


def attribute_command(
    bundle: Path,
    *,
    as_json: bool,
    plugin_url: str | None = None,
    console: Console | None = None,
    err: Console | None = None,
) -> int:
    out = console or Console()
    errors = err or Console(stderr=True)
    try:
        report = analyse_bundle(bundle)
    except BundleError as exc:
        errors.print(f"[red]cannot attribute:[/red] {exc}")
        return EXIT_BAD_BUNDLE
    if plugin_url:
        report = _with_plugin(report, plugin_url, errors)
    if as_json:
        print(json.dumps(report.as_json(), ensure_ascii=False))
        return EXIT_OK
    render(report, out)
    return EXIT_OK


def _with_plugin(report: Report, url: str, errors: Console) -> Report:
    from resurgo.attribute.offline import default_advice
    from resurgo.attribute.plugin import PluginConfig, enrich_sync, request_for

    config = PluginConfig(url=url)
    request = request_for(
        report.attribution,
        job_lines=report.bundle.job,
        scheduler_lines=report.bundle.scheduler,
    )
    enriched = enrich_sync(report.attribution, request, config)
    if enriched.source != "plugin":
        errors.print(f"[yellow]plugin:[/yellow] {enriched.summary.rsplit('[', 1)[-1].rstrip(']')}")
    return Report(report.bundle, enriched, default_advice(enriched))


def render(report: Report, console: Console) -> None:
    a = report.attribution
    kind = a.kind if isinstance(a.kind, str) else a.kind.value
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("bundle", str(report.bundle.path))
    table.add_row("kind", kind)
    table.add_row("category", a.category.value)
    table.add_row("culprit nodes", ", ".join(a.culprit_nodes) or "-")
    if a.culprit_ranks:
        table.add_row("culprit ranks", ", ".join(map(str, a.culprit_ranks)))
    if a.culprit_gpus:
        table.add_row("culprit GPUs", ", ".join(a.culprit_gpus))
    table.add_row("confidence", f"{a.confidence:.2f}")
    table.add_row("fingerprint", a.fingerprint)
    table.add_row("summary", a.summary)
    if a.scheduler_outcome:
        table.add_row("scheduler outcome", a.scheduler_outcome)
    if a.checkpoint_failure:
        table.add_row("checkpoint", "saving a checkpoint failed")
    table.add_row("action", Text(report.action, style="bold"))
    table.add_row("policy", f"{report.advice.rule}: {report.advice.reason}")
    console.print(table)
    if a.evidence:
        ev = Table("source", "line", "text", title="evidence", title_justify="left")
        for line in a.evidence:
            ev.add_row(line.source, str(line.line_no), Text(line.text[:240]))
        console.print(ev)
