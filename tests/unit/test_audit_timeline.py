"""Rendering of audit timelines (rich table and JSON)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from rich.console import Console

from resurgo.audit.store import StoredAuditEvent
from resurgo.cli.timeline import format_time, render_timeline, timeline_json

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def stored(row_id: int, seconds: float, type_: str, summary: str, **kw: Any) -> StoredAuditEvent:
    fields: dict[str, Any] = {
        "id": row_id,
        "event_id": f"e{row_id}",
        "cluster": "c1",
        "job_id": 42,
        "workflow_id": "resurgo:c1:42:1740830400",
        "attempt": 0,
        "type": type_,
        "producer": "workflow",
        "at": T0 + timedelta(seconds=seconds),
        "summary": summary,
        "data": {},
    }
    fields.update(kw)
    return StoredAuditEvent(**fields)


EVENTS = [
    stored(1, 0, "monitoring_started", "job opted in (mode=observe)", producer="discovery"),
    stored(2, 61.5, "anomaly", "crash: NCCL watchdog timeout on rank 3"),
    # Written late (a retried write) but earlier in time than the advice below.
    stored(5, 62, "attribution", "hardware_gpu on gpu-07 (Xid 79)", producer="attribute"),
    stored(3, 63, "advice", "requeue_excluding gpu-07 [rule hw_culprit]"),
    stored(4, 3600, "attempt_started", "attempt 1 running", attempt=1, producer="controller"),
]


def render(events: list[StoredAuditEvent]) -> str:
    console = Console(record=True, width=160, color_system=None)
    render_timeline(events, console=console)
    return console.export_text()


def test_rows_appear_in_time_order_with_all_columns() -> None:
    out = render(EVENTS)
    lines = out.splitlines()
    assert "audit timeline: c1/42 (resurgo:c1:42:1740830400)" in out
    header = next(line for line in lines if "time (UTC)" in line)
    for column in ("attempt", "type", "producer", "summary"):
        assert column in header

    order = [
        "job opted in (mode=observe)",
        "crash: NCCL watchdog timeout on rank 3",
        "hardware_gpu on gpu-07 (Xid 79)",
        "requeue_excluding gpu-07 [rule hw_culprit]",
        "attempt 1 running",
    ]
    positions = [out.index(text) for text in order]
    assert positions == sorted(positions)

    row = next(line for line in lines if "NCCL watchdog" in line)
    assert "2025-03-01 12:01:01.623" in row
    assert "anomaly" in row and "workflow" in row
    row = next(line for line in lines if "attempt 1 running" in line)
    assert "2025-03-01 13:00:00.123" in row
    assert "attempt_started" in row and "controller" in row and " 1 " in row


def test_summary_is_literal_not_markup() -> None:
    events = [
        stored(1, 0, "anomaly", "[bold]not bold[/bold] and a stray [/] tag", attempt=None),
    ]
    out = render(events)
    assert "[bold]not bold[/bold] and a stray [/] tag" in out
    row = next(line for line in out.splitlines() if "stray" in line)
    assert " - " in row  # attempt unknown


def test_long_summary_wraps_without_losing_text() -> None:
    summary = "evidence: " + " ".join(f"line{i}" for i in range(60))
    out = render([stored(1, 0, "attribution", summary)])
    flattened = "".join(part.strip("│ ") for part in out.splitlines())
    assert "line59" in out
    assert "line0" in out
    assert len(out.splitlines()) > 5
    assert "evidence:" in flattened


def test_several_jobs_and_empty() -> None:
    other = stored(9, 1, "anomaly", "other job", job_id=43, workflow_id="resurgo:c1:43:1")
    assert "audit timeline: 2 jobs" in render([EVENTS[0], other])
    assert "no audit events" in render([])


def test_format_time_is_utc_with_milliseconds() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert format_time(datetime(2025, 3, 1, 14, 0, 0, 999999, tzinfo=plus2)) == (
        "2025-03-01 12:00:00.999"
    )
    assert format_time(datetime(2025, 3, 1, 12, 0, 0)) == "2025-03-01 12:00:00.000"


def test_timeline_json() -> None:
    doc = json.loads(timeline_json(EVENTS))
    assert [e["id"] for e in doc] == [1, 2, 5, 3, 4]
    first = doc[0]
    assert first["event_id"] == "e1"
    assert first["summary"] == "job opted in (mode=observe)"
    assert datetime.fromisoformat(first["at"].replace("Z", "+00:00")) == T0
    assert set(first) == {
        "id",
        "event_id",
        "cluster",
        "job_id",
        "workflow_id",
        "attempt",
        "type",
        "producer",
        "at",
        "summary",
        "data",
    }
    unicode_doc = json.loads(
        timeline_json([stored(1, 0, "anomaly", "ünï 🔥", data={"k": [1, "é"]})])
    )
    assert unicode_doc[0]["summary"] == "ünï 🔥"
    assert unicode_doc[0]["data"] == {"k": [1, "é"]}
    assert "🔥" in timeline_json([stored(1, 0, "anomaly", "🔥")])
    assert json.loads(timeline_json([])) == []
