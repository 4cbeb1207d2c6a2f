"""The HTTP API's request and response bodies.

Workflow payloads (advice, anomalies, attributions, decisions, status) are the contract models of
`resurgo.contracts` themselves, so the API shows exactly what the workflow recorded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from resurgo.audit.store import StoredAuditEvent
from resurgo.contracts import (
    Advice,
    Anomaly,
    ApprovalAck,
    ApprovalDecision,
    Attribution,
    JobStatus,
    Mode,
    ModeChange,
)

__all__ = [
    "AdviceItem",
    "AdvicePage",
    "AdviceView",
    "AttemptView",
    "AuditPage",
    "DecisionRequest",
    "DecisionResponse",
    "ErrorBody",
    "ErrorDetail",
    "Health",
    "JobDetail",
    "JobItem",
    "JobPage",
    "JobRef",
    "ModeRequest",
    "ModeResponse",
    "Readiness",
    "ReadinessCheck",
    "ReconciliationView",
    "RejectRequest",
    "TimelinePage",
]

AdviceState = Literal[
    "pending_approval",
    "approved",
    "rejected",
    "expired",
    "acted",
    "would_act",
    "recorded",
]


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(Out):
    code: str = Field(description="stable, for programs: not_found, unavailable, ...")
    message: str = Field(description="what went wrong, for a person")
    details: list[dict[str, Any]] | None = Field(
        default=None, description="422: one entry per invalid field (loc, msg, type)"
    )


class ErrorBody(Out):
    """Every error the API answers has this shape."""

    error: ErrorDetail


class JobRef(Out):
    """Which job: (cluster, Slurm job id) and the workflow id that is its identity."""

    cluster: str
    job_id: int = Field(description="Slurm's job id (an array task's own per-task id)")
    name: str | None = Field(
        default=None, description="as Slurm users name it: `<array id>_<task id>` or the job id"
    )
    array_job_id: int | None = Field(default=None, description="an array task's array job id")
    array_task_id: int | None = Field(default=None, description="an array task's index")
    workflow_id: str
    submit_time: datetime | None = Field(
        default=None, description="from the workflow id (whole seconds, UTC)"
    )


class JobItem(JobRef):
    """One job in a listing. Live jobs come from Temporal visibility, finished ones from the
    audit store (enriched with their closed workflow's search attributes while Temporal keeps
    them)."""

    live: bool = Field(description="its workflow is running")
    source: Literal["temporal", "audit"]
    state: str | None = Field(description="workflow phase (live) or outcome (finished)")
    mode: str | None = Field(description="observe | action (invalid: directive rejected)")
    attempt: int | None
    last_category: str | None
    needs_approval: bool = False
    user: str | None = None
    partition: str | None = None
    first_seen: datetime | None = Field(default=None, description="monitoring began")
    last_seen: datetime | None = Field(default=None, description="last audit event (finished)")


class JobPage(Out):
    items: list[JobItem]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: done")
    degraded: bool = Field(
        default=False,
        description="Temporal was unreachable: jobs from the audit store (live state unknown)",
    )


class AdviceView(Out):
    advice: Advice
    state: AdviceState
    at: datetime | None = Field(default=None, description="when the advice was recorded")
    decision: ApprovalDecision | None = None
    decided_at: datetime | None = None
    reconciliation: ReconciliationView | None = None


class ReconciliationView(Out):
    generation: int | None
    attempt: int | None
    status: str
    reason: str
    at: datetime


class AttemptView(Out):
    attempt: int
    started_at: datetime | None = None
    nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    first_iteration: int | None = None
    resumed_from: int | None = None
    anomalies: list[Anomaly] = Field(default_factory=list)
    attributions: list[Attribution] = Field(default_factory=list)
    advice_generations: list[int] = Field(default_factory=list)


class JobDetail(JobItem):
    """Everything about one job; the same shape whether it is live or finished."""

    phase: str | None = Field(description="current phase, or the final one")
    outcome: str | None
    excluded_nodes: list[str]
    pending_approval: Advice | None
    attempts: list[AttemptView]
    anomalies: list[Anomaly]
    attributions: list[Attribution]
    advice: list[AdviceView]
    reconciliation: list[ReconciliationView]
    warnings: list[str] = Field(
        default_factory=list, description="parts that could not be read (e.g. no worker answered)"
    )
    named_by: str | None = Field(
        default=None,
        description="set when the job was asked for by a heterogeneous job component's own "
        "job id: `86 is component 85+1 of heterogeneous job 85`",
    )


class TimelinePage(Out):
    job: JobRef
    events: list[StoredAuditEvent]
    next_cursor: str | None
    degraded: bool = Field(
        default=False, description="Temporal was unreachable: the job was found in the audit store"
    )
    named_by: str | None = Field(
        default=None,
        description="set when the job was asked for by a heterogeneous job component's own "
        "job id: `86 is component 85+1 of heterogeneous job 85`",
    )


class AuditPage(Out):
    events: list[StoredAuditEvent]
    next_cursor: str | None
    named_by: str | None = Field(
        default=None,
        description="set when the job was asked for by a heterogeneous job component's own "
        "job id: `86 is component 85+1 of heterogeneous job 85`",
    )


class AdviceItem(Out):
    job: JobRef
    advice: Advice
    pending: bool = Field(description="waiting for an operator's approval")
    state: str | None
    mode: str | None
    requested_at: datetime | None = None
    expires_at: datetime | None = Field(
        default=None, description="when an undecided approval expires (nothing is done then)"
    )


class AdvicePage(Out):
    items: list[AdviceItem]
    next_cursor: str | None
    warnings: list[str] = Field(default_factory=list)


class DecisionRequest(Out):
    reason: str = Field(default="", max_length=2000)


class RejectRequest(Out):
    reason: str = Field(min_length=1, max_length=2000, description="why; kept in the audit trail")


class DecisionResponse(Out):
    job: JobRef
    decision: ApprovalDecision
    ack: ApprovalAck


class ModeRequest(Out):
    mode: Mode
    reason: str = Field(default="", max_length=2000)


class ModeResponse(Out):
    job: JobRef
    change: ModeChange
    status: JobStatus


class Health(Out):
    status: Literal["ok"] = "ok"


class ReadinessCheck(Out):
    ok: bool
    detail: str


class Readiness(Out):
    ready: bool = Field(description="the audit store answers: every read can be served")
    degraded: bool = Field(
        default=False, description="Temporal does not answer: reads come from the audit store"
    )
    checks: dict[str, ReadinessCheck]


AdviceView.model_rebuild()
