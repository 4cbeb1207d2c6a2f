"""Pydantic models of job arrays, shared by the array coordinator, the task workflows, the
controller's array activities and discovery. A wire format like `resurgo.contracts`: add fields
with defaults, never rename one."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field

from resurgo.contracts import Category, ClusterGates, Frozen, Mode, PolicyConfig


def array_workflow_id(cluster: str, array_job_id: int) -> str:
    """The workflow id of the coordinator of array `array_job_id` on `cluster`."""
    return f"resurgo:{cluster}:array:{array_job_id}"


class ArrayKey(Frozen):
    """Identity of one job array: its array job id and the array's first submit time."""

    cluster: str
    array_job_id: int
    submit_time: datetime

    def workflow_id(self) -> str:
        # No submit time: every task's SubmitTime changes on its own requeue, and all tasks
        # must find the one coordinator (a reused array id starts a new run of it).
        return array_workflow_id(self.cluster, self.array_job_id)

    def label(self) -> str:
        return f"{self.cluster}/{self.array_job_id}_*"


class TaskFailure(Frozen):
    """One failure of one array task, as its workflow reports it to the array coordinator."""

    task_id: int
    job_id: int
    attempt: int
    fingerprint: str
    category: Category
    culprit_nodes: list[str] = Field(default_factory=list)
    # The nodes the failed attempt ran on.
    nodes: list[str] = Field(default_factory=list)
    summary: str = ""
    # The task's workflow, which gets the verdict back as a signal.
    workflow_id: str = ""

    def key(self) -> str:
        return f"{self.attempt}:{self.fingerprint}"


class ArrayVerdict(Frozen):
    """The coordinator's answer to one task failure."""

    key: str
    # The fingerprint failed enough tasks to be systematic: do not retry it.
    systematic: bool = False
    reason: str = ""
    # Nodes the array's pending tasks exclude (a node failing several tasks).
    array_excluded_nodes: list[str] = Field(default_factory=list)


class SystematicFinding(Frozen):
    fingerprint: str
    category: Category
    tasks: list[int]
    nodes: list[str]
    summary: str = ""


class NodeFinding(Frozen):
    node: str
    tasks: list[int]


class ArrayAssessment(Frozen):
    """What the failures of an array's tasks say about the array as a whole (pure result)."""

    systematic: list[SystematicFinding] = Field(default_factory=list)
    # Nodes to exclude for the pending tasks, most implicated first (capped by the policy).
    exclude: list[NodeFinding] = Field(default_factory=list)
    # Nodes implicated often enough but left out by the cap.
    over_cap: list[NodeFinding] = Field(default_factory=list)
    hold_pending: bool = False


class ArrayStep(StrEnum):
    HOLD_PENDING = "hold_pending"
    EXCLUDE_PENDING = "exclude_pending"


class ArrayActionRequest(Frozen):
    array: ArrayKey
    step: ArrayStep
    idempotency_key: str
    nodes: list[str] = Field(default_factory=list)
    reason: str = ""


class ArrayActionResult(Frozen):
    step: ArrayStep
    outcome: Literal["applied", "already_satisfied", "nothing_pending"]
    # What was targeted, e.g. `12_[4-9]`.
    target: str = ""
    detail: str = ""


class ArrayView(Frozen):
    """The array as Slurm shows it now: task counts by state, pending tasks still unstarted."""

    array_job_id: int
    tasks_by_state: dict[str, int] = Field(default_factory=dict)
    # Slurm's task expression of the tasks that never started (`4-9`), "" when none.
    pending_tasks: str = ""
    pending_held: bool = False
    pending_excluded: list[str] = Field(default_factory=list)

    @property
    def finished(self) -> bool:
        return not any(
            s in self.tasks_by_state
            for s in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED", "CONFIGURING")
        )


class ArrayInput(Frozen):
    array: ArrayKey
    policy: PolicyConfig
    gates: ClusterGates = ClusterGates()
    mode: Mode = Mode.OBSERVE
    partition: str = ""
    user: str = ""
    job_name: str = ""
    controller_timeout_seconds: float = 120.0
    poll_seconds: float = 300.0
    state: ArrayState | None = None


class ArrayState(BaseModel):
    """All durable state of one array's coordinator (the continue-as-new argument)."""

    failures: list[TaskFailure] = Field(default_factory=list)
    # Findings already recorded ("fp:<fingerprint>", "node:<name>"): each is recorded once.
    recorded: list[str] = Field(default_factory=list)
    held: bool = False
    excluded_nodes: list[str] = Field(default_factory=list)
    completed_actions: dict[str, str] = Field(default_factory=dict)
    view: ArrayView | None = None
    finished_polls: int = 0
    # An operator's switch (`set_mode`); None: the mode the array's directive asked for.
    mode: Mode | None = None


class ArrayStatus(Frozen):
    """What the coordinator's `status` query returns: the array-level view."""

    array: ArrayKey
    mode: Mode
    tasks_by_state: dict[str, int]
    failures_by_fingerprint: dict[str, list[int]]
    nodes_implicated: dict[str, list[int]]
    systematic: list[SystematicFinding]
    held: bool
    excluded_nodes: list[str]


ArrayInput.model_rebuild()
