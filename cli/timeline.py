"""Human-readable (rich) and machine-readable (JSON) views of a job's audit events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from resurgo.audit.store import StoredAuditEvent
from resurgo.cli.output import console as default_console
from resurgo.cli.output import show

__all__ = ["format_time", "render_timeline", "timeline_json"]


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def format_time(at: datetime) -> str:
    """`YYYY-MM-DD HH:MM:SS.mmm` in UTC (naive datetimes are taken as UTC)."""
    utc = _utc(at)
    return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"


def _chronological(events: Sequence[StoredAuditEvent]) -> list[StoredAuditEvent]:
    """By time, then id: an event written late (a retried write) still shows where it happened."""
    return sorted(events, key=lambda e: (_utc(e.at), e.id))


def _title(events: Sequence[StoredAuditEvent]) -> str:
    jobs = {(e.cluster, e.job_id, e.workflow_id) for e in events}
    if len(jobs) == 1:
        cluster, job_id, workflow_id = next(iter(jobs))
        return f"audit timeline: {cluster}/{job_id} ({workflow_id})"
    return f"audit timeline: {len(jobs)} jobs"


def render_timeline(events: Sequence[StoredAuditEvent], console: Console | None = None) -> None:
    """Print the events as a table, oldest first: time (UTC, ms), attempt, type, producer, summary.

    Text from the events is printed literally (never interpreted as rich markup); piped, the
    table is tab-separated values (nothing wrapped or cut).
    """
    console = console if console is not None else default_console
    if not events:
        console.print(Text("no audit events"))
        return
    table = Table(title=_title(events), title_justify="left", expand=False)
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("producer", no_wrap=True)
    table.add_column("summary", overflow="fold")
    for e in _chronological(events):
        table.add_row(
            Text(format_time(e.at)),
            Text("-" if e.attempt is None else str(e.attempt)),
            Text(e.type),
            Text(e.producer),
            Text(e.summary),
        )
    show(table, console)


def timeline_json(events: Sequence[StoredAuditEvent]) -> str:
    """The events as a JSON array, oldest first (same order as `render_timeline`)."""
    return json.dumps(
        [e.model_dump(mode="json") for e in _chronological(events)],
        ensure_ascii=False,
        indent=2,
    )
