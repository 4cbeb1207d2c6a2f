"""JobRecoveryWorkflow on the real Temporal dev server, with scripted cluster activities.

The cluster side (watch, attribute, scheduler steps, verify) is replaced by activities registered
under the real names that play a script and record every scheduler step, so these tests pin the
orchestration: approvals, mode switches, observe-mode side-effect freedom and replay safety.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from resurgo.contracts import (
    ActionRequest,
    ActionResult,
    AnomalyKind,
    ApprovalDecision,
    AttributeRequest,
    Attribution,
    AuditEvent,
    Category,
    Directive,
    JobKey,
    JobObservation,
    LogCursor,
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
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

HISTORIES = Path(__file__).resolve().parent.parent / "replay" / "histories"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def obs(
    state: str, restarts: int = 0, nodes: tuple[str, ...] = ("node1", "node2")
) -> JobObservation:
    return JobObservation(job_id=7, state=state, restarts=restarts, node_list=list(nodes))


class FakeCluster:
    """Plays each attempt as: started, progress, then a crash (attempt 0) or completion."""

    def __init__(self, crashes: int = 1) -> None:
        self.crashes = crashes
        self.steps: list[str] = []
        self.audit: list[AuditEvent] = []

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        await asyncio.sleep(0.05)
        if not req.seen_started:
            return WatchResult(outcome="started", observation=obs("RUNNING", req.attempt))
        if not req.seen_progress:
            return WatchResult(
                outcome="progress", observation=obs("RUNNING", req.attempt),
                progress={"iteration": 10 * (req.attempt + 1), "line_no": 1, "at": NOW},  # type: ignore[arg-type]
                last_iteration=10 * (req.attempt + 1),
                resumed_from=10 if req.attempt else None,
            )  # fmt: skip
        if req.attempt < self.crashes:
            anomaly = AnomalyModel(
                kind=AnomalyKind.CRASH, attempt=req.attempt, detected_at=NOW,
                summary="job FAILED", job_state="FAILED", nodes=["node1", "node2"],
            )  # fmt: skip
            return WatchResult(outcome="anomaly", observation=obs("FAILED", req.attempt),
                               anomaly=anomaly, last_iteration=20 * (req.attempt + 1))  # fmt: skip
        return WatchResult(outcome="completed", observation=obs("COMPLETED", req.attempt))

    @activity.defn(name="attribute_anomaly")
    async def attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        return Attribution(
            kind=AnomalyKind.CRASH, category=Category.HARDWARE_GPU, culprit_nodes=["node2"],
            confidence=0.9, fingerprint="hardware_gpu:ecc:node2", summary="ECC on node2",
        )  # fmt: skip

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        self.steps.append(req.step.value)
        return ActionResult(step=req.step, idempotency_key=req.idempotency_key, outcome="applied")

    @activity.defn(name="verify_advice")
    async def verify_advice(self, req: VerifyRequest) -> Reconciliation:
        return Reconciliation(status="converged", reason="desired_state_observed",
                              observation=obs("PENDING", req.advice.attempt + 1))  # fmt: skip

    @activity.defn(name="record_audit")
    async def record_audit(self, events: list[AuditEvent]) -> int:
        self.audit.extend(events)
        return len(events)

    def types(self) -> list[str]:
        return [e.type for e in self.audit]


class Harness:
    def __init__(self, client: Client, cluster: FakeCluster) -> None:
        self.client = client
        self.cluster = cluster
        self.name = "w" + uuid.uuid4().hex[:8]
        self.queue = f"test-{self.name}"

    def worker(self) -> Worker:
        fake = self.cluster
        return Worker(
            self.client, task_queue=self.queue, workflows=[JobRecoveryWorkflow],
            activities=[fake.record_audit],
        )  # fmt: skip

    def controller(self) -> Worker:
        fake = self.cluster
        return Worker(
            self.client, task_queue=controller_task_queue(self.name),
            activities=[fake.watch_attempt, fake.attribute_anomaly, fake.scheduler_action,
                        fake.verify_advice],
        )  # fmt: skip

    async def start(
        self,
        directive: Directive,
        *,
        ack: bool = True,
        policy: PolicyConfig | None = None,
        partition: str = "",
        partitions: tuple[str, ...] = (),
        controller_timeout: float = 120,
    ) -> WorkflowHandle[JobRecoveryWorkflow, RecoveryOutcome]:
        inp = RecoveryInput(
            job=JobKey(cluster=self.name, job_id=7, submit_time=NOW),
            directive=directive, policy=policy or PolicyConfig(),
            gates=Gates(acknowledge_scheduler_actions=ack, partitions=list(partitions)),
            partition=partition, controller_timeout_seconds=controller_timeout,
        )  # fmt: skip
        return await self.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=inp.job.workflow_id(), task_queue=self.queue
        )

    async def wait_for_type(self, type_: str, timeout: float = 20) -> None:
        for _ in range(int(timeout / 0.1)):
            if type_ in self.cluster.types():
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"no {type_}: {self.cluster.types()}")


class FailsWhileRunning(FakeCluster):
    """A fatal line while the job still runs; then the job ends; nobody requeues it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[WatchRequest] = []

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        self.requests.append(req)
        if not (req.seen_started and req.seen_progress):
            return await super().watch_attempt(req)
        if req.follow_only:
            return WatchResult(outcome="window_elapsed", observation=obs("FAILED", 0))
        if req.failure_reported:
            return WatchResult(outcome="ended", observation=obs("FAILED", 0))
        anomaly = AnomalyModel(
            kind=AnomalyKind.CRASH, attempt=0, detected_at=NOW, job_state="RUNNING",
            summary="fatal error while the job is still RUNNING", nodes=["node1", "node2"],
        )  # fmt: skip
        return WatchResult(outcome="anomaly", observation=obs("RUNNING", 0), anomaly=anomaly)


class CrashesInItsFirstBatch(FakeCluster):
    """Attempt 0's first progress line and its fatal line are read in the same batch."""

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        if req.attempt > 0 or not req.seen_started:
            return await super().watch_attempt(req)
        anomaly = AnomalyModel(
            kind=AnomalyKind.CRASH, attempt=0, detected_at=NOW, job_state="RUNNING",
            summary="fatal error while the job is still RUNNING", nodes=["node1", "node2"],
        )  # fmt: skip
        return WatchResult(
            outcome="anomaly", observation=obs("RUNNING", 0), anomaly=anomaly,
            progress={"iteration": 3, "line_no": 9, "at": NOW},  # type: ignore[arg-type]
        )  # fmt: skip


class OutputRefused(FakeCluster):
    """The job's output file is refused (e.g. a symlink): every watch result says so."""

    NOTE = "output file not read: /home/u/out.log is a symlink"

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        result = await super().watch_attempt(req)
        return result.model_copy(update={"notes": [self.NOTE]})


class HoldEndsTheOutput(FakeCluster):
    """requeue_hold reports where the held attempt's output ended (line 40, byte 900)."""

    END = LogCursor(path="/home/u/job.out", offset=900, line_no=40)

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[WatchRequest] = []
        self.actions: list[ActionRequest] = []

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        self.requests.append(req)
        result = await super().watch_attempt(req)
        if req.attempt == 0:
            # Attempt 0's watch read up to line 12 before it reported the crash.
            here = LogCursor(path=self.END.path, offset=300, line_no=12)
            return result.model_copy(update={"cursor": here})
        return result.model_copy(
            update={"cursor": req.cursor, "attempt_start_line": req.attempt_start_line}
        )

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        self.actions.append(req)
        done = await super().scheduler_action(req)
        if req.step.value == "requeue_hold":
            return done.model_copy(update={"output_end": self.END})
        return done


@pytest.fixture
async def harness(temporal_env: WorkflowEnvironment) -> AsyncIterator[Harness]:
    h = Harness(temporal_env.client, FakeCluster())
    async with h.worker(), h.controller():
        yield h


ACTION = Directive(mode=Mode.ACTION)
APPROVAL = Directive(mode=Mode.ACTION, approval="required", approval_timeout=30)


class TestRecoveryLoop:
    async def test_action_mode_requeues_excluding_and_completes(self, harness: Harness) -> None:
        handle = await harness.start(ACTION)
        outcome = await handle.result()
        assert outcome.outcome == "completed" and outcome.attempts == 2
        assert harness.cluster.steps == ["requeue_hold", "exclude_nodes", "release"]
        types = harness.cluster.types()
        assert types.index("advice") < types.index("action") < types.index("reconciliation")
        assert "progress_recovered" in types

    async def test_next_attempt_reads_after_the_held_attempts_output(
        self, temporal_env: WorkflowEnvironment
    ) -> None:
        """The next attempt's watch starts where requeue_hold found the old output's end, not
        where the old watch stopped: a watch that first sees the job RUNNING (never PENDING)
        must not read the old attempt's teardown lines as its own."""
        h = Harness(temporal_env.client, HoldEndsTheOutput())
        async with h.worker(), h.controller():
            outcome = await (await h.start(ACTION)).result()
        cluster = h.cluster
        assert isinstance(cluster, HoldEndsTheOutput) and outcome.outcome == "completed"
        hold = next(a for a in cluster.actions if a.step.value == "requeue_hold")
        assert hold.cursor is not None and hold.cursor.line_no == 12
        later = [r for r in cluster.requests if r.attempt == 1]
        assert later and all(r.attempt_start_line == 40 for r in later)
        assert later[0].cursor == HoldEndsTheOutput.END

    async def test_observe_mode_takes_no_scheduler_action(self, harness: Harness) -> None:
        handle = await harness.start(Directive(mode=Mode.OBSERVE))
        await harness.wait_for_type("would_act")
        await handle.terminate("test over")
        assert harness.cluster.steps == []

    async def test_observe_mode_reports_one_failure_once(
        self, temporal_env: WorkflowEnvironment
    ) -> None:
        """The fatal line while the job runs is reported; the job's end is that same failure."""
        h = Harness(temporal_env.client, FailsWhileRunning())
        async with h.worker(), h.controller():
            handle = await h.start(Directive(mode=Mode.OBSERVE))
            outcome = await handle.result()
        types = h.cluster.types()
        assert outcome.outcome == "failed"
        assert types.count("anomaly") == 1 and types.count("advice") == 1, types
        assert types.index("would_act") < types.index("attempt_ended"), types
        assert h.cluster.requests[-2].failure_reported and h.cluster.requests[-1].follow_only
        assert h.cluster.steps == []

    async def test_progress_read_with_the_fatal_line_is_recorded_first(
        self, temporal_env: WorkflowEnvironment
    ) -> None:
        h = Harness(temporal_env.client, CrashesInItsFirstBatch())
        async with h.worker(), h.controller():
            outcome = await (await h.start(ACTION)).result()
        assert outcome.outcome == "completed"
        attempt0 = [e for e in h.cluster.audit if e.attempt == 0]
        types = [e.type for e in attempt0]
        assert types.count("progress") == 1 and types.index("progress") < types.index("anomaly")
        assert next(e for e in attempt0 if e.type == "progress").data["iteration"] == 3

    async def test_a_refused_output_file_is_its_own_audit_event_once(
        self, temporal_env: WorkflowEnvironment
    ) -> None:
        h = Harness(temporal_env.client, OutputRefused())
        async with h.worker(), h.controller():
            outcome = await (await h.start(ACTION)).result()
        assert outcome.outcome == "completed"
        limited = [e for e in h.cluster.audit if e.type == "evidence_limited"]
        # Every one of the attempts' watch results carried the note: one event says it.
        assert [e.summary for e in limited] == [OutputRefused.NOTE]
        assert limited[0].attempt == 0
        started = next(e for e in h.cluster.audit if e.type == "monitoring_started")
        assert "user" in started.data

    async def test_unacknowledged_cluster_takes_no_scheduler_action(self, harness: Harness) -> None:
        handle = await harness.start(ACTION, ack=False)
        await harness.wait_for_type("would_act")
        await handle.terminate("test over")
        assert harness.cluster.steps == []

    async def test_partition_outside_the_allowlist_is_only_advised(self, harness: Harness) -> None:
        handle = await harness.start(ACTION, partition="gpu", partitions=("canary",))
        await harness.wait_for_type("would_act")
        would = next(e for e in harness.cluster.audit if e.type == "would_act")
        assert "allowlist" in would.summary
        await handle.terminate("test over")
        assert harness.cluster.steps == []


class TestControllerLoss:
    async def test_missing_controller_is_reported_and_waited_for(
        self, temporal_env: WorkflowEnvironment
    ) -> None:
        """No controller polls the cluster queue: the workflow says so, then carries on as soon
        as one appears, without skipping anything."""
        h = Harness(temporal_env.client, FakeCluster())
        async with h.worker():
            handle = await h.start(ACTION, controller_timeout=2)
            await h.wait_for_type("controller_unreachable", timeout=30)
            assert h.cluster.steps == []
            async with h.controller():
                assert (await handle.result()).outcome == "completed"
        assert h.cluster.steps == ["requeue_hold", "exclude_nodes", "release"]
        assert h.cluster.types().count("controller_unreachable") == 1


class TestApprovals:
    async def test_approved_advice_is_carried_out(self, harness: Harness) -> None:
        handle = await harness.start(APPROVAL)
        await harness.wait_for_type("approval_requested")
        status = await handle.query(JobRecoveryWorkflow.status)
        assert status.phase == "awaiting_approval" and status.pending_approval is not None
        assert harness.cluster.steps == []
        gen = status.pending_approval.generation
        ack = await handle.execute_update(
            JobRecoveryWorkflow.decide_advice,
            ApprovalDecision(generation=gen, approve=True, actor="alice"),
        )
        assert ack.accepted
        assert (await handle.result()).outcome == "completed"
        assert harness.cluster.steps == ["requeue_hold", "exclude_nodes", "release"]
        approved = next(e for e in harness.cluster.audit if e.type == "approval_approved")
        assert "alice" in approved.summary

    async def test_rejected_advice_does_nothing(self, harness: Harness) -> None:
        handle = await harness.start(APPROVAL)
        await harness.wait_for_type("approval_requested")
        await handle.execute_update(
            JobRecoveryWorkflow.decide_advice,
            ApprovalDecision(generation=1, approve=False, actor="bob", reason="maintenance"),
        )
        await harness.wait_for_type("approval_rejected")
        await asyncio.sleep(0.5)
        assert harness.cluster.steps == []
        await handle.terminate("test over")

    async def test_stale_duplicate_and_unexpected_decisions_are_refused(
        self, harness: Harness
    ) -> None:
        handle = await harness.start(APPROVAL)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                JobRecoveryWorkflow.decide_advice,
                ApprovalDecision(generation=1, approve=True, actor="a"),
            )
        await harness.wait_for_type("approval_requested")
        with pytest.raises(WorkflowUpdateFailedError) as stale:
            await handle.execute_update(
                JobRecoveryWorkflow.decide_advice,
                ApprovalDecision(generation=9, approve=True, actor="a"),
            )
        assert "not the pending one" in str(stale.value.cause)
        await handle.execute_update(
            JobRecoveryWorkflow.decide_advice,
            ApprovalDecision(generation=1, approve=False, actor="a"),
        )
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                JobRecoveryWorkflow.decide_advice,
                ApprovalDecision(generation=1, approve=True, actor="a"),
            )
        await asyncio.sleep(0.5)
        assert harness.cluster.steps == []
        await handle.terminate("test over")

    async def test_approval_timeout_fails_open(self, harness: Harness) -> None:
        handle = await harness.start(
            Directive(mode=Mode.ACTION, approval="required", approval_timeout=2)
        )
        await harness.wait_for_type("approval_expired", timeout=30)
        assert harness.cluster.steps == []
        await handle.terminate("test over")


class TestModeSwitch:
    async def test_switching_to_action_lets_the_next_failure_act(self, harness: Harness) -> None:
        handle = await harness.start(Directive(mode=Mode.OBSERVE))
        status = await handle.execute_update(
            JobRecoveryWorkflow.set_mode, ModeChange(mode=Mode.ACTION, actor="carol")
        )
        assert status.mode == Mode.ACTION
        assert (await handle.result()).outcome == "completed"
        assert harness.cluster.steps == ["requeue_hold", "exclude_nodes", "release"]
        assert "mode_changed" in harness.cluster.types()


class TestLongLivedJobs:
    async def test_many_attempts_roll_over_and_keep_their_state(self, harness: Harness) -> None:
        """30 failed attempts: the history is split into bounded runs, nothing is forgotten."""
        from tests.conftest import SUGGEST_CAN

        harness.cluster.crashes = 30
        lenient = PolicyConfig(max_attempts=1000, budget_per_fingerprint=1000)
        handle = await harness.start(ACTION, policy=lenient)
        outcome = await handle.result()
        assert outcome.outcome == "completed" and outcome.attempts == 31
        assert harness.cluster.steps.count("requeue_hold") == 30
        runs = [wf async for wf in harness.client.list_workflows(f"WorkflowId = '{handle.id}'")]
        assert len(runs) >= 3
        for run in runs:
            history = await harness.client.get_workflow_handle(
                handle.id, run_id=run.run_id
            ).fetch_history()
            assert len(history.events) < SUGGEST_CAN + 100
        # One advice per failed attempt, generations strictly increasing across runs.
        generations = [e.data["generation"] for e in harness.cluster.audit if e.type == "advice"]
        assert generations == list(range(1, 31))
        assert harness.cluster.types().count("monitoring_started") == 1


class TestReplay:
    async def test_fresh_history_replays(self, harness: Harness) -> None:
        handle = await harness.start(APPROVAL)
        await harness.wait_for_type("approval_requested")
        await handle.execute_update(
            JobRecoveryWorkflow.decide_advice,
            ApprovalDecision(generation=1, approve=True, actor="a"),
        )
        await handle.result()
        history = await handle.fetch_history()
        replayer = Replayer(workflows=[JobRecoveryWorkflow], data_converter=pydantic_data_converter)
        await replayer.replay_workflow(history)

    async def test_recorded_histories_replay(self) -> None:
        """Histories recorded from earlier versions must keep replaying (see tests/replay)."""
        files = sorted(HISTORIES.glob("*.json"))
        assert files, f"no recorded histories in {HISTORIES}"
        replayer = Replayer(workflows=[JobRecoveryWorkflow], data_converter=pydantic_data_converter)
        from temporalio.client import WorkflowHistory

        for path in files:
            history = WorkflowHistory.from_json(path.stem, path.read_text())
            await replayer.replay_workflow(history)
