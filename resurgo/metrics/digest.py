"""What the audit trail adds up to: counts, latencies, holds, approvals and nodes, folded from
audit events one at a time (in id order), so a reader keeps its place and only reads what is
new. Pure: no I/O; the console's overview and nodes pages and the Prometheus exporter share it.

Definitions (the same on the page and in `/metrics`):
- detection → action: from an anomaly's detection to the first scheduler action on that job
  after it;
- failure → next attempt running: from an anomaly's detection to the next attempt of that job
  seen running;
- a hold is outstanding from an applied `requeue_hold` until that job's `release` or `cancel`;
- an approval is pending from `approval_requested` until approved, rejected, expired or the
  end of monitoring.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import date, datetime

from resurgo.contracts import AuditEvent, AuditEventType, Category

T = AuditEventType


@dataclass
class NodeRecord:
    implicated: int = 0
    implicated_jobs: set[str] = field(default_factory=set)
    excluded_jobs: set[str] = field(default_factory=set)
    drained_jobs: set[str] = field(default_factory=set)
    last_at: datetime | None = None


@dataclass
class JobDigest:
    """One monitored job as its audit events tell it (what a jobs list shows)."""

    cluster: str
    job_id: int
    workflow_id: str
    first_at: datetime
    last_at: datetime
    last_type: str = ""
    user: str = ""
    mode: str = ""
    attempt: int = 0
    category: str = ""
    culprits: list[str] = field(default_factory=list)
    outcome: str = ""


@dataclass
class _Job:
    label: str
    summary: JobDigest
    open_anomalies: list[tuple[int | None, datetime]] = field(default_factory=list)
    awaiting_action: list[datetime] = field(default_factory=list)
    drain_nodes: list[str] = field(default_factory=list)
    hold_open: bool = False
    ended: bool = False


@dataclass
class AuditDigest:
    last_id: int = 0
    events: int = 0
    jobs_started: int = 0
    jobs_ended: int = 0
    anomalies: Counter[str] = field(default_factory=Counter)  # by attributed category
    actions: Counter[str] = field(default_factory=Counter)  # by scheduler step
    failures_by_day: dict[date, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    actions_by_day: Counter[date] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # monitoring ended, by outcome
    stops: list[tuple[datetime, str, str]] = field(default_factory=list)  # at, job, why
    detection_to_action: list[float] = field(default_factory=list)
    failure_to_running: list[float] = field(default_factory=list)
    nodes: dict[str, NodeRecord] = field(default_factory=lambda: defaultdict(NodeRecord))
    pending: set[tuple[str, int]] = field(default_factory=set)
    _jobs: dict[str, _Job] = field(default_factory=dict)

    # ---- derived ----------------------------------------------------------------------------
    @property
    def jobs_watched(self) -> int:
        return sum(1 for j in self._jobs.values() if not j.ended)

    @property
    def holds_outstanding(self) -> int:
        return sum(1 for j in self._jobs.values() if j.hold_open)

    # ---- folding ----------------------------------------------------------------------------
    def feed(self, events: Iterable[AuditEvent]) -> None:
        """Fold events in id order; a stored event's id becomes `last_id` (where to read on)."""
        for e in events:
            self.add(e)
            self.last_id = max(self.last_id, getattr(e, "id", 0))

    def add(self, e: AuditEvent) -> None:
        self.events += 1
        key = e.workflow_id
        job = self._jobs.get(key)
        if job is None:
            summary = JobDigest(e.cluster, e.job_id, key, e.at, e.at)
            job = self._jobs[key] = _Job(label=f"{e.cluster}/{e.job_id}", summary=summary)
        d = e.data
        _summarise(job.summary, e)
        if e.type == T.MONITORING_STARTED:
            self.jobs_started += 1
        elif e.type == T.ANOMALY:
            job.open_anomalies.append((e.attempt, e.at))
            job.awaiting_action.append(e.at)
        elif e.type == T.ATTRIBUTION:
            category = str(d.get("category") or Category.UNKNOWN.value)
            self.anomalies[category] += 1
            self.failures_by_day[e.at.date()][category] += 1
            for node in _names(d.get("culprit_nodes")):
                rec = self.nodes[node]
                rec.implicated += 1
                rec.implicated_jobs.add(job.label)
                rec.last_at = max(rec.last_at, e.at) if rec.last_at else e.at
        elif e.type == T.ADVICE:
            job.drain_nodes = _names(d.get("drain_nodes"))
            if d.get("kind") == "stop":
                self.stops.append((e.at, job.label, str(d.get("reason") or d.get("rule") or "")))
        elif e.type == T.ACTION:
            self._action(job, e)
        elif e.type == T.ATTEMPT_STARTED:
            for started_after in [a for a in job.open_anomalies if (a[0] or 0) < (e.attempt or 0)]:
                self.failure_to_running.append(_seconds(started_after[1], e.at))
                job.open_anomalies.remove(started_after)
            for node in _names(d.get("excluded")):
                self._excluded(node, job, e.at)
        elif e.type == T.APPROVAL_REQUESTED:
            self._generation(key, d, add=True)
        elif e.type in (T.APPROVAL_APPROVED, T.APPROVAL_REJECTED, T.APPROVAL_EXPIRED):
            self._generation(key, d, add=False)
        elif e.type == T.MONITORING_ENDED:
            job.ended = True
            self.jobs_ended += 1
            outcome = str(d.get("outcome") or "unknown")
            self.outcomes[outcome] += 1
            self.pending = {p for p in self.pending if p[0] != key}
            for node in _names(d.get("excluded_nodes")):
                self._excluded(node, job, e.at)

    def _action(self, job: _Job, e: AuditEvent) -> None:
        step, outcome = str(e.data.get("step") or ""), e.data.get("outcome")
        if not step or outcome not in ("applied", "already_satisfied"):
            return
        self.actions[step] += 1
        self.actions_by_day[e.at.date()] += 1
        for detected in job.awaiting_action:
            self.detection_to_action.append(_seconds(detected, e.at))
        job.awaiting_action.clear()
        if step == "requeue_hold":
            job.hold_open = True
        elif step in ("release", "cancel"):
            job.hold_open = False
        elif step == "drain_node":
            for node in job.drain_nodes:
                self.nodes[node].drained_jobs.add(job.label)
                self.nodes[node].last_at = e.at

    def _excluded(self, node: str, job: _Job, at: datetime) -> None:
        rec = self.nodes[node]
        rec.excluded_jobs.add(job.label)
        rec.last_at = max(rec.last_at, at) if rec.last_at else at

    def _generation(self, key: str, data: dict[str, object], *, add: bool) -> None:
        gen = data.get("generation")
        if not isinstance(gen, int):
            return
        if add:
            self.pending.add((key, gen))
        else:
            self.pending.discard((key, gen))

    def job_summaries(self, limit: int) -> list[JobDigest]:
        """The `limit` most recently active jobs, newest first (copies: safe to keep)."""
        ordered = sorted(self._jobs.values(), key=lambda j: j.summary.last_at, reverse=True)
        return [replace(j.summary, culprits=list(j.summary.culprits)) for j in ordered[:limit]]


def _summarise(job: JobDigest, e: AuditEvent) -> None:
    d = e.data
    job.first_at, job.last_at = min(job.first_at, e.at), max(job.last_at, e.at)
    job.last_type = str(e.type)
    if e.attempt is not None:
        job.attempt = max(job.attempt, e.attempt)
    if e.type == T.MONITORING_STARTED:
        directive = d.get("directive")
        job.user = str(d.get("user") or "")
        job.mode = str(directive.get("mode", "")) if isinstance(directive, dict) else ""
    elif e.type == T.MODE_CHANGED:
        job.mode = str(d.get("mode") or job.mode)
    elif e.type == T.ATTRIBUTION:
        job.category = str(d.get("category") or "")
        job.culprits = _names(d.get("culprit_nodes"))
    elif e.type == T.MONITORING_ENDED:
        job.outcome = str(d.get("outcome") or "ended")


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[rank]


def _names(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


__all__ = ["AuditDigest", "JobDigest", "NodeRecord", "percentile"]
