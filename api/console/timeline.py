"""One job's story for the console, from its audit events alone (so it reads the same when
Temporal is down): time-ordered rows, each with what a person needs to judge it.

Nothing here escapes or formats HTML: the templates do (Jinja2 autoescape), so log text such
as `<script>` or `[markup]` is shown literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from resurgo.audit.store import StoredAuditEvent
from resurgo.contracts import Advice, AuditEventType
from resurgo.policy.decide import describe_advice
from resurgo.slurm.parsers import compress_hostlist

# Label and tone (a CSS class) of every event type the timeline shows.
KINDS: dict[str, tuple[str, str]] = {
    AuditEventType.MONITORING_STARTED: ("monitoring started", "info"),
    AuditEventType.DIRECTIVE_INVALID: ("directive invalid", "bad"),
    AuditEventType.MODE_CHANGED: ("mode changed", "info"),
    AuditEventType.CONTROLLER_UNREACHABLE: ("controller unreachable", "warn"),
    AuditEventType.ATTEMPT_STARTED: ("attempt started", "good"),
    AuditEventType.PROGRESS: ("progress", "quiet"),
    AuditEventType.PROGRESS_RECOVERED: ("progress recovered", "good"),
    AuditEventType.ANOMALY: ("anomaly", "bad"),
    AuditEventType.ATTRIBUTION: ("attribution", "warn"),
    AuditEventType.ADVICE: ("advice", "info"),
    AuditEventType.WOULD_ACT: ("would act (observe only)", "info"),
    AuditEventType.APPROVAL_REQUESTED: ("approval requested", "warn"),
    AuditEventType.APPROVAL_APPROVED: ("approved", "good"),
    AuditEventType.APPROVAL_REJECTED: ("rejected", "bad"),
    AuditEventType.APPROVAL_EXPIRED: ("approval expired", "warn"),
    AuditEventType.ACTION: ("scheduler action", "act"),
    AuditEventType.RECONCILIATION: ("reconciliation", "info"),
    AuditEventType.ATTEMPT_ENDED: ("attempt ended", "bad"),
    AuditEventType.REQUEUED_EXTERNALLY: ("requeued outside Resurgo", "info"),
    AuditEventType.COMPLETED: ("completed", "good"),
    AuditEventType.JOB_GONE: ("job gone", "warn"),
    AuditEventType.MONITORING_ENDED: ("monitoring ended", "info"),
}


@dataclass
class Evidence:
    source: str
    host: str
    line_no: int
    text: str


@dataclass
class TimelineRow:
    id: int
    at: datetime
    type: str
    label: str
    tone: str
    attempt: int | None
    summary: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reasoning: str | None = None


def host_of(source: str) -> str:
    """The host a log source names (`node2:/var/log/x`, `loki:node2`), else empty."""
    head, sep, _ = source.partition(":")
    if sep and head and "/" not in head and head not in ("loki", "file", "victorialogs"):
        return head
    tail = source.rpartition(":")[2]
    return tail if sep and tail and "/" not in tail else ""


def _evidence(lines: Any) -> list[Evidence]:
    found: list[Evidence] = []
    for line in lines if isinstance(lines, list) else []:
        if not isinstance(line, dict):
            continue
        source = str(line.get("source", ""))
        no = line.get("line_no")
        found.append(
            Evidence(
                source, host_of(source), no if isinstance(no, int) else 0, str(line.get("text", ""))
            )
        )
    return found


def _hosts(value: Any) -> str:
    names = [str(v) for v in value] if isinstance(value, list) else []
    return compress_hostlist(names) if names else ""


def _facts(e: StoredAuditEvent) -> tuple[list[tuple[str, str]], list[Evidence], str | None]:
    d = e.data
    facts: list[tuple[str, str]] = []
    evidence: list[Evidence] = []
    reasoning: str | None = None
    if e.type == AuditEventType.ATTEMPT_STARTED:
        facts += [("nodes", _hosts(d.get("nodes"))), ("excluded", _hosts(d.get("excluded")))]
    elif e.type == AuditEventType.ANOMALY:
        facts += [
            ("kind", str(d.get("kind", ""))),
            ("Slurm state", str(d.get("job_state", ""))),
            ("exit code", str(d.get("exit_code", ""))),
            ("nodes", _hosts(d.get("nodes"))),
        ]
        evidence = _evidence(d.get("signals"))
    elif e.type == AuditEventType.ATTRIBUTION:
        confidence = d.get("confidence")
        facts += [
            ("category", str(d.get("category", ""))),
            ("culprit nodes", _hosts(d.get("culprit_nodes"))),
            ("culprit ranks", ", ".join(str(r) for r in d.get("culprit_ranks") or [])),
            ("confidence", f"{confidence:.2f}" if isinstance(confidence, float) else ""),
            ("source", str(d.get("source", ""))),
        ]
        evidence = _evidence(d.get("evidence"))
    elif e.type in (AuditEventType.ADVICE, AuditEventType.APPROVAL_REQUESTED):
        raw = d.get("advice", d) if e.type == AuditEventType.APPROVAL_REQUESTED else d
        try:
            advice = Advice.model_validate(raw)
        except ValidationError:
            advice = None
        if advice is not None:
            facts += [
                ("generation", f"g{advice.generation}"),
                ("rule", advice.rule),
                ("drain", compress_hostlist(advice.drain_nodes) if advice.drain_nodes else ""),
            ]
            reasoning = f"{describe_advice(advice)}, because {advice.reason}"
        if e.type == AuditEventType.APPROVAL_REQUESTED:
            timeout = d.get("timeout_seconds")
            if isinstance(timeout, int | float):
                facts.append(("fails open after", f"{timeout:.0f} s without a decision"))
    elif e.type == AuditEventType.ACTION:
        facts += [
            ("step", str(d.get("step", ""))),
            ("outcome", str(d.get("outcome", ""))),
            ("detail", str(d.get("detail", ""))),
        ]
    elif e.type == AuditEventType.RECONCILIATION:
        facts += [("status", str(d.get("status", ""))), ("reason", str(d.get("reason", "")))]
    elif e.type == AuditEventType.PROGRESS_RECOVERED:
        facts += [
            ("iteration", str(d.get("iteration", ""))),
            ("resumed from", str(d.get("resumed_from") or "")),
        ]
    elif e.type in (AuditEventType.APPROVAL_APPROVED, AuditEventType.APPROVAL_REJECTED):
        facts += [("by", str(d.get("actor", ""))), ("reason", str(d.get("reason", "")))]
    elif e.type == AuditEventType.MONITORING_ENDED:
        facts += [
            ("outcome", str(d.get("outcome", ""))),
            ("excluded nodes", _hosts(d.get("excluded_nodes"))),
        ]
    return [(k, v) for k, v in facts if v], evidence, reasoning


def timeline_rows(
    events: Sequence[StoredAuditEvent], *, with_progress: bool = False
) -> list[TimelineRow]:
    """Rows in time order (ties: the order they were stored); plain progress ticks are left out
    unless asked for (a long run writes thousands)."""
    rows: list[TimelineRow] = []
    for e in sorted(events, key=lambda ev: (ev.at, ev.id)):
        if e.type == AuditEventType.PROGRESS and not with_progress:
            continue
        label, tone = KINDS.get(e.type, (str(e.type), "info"))
        facts, evidence, reasoning = _facts(e)
        rows.append(
            TimelineRow(
                e.id,
                e.at,
                str(e.type),
                label,
                tone,
                e.attempt,
                e.summary,
                facts,
                evidence,
                reasoning,
            )
        )
    return rows


__all__ = ["KINDS", "Evidence", "TimelineRow", "host_of", "timeline_rows"]
