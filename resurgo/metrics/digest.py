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

Memory stays bounded however long a process runs: a job's own record (open anomalies, awaited
actions) is dropped when its monitoring ends, leaving its folded counts and one summary line;
only the `keep_finished` most recently ended summaries are kept (what a jobs list shows), and
latencies are folded into histogram buckets with the `RECENT_LATENCIES` latest kept for
percentiles. What still grows: per-node sets of the jobs that implicated, excluded or drained a
node (they grow with failures, not with jobs watched), and one counter per day.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date, datetime

from resurgo.contracts import AuditEvent, AuditEventType, Category

T = AuditEventType

# Recovery latencies run from seconds (a hold and requeue) to hours (a job waiting in queue).
LATENCY_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 4 * 3600.0)
RECENT_LATENCIES = 10_000  # the overview's p50/p95 are over the latest this many
KEEP_FINISHED = 2_000  # ended jobs' summaries kept (the console lists at most 1,000 at once)
KEEP_STOPS = 500  # the overview shows the latest 50


class LatencyFold:
    """Latencies folded as they come: all-time histogram buckets (never shrinking, as a
    Prometheus histogram must) and the most recent values for percentiles. `len` is the all-time
    count; iterating gives the recent values."""

    def __init__(self, recent: int = RECENT_LATENCIES) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket, the last one +Inf
        self.count = 0
        self.total = 0.0
        self.recent: deque[float] = deque(maxlen=recent)

    def add(self, seconds: float) -> None:
        i = next((i for i, b in enumerate(LATENCY_BUCKETS) if seconds <= b), len(LATENCY_BUCKETS))
        self.counts[i] += 1
        self.count += 1
        self.total += seconds
        self.recent.append(seconds)

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, observations at or below it) as Prometheus' text format writes them."""
        out, running = [], 0
        for bound, n in zip([*map(repr, LATENCY_BUCKETS), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[float]:
        return iter(self.recent)


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
    started: bool = False
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
    stops: deque[tuple[datetime, str, str]] = field(  # at, job, why: the latest
        default_factory=lambda: deque(maxlen=KEEP_STOPS)
    )
    detection_to_action: LatencyFold = field(default_factory=LatencyFold)
    failure_to_running: LatencyFold = field(default_factory=LatencyFold)
    nodes: dict[str, NodeRecord] = field(default_factory=lambda: defaultdict(NodeRecord))
    pending: set[tuple[str, int]] = field(default_factory=set)
    keep_finished: int = KEEP_FINISHED
    _jobs: dict[str, _Job] = field(default_factory=dict)  # monitoring not ended
    _finished: OrderedDict[str, JobDigest] = field(default_factory=OrderedDict)  # oldest first
    _ended_holds: set[str] = field(default_factory=set)  # ended jobs with a hold not released

    # ---- derived ----------------------------------------------------------------------------
    @property
    def jobs_watched(self) -> int:
        """Monitoring started and not ended (a late event of a job ended long ago is not one)."""
        return sum(1 for j in self._jobs.values() if j.started and not j.ended)

    @property
    def holds_outstanding(self) -> int:
        return sum(1 for j in self._jobs.values() if j.hold_open) + len(self._ended_holds)

    @property
    def jobs_kept(self) -> int:
        """Per-job records in memory (watched jobs and the kept summaries of ended ones)."""
        return len(self._jobs) + len(self._finished)

    # ---- folding ----------------------------------------------------------------------------
    def feed(self, events: Iterable[AuditEvent]) -> None:
        """Fold events in id order; a stored event's id becomes `last_id` (where to read on)."""
        for e in events:
            self.add(e)
            self.last_id = max(self.last_id, getattr(e, "id", 0))

    def add(self, e: AuditEvent) -> None:
        self.events += 1
        key = e.workflow_id
        job = self._job(e)
        d = e.data
        _summarise(job.summary, e)
        if e.type == T.MONITORING_STARTED:
            self.jobs_started += 1
            job.started = True
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
                self.failure_to_running.add(_seconds(started_after[1], e.at))
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
        if job.ended:
            self._retire(key, job)

    def _job(self, e: AuditEvent) -> _Job:
        """The job's record; an ended job's is made again from its kept summary, only for the
        time of one (late) event: `_retire` drops it again."""
        key = e.workflow_id
        job = self._jobs.get(key)
        if job is not None:
            return job
        label = f"{e.cluster}/{e.job_id}"
        ended = self._finished.pop(key, None)
        late = ended is not None or key in self._ended_holds
        if late and e.type != T.MONITORING_STARTED:
            summary = ended or JobDigest(e.cluster, e.job_id, key, e.at, e.at)
            return _Job(label, summary, hold_open=key in self._ended_holds, ended=True)
        summary = ended or JobDigest(e.cluster, e.job_id, key, e.at, e.at)
        self._ended_holds.discard(key)
        job = self._jobs[key] = _Job(label=label, summary=summary)
        return job

    def _retire(self, key: str, job: _Job) -> None:
        """Monitoring ended: keep the summary line (the newest `keep_finished`) and whether a
        hold is still open; drop the rest."""
        self._jobs.pop(key, None)
        self._finished[key] = job.summary
        self._finished.move_to_end(key)
        while len(self._finished) > self.keep_finished:
            self._finished.popitem(last=False)
        if job.hold_open:
            self._ended_holds.add(key)
        else:
            self._ended_holds.discard(key)

    def _action(self, job: _Job, e: AuditEvent) -> None:
        step, outcome = str(e.data.get("step") or ""), e.data.get("outcome")
        if not step or outcome not in ("applied", "already_satisfied"):
            return
        self.actions[step] += 1
        self.actions_by_day[e.at.date()] += 1
        for detected in job.awaiting_action:
            self.detection_to_action.add(_seconds(detected, e.at))
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

    def summary_of(self, workflow_id: str) -> JobDigest | None:
        """The job's summary line while the digest keeps it (a copy)."""
        job = self._jobs.get(workflow_id)
        found = job.summary if job is not None else self._finished.get(workflow_id)
        return replace(found, culprits=list(found.culprits)) if found else None

    def job_summaries(self, limit: int) -> list[JobDigest]:
        """The `limit` most recently active jobs (watched, and the kept ended ones), newest
        first (copies: safe to keep)."""
        summaries = [*(j.summary for j in self._jobs.values()), *self._finished.values()]
        ordered = sorted(summaries, key=lambda s: s.last_at, reverse=True)
        return [replace(s, culprits=list(s.culprits)) for s in ordered[:limit]]


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


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None without values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[rank]


def _names(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


__all__ = [
    "KEEP_FINISHED",
    "LATENCY_BUCKETS",
    "AuditDigest",
    "JobDigest",
    "LatencyFold",
    "NodeRecord",
    "percentile",
]
