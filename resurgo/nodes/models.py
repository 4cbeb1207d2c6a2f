"""Wire format of the node health workflow and its activities (Temporal payloads: add fields
with defaults, never rename)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from resurgo.contracts import ApprovalDecision, Frozen, Mode
from resurgo.nodes.lemon import LemonAdvice


def node_workflow_id(cluster: str, node: str) -> str:
    """One node health workflow per node of a cluster at a time."""
    return f"resurgo-node:{cluster}:{node}"


class HealthCheckSpec(Frozen):
    """The configured check (PolicyConfig.health_check*): argv run on the node alone."""

    command: list[str]
    timeout_seconds: float = 300.0
    output_dir: str = "/tmp"


class RepairMark(Frozen):
    """An operator says the node was repaired (sent as the `mark_repaired` update)."""

    actor: str = Field(min_length=1, max_length=200)
    note: str = Field(default="", max_length=2000)


class HealthCheckResult(Frozen):
    """What one run of the check showed. Contract: see resurgo/nodes/health_check.py."""

    job_id: int
    passed: bool
    state: str
    exit_code: int = 0
    exit_signal: int = 0
    # The check's own `RESURGO-CHECK ...` lines, and the last lines of its output.
    report: list[str] = Field(default_factory=list)
    tail: list[str] = Field(default_factory=list)
    summary: str = ""
    output_path: str = ""


class NodeHealthState(BaseModel):
    """All durable state of one node health workflow (the continue-as-new argument)."""

    phase: str = "advised"
    drained_at: datetime | None = None
    repair: RepairMark | None = None
    validations: int = 0
    last_check: HealthCheckResult | None = None
    decision: ApprovalDecision | None = None
    outcome: str | None = None


class NodeHealthInput(Frozen):
    cluster: str
    node: str
    advice: LemonAdvice
    mode: Mode = Mode.OBSERVE
    require_approval: bool = False
    approval_timeout_seconds: float = 900.0
    check: HealthCheckSpec | None = None
    validate_after_seconds: float = 0.0
    poll_seconds: float = 60.0
    controller_timeout_seconds: float = 120.0
    state: NodeHealthState | None = None
    # The node was drained by a job's recovery, not by lemon advice: validate it, no new drain.
    adopt: bool = False

    def workflow_id(self) -> str:
        return node_workflow_id(self.cluster, self.node)


class NodeHealthStatus(Frozen):
    """What the `status` query returns."""

    cluster: str
    node: str
    phase: str
    validations: int
    outcome: str | None
    last_check: HealthCheckResult | None = None
    reason: str = ""


class NodeDrainRequest(Frozen):
    node: str
    key: str
    reason: str
    # Adopt a drain Resurgo made for a job (its Reason starts `resurgo`): retag it with `reason`
    # so validation may resume the node; never drains a node that is in service.
    adopt: bool = False


class NodeLook(Frozen):
    """The node as slurmctld shows it now (`exists` False: unknown to Slurm)."""

    node: str
    exists: bool = True
    state: str = ""
    reason: str = ""


class NodeStepResult(Frozen):
    outcome: str
    detail: str = ""
    look: NodeLook | None = None


class HealthCheckRequest(Frozen):
    node: str
    key: str
    # Which validation of the node this is (1, 2, ...): part of the check job's name, so a
    # retried activity finds the job it already submitted instead of submitting another.
    round: int
    spec: HealthCheckSpec


class ReturnRequest(Frozen):
    """End one validation: resume (passed) or keep drained with `reason` (failed)."""

    node: str
    key: str
    passed: bool
    reason: str = ""
