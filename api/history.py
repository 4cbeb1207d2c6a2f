"""A job's story folded from its audit events (pure functions, no I/O).

The workflow records every step as an audit event (see `workflows/job_recovery.py`); for a
finished job these events are all there is, and for a live one they add what the `status` query
does not carry (attempts, anomalies, attributions, reconciliation).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from resurgo.api.job_refs import parse_workflow_id
from resurgo.api.models import AdviceView, AttemptView, JobRef, ReconciliationView
from resurgo.audit.store import StoredAuditEvent
from resurgo.contracts import (
    Advice,
    AdviceKind,
    Anomaly,
    ApprovalDecision,
    Attribution,
    AuditEventType,
    Directive,
)

__all__ = ["Folded", "fold_events", "job_ref", "submit_time_of"]

_GEN_PREFIX = re.compile(r"^g(\d+)\b")
_GEN_IN_KEY = re.compile(r":g(\d+):")


def submit_time_of(workflow_id: str) -> datetime | None:
    """`resurgo:<cluster>:<job id>:<submit epoch>` -> the submit time (None if not that shape)."""
    parts = workflow_id.rsplit(":", 2)
    if len(parts) != 3 or not parts[0].startswith("resurgo:"):
        return None
    try:
        return datetime.fromtimestamp(int(parts[2]), tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def job_ref(cluster: str, job_id: int, workflow_id: str) -> JobRef:
    named = parse_workflow_id(workflow_id)
    task = named[1] if named is not None and named[1].task_id is not None else None
    return JobRef(
        cluster=cluster,
        job_id=job_id,
        name=str(task) if task is not None else str(job_id),
        array_job_id=task.job_id if task is not None else None,
        array_task_id=task.task_id if task is not None else None,
        workflow_id=workflow_id,
        submit_time=submit_time_of(workflow_id),
    )


@dataclass
class Folded:
    mode: str | None = None
    user: str | None = None  # the job's Slurm user, when monitoring_started recorded it
    directive: Directive | None = None
    attempts: dict[int, AttemptView] = field(default_factory=dict)
    anomalies: list[Anomaly] = field(default_factory=list)
    attributions: list[Attribution] = field(default_factory=list)
    advice: dict[int, AdviceView] = field(default_factory=dict)
    reconciliation: list[ReconciliationView] = field(default_factory=list)
    last_category: str | None = None
    excluded_nodes: list[str] = field(default_factory=list)
    outcome: str | None = None
    pending_generation: int | None = None
    requested_at: dict[int, datetime] = field(default_factory=dict)
    first_at: datetime | None = None
    last_at: datetime | None = None
    last_type: AuditEventType | None = None
    warnings: list[str] = field(default_factory=list)

    def approval_deadline(self, generation: int) -> datetime | None:
        asked = self.requested_at.get(generation)
        if asked is None:
            return None
        timeout = (
            self.directive.approval_timeout if self.directive else Directive().approval_timeout
        )
        return asked + timedelta(seconds=timeout)

    def attempt(self, n: int) -> AttemptView:
        if n not in self.attempts:
            self.attempts[n] = AttemptView(attempt=n)
        return self.attempts[n]


def _generation(event: StoredAuditEvent) -> int | None:
    value = event.data.get("generation")
    if isinstance(value, int):
        return value
    key = event.data.get("idempotency_key")
    if isinstance(key, str) and (m := _GEN_IN_KEY.search(key)):
        return int(m.group(1))
    m = _GEN_PREFIX.match(event.summary)
    return int(m.group(1)) if m else None


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def fold_events(events: Sequence[StoredAuditEvent]) -> Folded:
    """Fold one job's events (any order; they are sorted by id) into its story."""
    f = Folded()
    for e in sorted(events, key=lambda ev: ev.id):
        try:
            _fold_one(f, e)
        except (ValidationError, ValueError, TypeError) as exc:
            f.warnings.append(f"audit event {e.id} ({e.type}) could not be read: {exc}")
        f.first_at = e.at if f.first_at is None else min(f.first_at, e.at)
        if f.last_at is None or e.at >= f.last_at:
            f.last_at, f.last_type = e.at, e.type
    f.outcome = _outcome(f)
    return f


def _fold_one(f: Folded, e: StoredAuditEvent) -> None:
    d = e.data
    t = e.type
    if t == AuditEventType.MONITORING_STARTED:
        user = d.get("user")
        f.user = user if isinstance(user, str) and user else None
        raw = d.get("directive")
        if isinstance(raw, dict):
            f.directive = Directive.model_validate(raw)
            f.mode = f.directive.mode.value
    elif t == AuditEventType.DIRECTIVE_INVALID:
        f.mode = "invalid"
    elif t == AuditEventType.MODE_CHANGED:
        f.mode = str(d.get("mode", f.mode))
    elif t == AuditEventType.ATTEMPT_STARTED and e.attempt is not None:
        a = f.attempt(e.attempt)
        a.started_at = e.at
        a.nodes = _strings(d.get("nodes"))
        a.excluded_nodes = _strings(d.get("excluded"))
    elif (
        t in (AuditEventType.PROGRESS, AuditEventType.PROGRESS_RECOVERED) and e.attempt is not None
    ):
        a = f.attempt(e.attempt)
        if isinstance(d.get("iteration"), int) and a.first_iteration is None:
            a.first_iteration = d["iteration"]
        if isinstance(d.get("resumed_from"), int):
            a.resumed_from = d["resumed_from"]
    elif t == AuditEventType.ANOMALY:
        anomaly = Anomaly.model_validate(d)
        f.anomalies.append(anomaly)
        f.attempt(anomaly.attempt).anomalies.append(anomaly)
    elif t == AuditEventType.ATTRIBUTION:
        attribution = Attribution.model_validate(d)
        f.attributions.append(attribution)
        f.last_category = attribution.category.value
        if e.attempt is not None:
            f.attempt(e.attempt).attributions.append(attribution)
    elif t == AuditEventType.ADVICE:
        advice = Advice.model_validate(d)
        f.advice[advice.generation] = AdviceView(advice=advice, state="recorded", at=e.at)
        f.attempt(advice.attempt).advice_generations.append(advice.generation)
    else:
        _fold_decisions(f, e)


def _fold_decisions(f: Folded, e: StoredAuditEvent) -> None:
    t = e.type
    gen = _generation(e)
    view = f.advice.get(gen) if gen is not None else None
    if t == AuditEventType.WOULD_ACT and view is not None:
        view.state = "would_act"
    elif t == AuditEventType.APPROVAL_REQUESTED and gen is not None:
        f.requested_at[gen] = e.at
        f.pending_generation = gen
        if view is not None:
            view.state = "pending_approval"
    elif t == AuditEventType.APPROVAL_EXPIRED:
        if f.pending_generation == gen:
            f.pending_generation = None
        if view is not None:
            view.state = "expired"
    elif t in (AuditEventType.APPROVAL_APPROVED, AuditEventType.APPROVAL_REJECTED):
        decision = ApprovalDecision.model_validate(e.data)
        if f.pending_generation == decision.generation:
            f.pending_generation = None
        view = f.advice.get(decision.generation)
        if view is not None:
            view.decision = decision
            view.decided_at = e.at
            view.state = "approved" if decision.approve else "rejected"
    elif t == AuditEventType.ACTION and view is not None:
        view.state = "acted"
    elif t == AuditEventType.RECONCILIATION:
        rec = ReconciliationView(
            generation=gen,
            attempt=e.attempt,
            status=str(e.data.get("status", "")),
            reason=str(e.data.get("reason", "")),
            at=e.at,
        )
        f.reconciliation.append(rec)
        if view is not None:
            view.reconciliation = rec
        observation = e.data.get("observation")
        if isinstance(observation, dict) and "exc_node_list" in observation:
            f.excluded_nodes = _strings(observation["exc_node_list"])


_FINAL_TYPES = {AuditEventType.COMPLETED: "completed", AuditEventType.JOB_GONE: "job_gone"}


def _outcome(f: Folded) -> str | None:
    """Best guess of how monitoring ended, from the events alone."""
    if f.mode == "invalid":
        return "directive_invalid"
    if f.last_type in _FINAL_TYPES:
        return _FINAL_TYPES[f.last_type]
    if not f.advice:
        return None
    last = f.advice[max(f.advice)]
    if last.advice.kind == AdviceKind.STOP and last.state == "acted":
        return "stopped"
    if last.state in ("rejected", "expired"):
        return "not_approved"
    if last.state == "would_act":
        return "stopped_observed" if last.advice.kind == AdviceKind.STOP else "observed"
    return None
