"""Pydantic models shared by workflows, activities, the API and the audit store.

These are the wire format of every Temporal payload: renaming a field breaks running workflows,
so add fields with defaults instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from resurgo.kinds import HARDWARE_CATEGORIES as HARDWARE_CATEGORIES
from resurgo.kinds import ActionStep as ActionStep
from resurgo.kinds import AdviceKind as AdviceKind
from resurgo.kinds import AnomalyKind as AnomalyKind
from resurgo.kinds import Category as Category
from resurgo.kinds import Mode as Mode
from resurgo.nodes.policy import NodeHealthPolicy
from resurgo.policy.array_settings import ArrayPolicy
from resurgo.slurm.targets import slurm_ref

CORE_TASK_QUEUE = "resurgo"


def controller_task_queue(cluster: str) -> str:
    """The task queue served by the controller of one Slurm cluster."""
    return f"slurm.{cluster}"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JobKey(Frozen):
    """Identity of a monitored job. Submit time makes a reused Slurm id a different job."""

    cluster: str
    job_id: int
    submit_time: datetime
    # An array task is `<array_job_id>_<array_task_id>` to people; `job_id` stays Slurm's own.
    array_job_id: int | None = None
    array_task_id: int | None = None

    def slurm_ref(self) -> str:
        return slurm_ref(self.job_id, self.array_job_id, self.array_task_id)

    def workflow_id(self) -> str:
        return f"resurgo:{self.cluster}:{self.slurm_ref()}:{int(self.submit_time.timestamp())}"

    def label(self) -> str:
        return f"{self.cluster}/{self.slurm_ref()}"


class StragglerThresholds(Frozen):
    ratio: float = Field(default=1.5, gt=1.0, le=100.0)
    window: int = Field(default=10, ge=2, le=10_000)


class Directive(Frozen):
    """The opt-in JSON carried in the job's `--comment`."""

    mode: Mode = Mode.OBSERVE
    environment: str | None = None
    policy: str | None = None
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    hang_timeout: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    progress_pattern: str | None = None
    straggler: StragglerThresholds | None = None
    approval: Literal["none", "required"] = "none"
    approval_timeout: float = Field(default=900.0, gt=0, le=7 * 24 * 3600)
    drain: bool = False


class PolicyConfig(Frozen):
    """Operator policy. The directive may only tighten it (see policy.effective_policy)."""

    name: str = "default"
    max_attempts: int = Field(default=5, ge=0)
    budget_per_fingerprint: int = Field(default=2, ge=0)
    application_retries: int = Field(default=0, ge=0)
    application_stop_confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    no_progress_attempts: int = Field(default=2, ge=1)
    checkpoint_failure_attempts: int = Field(default=2, ge=1)
    allow_drain: bool = False
    require_approval: bool = False
    # Nodes one job may have excluded in total (the cluster-wide circuit breaker and per-node
    # caps are enforced by the controller, which sees every job).
    max_nodes_excluded_per_job: int = Field(default=2, ge=0)
    arrays: ArrayPolicy = ArrayPolicy()  # job arrays across tasks: resurgo/policy/arrays.py
    nodes: NodeHealthPolicy = NodeHealthPolicy()  # lemon nodes, validated return


class JobObservation(Frozen):
    """One fresh look at a job in slurmctld (`scontrol show job`)."""

    job_id: int
    name: str = ""
    user: str = ""
    partition: str = ""
    state: str
    reason: str = ""
    restarts: int = 0
    requeue: bool = True
    priority: int = 0
    node_list: list[str] = Field(default_factory=list)
    exc_node_list: list[str] = Field(default_factory=list)
    exit_code: int = 0
    exit_signal: int = 0
    comment: str = ""
    admin_comment: str = ""
    std_out: str = ""
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    num_nodes: int = 0
    batch_flag: int = 1
    # A heterogeneous job's leader: each component's nodes, by offset (node_list, exc_node_list
    # and num_nodes are then the whole job's).
    het_nodes: list[list[str]] = Field(default_factory=list)
    # ... and each component's own Slurm job id, by offset (`86` for `85+1`): what lets a user
    # who names a component by it find the hetjob (resurgo/slurm/hetjobs.py).
    het_job_ids: list[int] = Field(default_factory=list)

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and (self.priority == 0 or "Held" in self.reason)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def running(self) -> bool:
        return self.state in {"RUNNING", "COMPLETING"} and not self.terminal


TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


class NodeObservation(Frozen):
    """A node as `scontrol show node` shows it: `state` is the base state and its flags joined
    by `+` (`IDLE+DRAIN`), `reason` ends with Slurm's `[user@time]` when it has one."""

    name: str
    state: str
    reason: str = ""
    partitions: list[str] = Field(default_factory=list)


class LogLine(Frozen):
    source: str
    line_no: int
    text: str


class LogCursor(Frozen):
    """Where the watcher is in the job's output file; offsets are bytes."""

    path: str
    offset: int = 0
    line_no: int = 0
    inode: int | None = None
    # True while skipping the rest of an over-long line whose head was already scanned.
    in_long_line: bool = False


class ProgressMark(Frozen):
    iteration: int
    line_no: int
    at: datetime


class Anomaly(Frozen):
    kind: AnomalyKind
    attempt: int
    detected_at: datetime
    summary: str
    pattern_ids: list[str] = Field(default_factory=list)
    signals: list[LogLine] = Field(default_factory=list)
    job_state: str = ""
    exit_code: int = 0
    exit_signal: int = 0
    nodes: list[str] = Field(default_factory=list)
    # Nodes detection already singles out (the straggler, the rank that went silent first).
    suspects: list[str] = Field(default_factory=list)


class Attribution(Frozen):
    kind: AnomalyKind | Literal["none"]
    category: Category
    culprit_nodes: list[str] = Field(default_factory=list)
    culprit_ranks: list[int] = Field(default_factory=list)
    # GPUs on the culprit nodes when known, as "<node>:<PCI bus id or gpu index>".
    culprit_gpus: list[str] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    fingerprint: str
    summary: str
    evidence: list[LogLine] = Field(default_factory=list)
    # Scheduler-side outcome that shapes the budget (e.g. "preempted", "node_fail", "timeout").
    scheduler_outcome: str | None = None
    checkpoint_failure: bool = False
    source: str = "rules"
    # The job as attribution last saw it (after letting the failure play out).
    observation: JobObservation | None = None


class Advice(Frozen):
    generation: int
    attempt: int
    kind: AdviceKind
    nodes: list[str] = Field(default_factory=list)
    drain_nodes: list[str] = Field(default_factory=list)
    reason: str
    rule: str
    fingerprint: str = ""
    category: Category = Category.UNKNOWN
    counts_against_budget: bool = True


class ActionRequest(Frozen):
    job: JobKey
    step: ActionStep
    idempotency_key: str
    attempt: int
    nodes: list[str] = Field(default_factory=list)
    reason: str = ""
    hold_deadline: datetime | None = None
    # A heterogeneous job: each component's nodes when it failed, so exclusions land on the
    # component that ran the culprit.
    component_nodes: list[list[str]] = Field(default_factory=list)
    # Where the workflow last read the job's output (requeue_hold reads on from here to the end
    # of the held attempt's output).
    cursor: LogCursor | None = None


class ActionResult(Frozen):
    step: ActionStep
    idempotency_key: str
    outcome: Literal["applied", "already_satisfied"]
    observation: JobObservation | None = None
    detail: str = ""
    # requeue_hold: the end of the old attempt's output, read while the job was held and its
    # step gone. The next attempt's output starts after it, however soon it runs.
    output_end: LogCursor | None = None


class Reconciliation(Frozen):
    status: Literal["pending", "converged", "abandoned"]
    reason: str
    observation: JobObservation | None = None


class VerifyRequest(Frozen):
    job: JobKey
    advice: Advice
    timeout_seconds: float = 60.0
    poll_seconds: float = 0.5


class WatchRequest(Frozen):
    job: JobKey
    attempt: int
    cursor: LogCursor | None = None
    attempt_start_line: int = 0
    hang_timeout: float | None = None
    progress_pattern: str | None = None
    max_window_seconds: float = 3600.0
    poll_seconds: float = 0.25
    slurm_poll_seconds: float = 1.0
    # Which milestones the workflow has already recorded for this attempt.
    seen_started: bool = False
    seen_progress: bool = False
    # The attempt's failure was already reported (observe mode, job ended): wait only for a
    # requeue by someone else or the window's end, never report the same end again.
    follow_only: bool = False
    # The attempt's failure was reported while the job still ran: the job's end (and the
    # cascade lines before it) is that same failure, reported as "ended", not as a new anomaly.
    failure_reported: bool = False
    straggler: StragglerThresholds | None = None
    # Where the remote log source (Loki, VictoriaLogs) resumes: an opaque JSON cursor.
    source_cursor: str | None = None


WatchOutcome = Literal[
    "started",
    "progress",
    "anomaly",
    "completed",
    "window_elapsed",
    "job_gone",
    "requeued",
    "ended",
]


class WatchResult(Frozen):
    outcome: WatchOutcome
    cursor: LogCursor | None = None
    observation: JobObservation | None = None
    anomaly: Anomaly | None = None
    progress: ProgressMark | None = None
    resumed_from: int | None = None
    attempt_start_line: int = 0
    last_iteration: int | None = None
    checkpoint_failure: bool = False
    source_cursor: str | None = None
    # What the watch could not look at, and why (a refused output file, an unusable pattern).
    notes: list[str] = Field(default_factory=list)


class AttributeRequest(Frozen):
    job: JobKey
    anomaly: Anomaly
    log_path: str | None = None
    attempt_start_line: int = 0
    node_list: list[str] = Field(default_factory=list)
    settle_seconds: float = 20.0


class AuditEventType(StrEnum):
    """Every kind of audit event. Written by the workflow, read by the API's history, the
    CLI, telemetry, the demo and policy replay: one name each, so a typo cannot silently empty
    a history (the store refuses a type not listed here)."""

    MONITORING_STARTED = "monitoring_started"
    DIRECTIVE_INVALID = "directive_invalid"
    MODE_CHANGED = "mode_changed"
    CONTROLLER_UNREACHABLE = "controller_unreachable"
    ATTEMPT_STARTED = "attempt_started"
    PROGRESS = "progress"
    PROGRESS_RECOVERED = "progress_recovered"
    ANOMALY = "anomaly"
    ATTRIBUTION = "attribution"
    ADVICE = "advice"
    WOULD_ACT = "would_act"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_APPROVED = "approval_approved"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_EXPIRED = "approval_expired"
    ACTION = "action"
    RECONCILIATION = "reconciliation"
    ATTEMPT_ENDED = "attempt_ended"
    REQUEUED_EXTERNALLY = "requeued_externally"
    COMPLETED = "completed"
    JOB_GONE = "job_gone"
    MONITORING_ENDED = "monitoring_ended"
    # What the watch could not read, and why (a refused output file, an unusable pattern).
    EVIDENCE_LIMITED = "evidence_limited"
    # Jobs discovery leaves alone (and why); findings of an array's coordinator.
    JOB_SKIPPED = "job_skipped"
    ARRAY_FINDING = "array_finding"
    NODE_DRAIN_ADVISED = "node_drain_advised"
    NODE_DRAINED = "node_drained"
    NODE_VALIDATION = "node_validation"
    NODE_RESUMED = "node_resumed"


class AuditEvent(Frozen):
    """One append-only audit record; `event_id` is its idempotency key (unique in the store)."""

    event_id: str
    cluster: str
    job_id: int
    workflow_id: str
    attempt: int | None = None
    type: AuditEventType
    producer: str
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    summary: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class ClusterGates(Frozen):
    """Cluster-level facts the workflow needs; the controller re-checks them before acting."""

    acknowledge_scheduler_actions: bool = False
    partitions: list[str] = Field(default_factory=list)


class AttemptRecord(BaseModel):
    attempt: int
    started: bool = False
    seen_progress: bool = False
    start_line: int = 0
    first_iteration: int | None = None
    max_iteration: int | None = None
    resumed_from: int | None = None
    fingerprint: str | None = None
    category: Category | None = None
    checkpoint_failure: bool = False
    # A failure of this attempt was reported while the job still ran, with this advice, and
    # not acted on (observe mode, unacknowledged cluster).
    reported_advice: AdviceKind | None = None


class ApprovalDecision(Frozen):
    """An operator's answer to one advice (sent as the `decide_advice` update)."""

    generation: int
    approve: bool
    actor: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000)


class ApprovalAck(Frozen):
    generation: int
    accepted: bool
    message: str


class ModeChange(Frozen):
    """Switch a job between observe and action (sent as the `set_mode` update)."""

    mode: Mode
    actor: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000)


class RecoveryState(BaseModel):
    """All durable per-job state; the whole of it is the continue-as-new argument."""

    schema_version: int = 1
    phase: str = "watching"
    attempt: int = 0
    generation: int = 0
    cursor: LogCursor | None = None
    source_cursor: str | None = None
    attempts: list[AttemptRecord] = Field(default_factory=list)
    budgets: dict[str, int] = Field(default_factory=dict)
    failures_counted: int = 0
    excluded_nodes: list[str] = Field(default_factory=list)
    completed_actions: dict[str, str] = Field(default_factory=dict)
    advice_log: list[Advice] = Field(default_factory=list)
    last_category: str | None = None
    outcome: str | None = None
    mode: Mode = Mode.OBSERVE
    # The advice generation waiting for an operator, and the decisions taken so far.
    pending_approval: int | None = None
    decisions: dict[int, ApprovalDecision] = Field(default_factory=dict)
    # "<attempt>:<fingerprint>" an operator declined (rejected or let expire): not asked again.
    declined: list[str] = Field(default_factory=list)
    # Watch notes already recorded as `evidence_limited` events (each is recorded once).
    noted: list[str] = Field(default_factory=list)


class RecoveryInput(Frozen):
    job: JobKey
    # None when the comment opted in but could not be used; `problems` says why.
    directive: Directive | None
    problems: list[str] = Field(default_factory=list)
    hold_timeout_seconds: float = 600.0
    # How long an activity may wait for a controller before the workflow reports it missing.
    controller_timeout_seconds: float = 120.0
    policy: PolicyConfig
    gates: ClusterGates = ClusterGates()
    state: RecoveryState | None = None
    job_name: str = ""
    user: str = ""
    partition: str = ""
    # A heterogeneous job: each component's own job id by offset, as discovery listed them
    # (recorded by monitoring_started, so a component's id finds the job before it runs).
    het_job_ids: list[int] = Field(default_factory=list)


class RecoveryOutcome(Frozen):
    job: JobKey
    outcome: str
    attempts: int
    advice: list[Advice]


class JobStatus(Frozen):
    """What the `status` query returns."""

    job: JobKey
    phase: str
    mode: Mode
    attempt: int
    last_category: str | None
    excluded_nodes: list[str]
    advice: list[Advice]
    outcome: str | None
    pending_approval: Advice | None = None
