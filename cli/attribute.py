"""`resurgo attribute BUNDLE_DIR [--json]`: offline attribution of an evidence bundle.

Same rules as the live attribute activity (`resurgo.attribute.rules`), plus what the default
policy would do. `--json` prints exactly one object:

    {"kind", "category", "culprit_nodes", "action", "confidence", "fingerprint", "evidence",
     ...extra detail fields}

Exit codes (`resurgo.cli.exits`): 0 attributed, 2 the bundle cannot be used (missing/empty
job.log, unreadable), 3 there is no such bundle directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.text import Text

from resurgo.attribute.offline import BundleError, Report, analyse_bundle
from resurgo.cli.exits import ExitCode
from resurgo.cli.output import console as default_console
from resurgo.cli.output import err as default_err
from resurgo.cli.output import show

EXIT_OK = ExitCode.OK
EXIT_BAD_BUNDLE = ExitCode.USAGE


def attribute_command(
    bundle: Path,
    *,
    as_json: bool,
    plugin_url: str | None = None,
    console: Console | None = None,
    err: Console | None = None,
) -> int:
    out = console or default_console
    errors = err or default_err
    if not bundle.exists():
        errors.print(Text(f"error: no bundle at {bundle}", style="red"))
        return ExitCode.NOT_FOUND
    try:
        report = analyse_bundle(bundle)
    except BundleError as exc:
        errors.print(Text(f"cannot attribute: {exc}", style="red"))
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
        why = enriched.summary.rsplit("[", 1)[-1].rstrip("]")
        errors.print(Text(f"plugin: {why}", style="yellow"))
    return Report(report.bundle, enriched, default_advice(enriched))


def render(report: Report, console: Console) -> None:
    from rich.table import Table  # the human view only (`--json` needs no tables)

    a = report.attribution
    kind = a.kind if isinstance(a.kind, str) else a.kind.value
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("bundle", Text(str(report.bundle.path)))
    table.add_row("kind", kind)
    table.add_row("category", a.category.value)
    table.add_row("culprit nodes", Text(", ".join(a.culprit_nodes) or "-"))
    if a.culprit_ranks:
        table.add_row("culprit ranks", ", ".join(map(str, a.culprit_ranks)))
    if a.culprit_gpus:
        table.add_row("culprit GPUs", ", ".join(a.culprit_gpus))
    table.add_row("confidence", f"{a.confidence:.2f}")
    table.add_row("fingerprint", Text(a.fingerprint))
    table.add_row("summary", Text(a.summary))
    if a.scheduler_outcome:
        table.add_row("scheduler outcome", Text(a.scheduler_outcome))
    if a.checkpoint_failure:
        table.add_row("checkpoint", "saving a checkpoint failed")
    table.add_row("action", Text(report.action, style="bold"))
    table.add_row("policy", Text(f"{report.advice.rule}: {report.advice.reason}"))
    show(table, console)
    if a.evidence:
        ev = Table("source", "line", "text", title="evidence", title_justify="left")
        for line in a.evidence:
            ev.add_row(Text(line.source), str(line.line_no), Text(line.text))
        show(ev, console)
