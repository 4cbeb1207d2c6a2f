"""Job arrays on the real Temporal dev server: task workflows (JobRecoveryWorkflow) and the
array's coordinator (ArrayCoordinatorWorkflow), with the cluster side scripted.

Every task plays: started, then a crash; a second attempt completes. What each task's failure
is (fingerprint, category, nodes) is scripted per task; the scheduler steps and the array-level
steps are recorded, so the tests pin what a user would see in Slurm and in the audit trail.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from resurgo.array_models import (
    ArrayActionRequest,
    ArrayActionResult,
    ArrayInput,
    ArrayKey,
    ArrayStatus,
    ArrayView,
)
from resurgo.contracts import (
    ActionRequest,
    ActionResult,
    AnomalyKind,
    AttributeRequest,
    Attribution,
    AuditEvent,
    AuditEventType,
    Category,
    Directive,
    JobKey,
    JobObservation,
    Mode,
    ModeChange,
    PolicyConfig,
    Reconciliation,
    RecoveryInput,
    RecoveryOutcome,
    VerifyRequest,
    WatchRequest,
    WatchResult,
    controller_task_queue,
)
from resurgo.contracts import Anomaly as AnomalyModel
from resurgo.contracts import ClusterGates as Gates
from resurgo.workflows.array_coordinator import ArrayCoordinatorWorkflow
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ARRAY = 500
# Recorded coordinator histories (tests/replay/record_arrays.py); the task histories recorded
# with them sit with every other JobRecoveryWorkflow history in tests/replay/histories.
ARRAY_HISTORIES = Path(__file__).resolve().parent.parent / "replay" / "array_histories"


@dataclass
class Failure:
    fingerprint: str
    category: Category
    node: str
    culprit: bool = False
    confidence: float = 0.5


@dataclass
class ScriptedArray:
    """The cluster side: task `t` is Slurm job ARRAY + 1 + t; its failure is `failures[t]`."""

    failures: dict[int, Failure]
    steps: list[tuple[int, str, list[str]]] = field(default_factory=list)
    array_steps: list[ArrayActionRequest] = field(default_factory=list)
    audit: list[AuditEvent] = field(default_factory=list)
    done: set[int] = field(default_factory=set)
    # Tasks still waiting to start (the array is not finished while there are any).
    pending: int = 0

    def task(self, job_id: int) -> int:
        return job_id - ARRAY - 1

    def observation(self, job_id: int, state: str, attempt: int) -> JobObservation:
        node = self.failures[self.task(job_id)].node
        return JobObservation(job_id=job_id, state=state, restarts=attempt, node_list=[node])

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        job = req.job.job_id
        if req.follow_only:  # observe mode: the failure was reported, nobody requeues
            self.done.add(self.task(job))
            return WatchResult(outcome="window_elapsed",
                               observation=self.observation(job, "FAILED", 0))  # fmt: skip
        if not req.seen_started:
            return WatchResult(outcome="started", observation=self.observation(job, "RUNNING", 0))
        if req.attempt == 0:
            anomaly = AnomalyModel(
                kind=AnomalyKind.CRASH, attempt=0, detected_at=NOW, summary="job FAILED",
                job_state="FAILED", nodes=[self.failures[self.task(job)].node],
            )  # fmt: skip
            return WatchResult(outcome="anomaly", anomaly=anomaly,
                               observation=self.observation(job, "FAILED", 0))  # fmt: skip
        self.done.add(self.task(job))
        return WatchResult(outcome="completed", observation=self.observation(job, "COMPLETED", 1))

    @activity.defn(name="attribute_anomaly")
    async def attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        f = self.failures[self.task(req.job.job_id)]
        return Attribution(
            kind=AnomalyKind.CRASH, category=f.category, confidence=f.confidence,
            culprit_nodes=[f.node] if f.culprit else [], fingerprint=f.fingerprint,
            summary=f"{f.fingerprint} on {f.node}",
        )  # fmt: skip

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        self.steps.append((self.task(req.job.job_id), req.step.value, req.nodes))
        if req.step.value == "cancel":
            self.done.add(self.task(req.job.job_id))
        return ActionResult(step=req.step, idempotency_key=req.idempotency_key, outcome="applied")

    @activity.defn(name="verify_advice")
    async def verify_advice(self, req: VerifyRequest) -> Reconciliation:
        state = "CANCELLED" if req.advice.kind == "stop" else "PENDING"
        return Reconciliation(status="converged", reason="desired_state_observed",
                              observation=self.observation(req.job.job_id, state, 1))  # fmt: skip

    @activity.defn(name="array_view")
    async def array_view(self, array_job_id: int) -> ArrayView:
        running = len(self.failures) - len(self.done)
        states = {"RUNNING": running} if running else {"COMPLETED": len(self.done)}
        if self.pending:
            states["PENDING"] = self.pending
        return ArrayView(array_job_id=array_job_id, tasks_by_state=states)

    @activity.defn(name="array_action")
    async def array_action(self, req: ArrayActionRequest) -> ArrayActionResult:
        self.array_steps.append(req)
        return ArrayActionResult(step=req.step, outcome="applied", target=f"{ARRAY}_[7-9]")

    @activity.defn(name="record_audit")
    async def record_audit(self, events: list[AuditEvent]) -> int:
        self.audit.extend(events)
        return len(events)

    def events(self, type_: AuditEventType, producer: str | None = None) -> list[AuditEvent]:
        return [e for e in self.audit if e.type == type_ and producer in (None, e.producer)]


class Harness:
    def __init__(self, client: Client, cluster: ScriptedArray) -> None:
        self.client = client
        self.cluster = cluster
        self.name = "a" + uuid.uuid4().hex[:8]
        self.queue = f"test-{self.name}"

    def workers(self) -> tuple[Worker, Worker]:
        c = self.cluster
        core = Worker(self.client, task_queue=self.queue,
                      workflows=[JobRecoveryWorkflow, ArrayCoordinatorWorkflow],
                      activities=[c.record_audit])  # fmt: skip
        controller = Worker(
            self.client, task_queue=controller_task_queue(self.name),
            activities=[c.watch_attempt, c.attribute_anomaly, c.scheduler_action,
                        c.verify_advice, c.array_view, c.array_action],
        )  # fmt: skip
        return core, controller

    def array_key(self) -> ArrayKey:
        return ArrayKey(cluster=self.name, array_job_id=ARRAY, submit_time=NOW)

    async def coordinator(
        self, mode: Mode, policy: PolicyConfig, ack: bool = True
    ) -> WorkflowHandle[ArrayCoordinatorWorkflow, str]:
        inp = ArrayInput(array=self.array_key(), policy=policy, mode=mode, poll_seconds=1.0,
                         gates=Gates(acknowledge_scheduler_actions=ack))  # fmt: skip
        return await self.client.start_workflow(
            ArrayCoordinatorWorkflow.run, inp, id=inp.array.workflow_id(), task_queue=self.queue
        )

    async def task(
        self, task: int, mode: Mode, policy: PolicyConfig, ack: bool = True
    ) -> RecoveryOutcome:
        """Run one task's workflow to its end (tasks fail one after the other)."""
        key = JobKey(cluster=self.name, job_id=ARRAY + 1 + task, submit_time=NOW,
                     array_job_id=ARRAY, array_task_id=task)  # fmt: skip
        inp = RecoveryInput(job=key, directive=Directive(mode=mode), policy=policy,
                            gates=Gates(acknowledge_scheduler_actions=ack))  # fmt: skip
        handle = await self.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=key.workflow_id(), task_queue=self.queue
        )
        return await handle.result()


@pytest.fixture
async def make(temporal_env: WorkflowEnvironment) -> AsyncIterator[object]:
    started: list[tuple[Worker, Worker]] = []

    async def build(failures: dict[int, Failure]) -> Harness:
        h = Harness(temporal_env.client, ScriptedArray(failures))
        core, controller = h.workers()
        await core.__aenter__()
        await controller.__aenter__()
        started.append((core, controller))
        return h

    yield build
    for core, controller in started:
        await controller.__aexit__(None, None, None)
        await core.__aexit__(None, None, None)


BUG = "application:keyerror:data.py:41"
RETRY_BUGS = PolicyConfig(application_retries=3)  # the tasks alone would retry this bug


async def test_a_bug_in_every_task_is_recognised_once_and_the_rest_held(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = await make({t: Failure(BUG, Category.APPLICATION, f"node{t % 2 + 1}")
                             for t in range(4)})  # fmt: skip
    coordinator = await h.coordinator(Mode.ACTION, RETRY_BUGS)
    outcomes = [await h.task(t, Mode.ACTION, RETRY_BUGS) for t in range(4)]
    # Tasks 0 and 1 are retried on their own budget; from the third failing task on the bug is
    # systematic: no more retries, the task stops.
    assert [o.outcome for o in outcomes] == ["completed", "completed", "stopped", "stopped"]
    assert [o.advice[-1].rule for o in outcomes[2:]] == ["array_systematic"] * 2
    assert [s for s in h.cluster.steps if s[1] == "cancel"] == [
        (2, "cancel", []),
        (3, "cancel", []),
    ]
    findings = h.cluster.events(AuditEventType.ARRAY_FINDING)
    assert len(findings) == 1 and BUG in findings[0].summary and "0,1,2" in findings[0].summary
    assert findings[0].job_id == ARRAY
    # The array's pending tasks held, once.
    assert [r.step.value for r in h.cluster.array_steps] == ["hold_pending"]
    status: ArrayStatus = await coordinator.query(ArrayCoordinatorWorkflow.status)
    assert status.failures_by_fingerprint == {BUG: [0, 1, 2, 3]} and status.held
    assert await coordinator.result() == "finished"
    await _replays(h, coordinator)


async def test_observe_mode_only_advises(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = await make({t: Failure(BUG, Category.APPLICATION, f"node{t + 1}")
                             for t in range(3)})  # fmt: skip
    coordinator = await h.coordinator(Mode.OBSERVE, RETRY_BUGS)
    for t in range(3):
        await h.task(t, Mode.OBSERVE, RETRY_BUGS)
    assert h.cluster.steps == [] and h.cluster.array_steps == []
    would = h.cluster.events(AuditEventType.WOULD_ACT, "array_coordinator")
    assert len(would) == 1 and "hold the array's pending tasks" in would[0].summary
    assert "observe mode" in would[0].summary
    assert len(h.cluster.events(AuditEventType.ARRAY_FINDING)) == 1
    await coordinator.result()


async def test_an_operator_switching_the_array_to_action_gets_the_advice_carried_out(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = await make({t: Failure(BUG, Category.APPLICATION, f"node{t + 1}")
                             for t in range(3)})  # fmt: skip
    h.cluster.pending = 7
    coordinator = await h.coordinator(Mode.OBSERVE, RETRY_BUGS)
    for t in range(3):
        await h.task(t, Mode.OBSERVE, RETRY_BUGS)
    assert h.cluster.array_steps == []
    # (The SDK's typing reads an async update's result as a coroutine: cast.)
    status = cast(
        ArrayStatus,
        await coordinator.execute_update(
            ArrayCoordinatorWorkflow.set_mode,
            ModeChange(mode=Mode.ACTION, actor="ops", reason="reviewed the finding"),
        ),
    )
    assert status.mode == Mode.ACTION
    for _ in range(100):
        if h.cluster.array_steps:
            break
        await asyncio.sleep(0.1)
    assert [r.step.value for r in h.cluster.array_steps] == ["hold_pending"]
    changed = h.cluster.events(AuditEventType.MODE_CHANGED)
    assert len(changed) == 1 and "observe -> action by ops" in changed[0].summary
    h.cluster.pending = 0
    await coordinator.result()
    await _replays(h, coordinator)


async def test_a_node_failing_three_tasks_is_excluded_for_the_pending_ones(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = await make({t: Failure(f"hardware_gpu:xid79:{t}", Category.HARDWARE_GPU,
                                        "node3", culprit=True, confidence=0.9)
                             for t in range(3)})  # fmt: skip
    coordinator = await h.coordinator(Mode.ACTION, PolicyConfig())
    outcomes = [await h.task(t, Mode.ACTION, PolicyConfig()) for t in range(3)]
    # Each task is requeued excluding node3 on its own ...
    assert [o.outcome for o in outcomes] == ["completed"] * 3
    assert [s for s in h.cluster.steps if s[1] == "exclude_nodes"] == [
        (t, "exclude_nodes", ["node3"]) for t in range(3)
    ]
    # ... and after the third, node3 is excluded for the tasks that have not started yet.
    assert [(r.step.value, r.nodes) for r in h.cluster.array_steps] == [
        ("exclude_pending", ["node3"])
    ]
    (finding,) = h.cluster.events(AuditEventType.ARRAY_FINDING)
    assert "node3" in finding.summary and finding.data["tasks"] == [0, 1, 2]
    await coordinator.result()
    await _replays(h, coordinator)


async def test_without_a_coordinator_a_task_decides_alone(make) -> None:  # type: ignore[no-untyped-def]
    h: Harness = await make({0: Failure(BUG, Category.APPLICATION, "node1")})
    outcome = await h.task(0, Mode.ACTION, RETRY_BUGS)
    assert outcome.outcome == "completed"
    (note,) = h.cluster.events(AuditEventType.EVIDENCE_LIMITED)
    assert "coordinator" in note.summary and "this task alone" in note.summary


async def _replays(h: Harness, coordinator: WorkflowHandle[ArrayCoordinatorWorkflow, str]) -> None:
    """Both workflows' fresh histories replay deterministically."""
    replayer = Replayer(
        workflows=[JobRecoveryWorkflow, ArrayCoordinatorWorkflow],
        data_converter=pydantic_data_converter,
    )
    await replayer.replay_workflow(await coordinator.fetch_history())
    task = JobKey(cluster=h.name, job_id=ARRAY + 3, submit_time=NOW, array_job_id=ARRAY,
                  array_task_id=2)  # fmt: skip
    await replayer.replay_workflow(
        await h.client.get_workflow_handle(task.workflow_id()).fetch_history()
    )
    await asyncio.sleep(0)


@pytest.mark.parametrize("path", sorted(ARRAY_HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_coordinator_histories_replay(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(
        workflows=[ArrayCoordinatorWorkflow], data_converter=pydantic_data_converter
    )
    await replayer.replay_workflow(history)
