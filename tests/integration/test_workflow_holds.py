"""Holds the workflow started are never left behind: a failed requeue_hold fails open, an audit
store outage during a hold does not delay the release (and loses no event), and a long wait for
a missing controller rolls the history over instead of growing it without bound.

Real Temporal dev servers, scripted cluster activities (the harness of test_workflow.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from resurgo.contracts import (
    ActionRequest,
    ActionResult,
    AuditEvent,
    ClusterGates,
    JobKey,
    PolicyConfig,
    RecoveryInput,
)
from resurgo.devstack.devserver import temporal_binary
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from resurgo.workflows.search_attributes import ALL_KEYS
from tests.integration.test_workflow import ACTION, NOW, FakeCluster, Harness, obs

pytestmark = pytest.mark.timeout(300)


class HoldFailsAfterHolding(FakeCluster):
    """requeue_hold holds the job, then fails for good (the job stayed COMPLETING past the
    wait); the release step reports what Slurm shows: Restarts=1."""

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        self.steps.append(req.step.value)
        if req.step.value == "requeue_hold":
            raise ApplicationError("requeuehold of job 7 left it COMPLETING Restarts=1",
                                   type="PreconditionFailed", non_retryable=True)  # fmt: skip
        return ActionResult(step=req.step, idempotency_key=req.idempotency_key,
                            outcome="applied", observation=obs("PENDING", 1))  # fmt: skip


class StoreDownDuringHold(FakeCluster):
    """The audit store refuses every write from the hold until the release has been done."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.refused = 0

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        if req.step.value == "requeue_hold":
            self.down = True
        result = await super().scheduler_action(req)
        if req.step.value == "release":
            self.down = False
        return result

    @activity.defn(name="record_audit")
    async def record_audit(self, events: list[AuditEvent]) -> int:
        if self.down:
            self.refused += 1
            raise RuntimeError("audit store unavailable")
        return await super().record_audit(events)


async def start(h: Harness, **extra: float) -> object:
    inp = RecoveryInput(
        job=JobKey(cluster=h.name, job_id=7, submit_time=NOW), directive=ACTION,
        policy=PolicyConfig(), gates=ClusterGates(acknowledge_scheduler_actions=True), **extra,
    )  # fmt: skip
    return await h.client.start_workflow(
        JobRecoveryWorkflow.run, inp, id=inp.job.workflow_id(), task_queue=h.queue
    )


async def test_a_failed_requeue_hold_is_released_fail_open(
    temporal_env: WorkflowEnvironment,
) -> None:
    h = Harness(temporal_env.client, HoldFailsAfterHolding())
    async with h.worker(), h.controller():
        handle = await start(h)
        outcome = await handle.result()  # type: ignore[attr-defined]
    # The hold may have happened before the failure: released, and the next attempt followed.
    assert h.cluster.steps == ["requeue_hold", "release"]
    assert outcome.outcome == "completed" and outcome.attempts == 2
    assert any("fail-open" in e.summary for e in h.cluster.audit if e.type == "action")


async def test_an_audit_outage_during_a_hold_does_not_keep_the_job_held(
    temporal_env: WorkflowEnvironment,
) -> None:
    cluster = StoreDownDuringHold()
    h = Harness(temporal_env.client, cluster)
    async with h.worker(), h.controller():
        handle = await start(h, hold_timeout_seconds=20)
        outcome = await asyncio.wait_for(handle.result(), 120)  # type: ignore[attr-defined]
    assert cluster.steps == ["requeue_hold", "exclude_nodes", "release"]
    assert cluster.refused > 0 and outcome.outcome == "completed"
    # Nothing the store refused is lost, nothing is written twice.
    actions = [e.data["step"] for e in cluster.audit if e.type == "action"]
    assert actions == ["requeue_hold", "exclude_nodes", "release"]
    assert len({e.event_id for e in cluster.audit}) == len(cluster.audit)


@pytest.fixture
async def small_history_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server that suggests continue-as-new after 40 events, so a long wait shows."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[
            "--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=true",
            "--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=40",
        ],
        dev_server_startup_timeout=None,
    )  # fmt: skip
    try:
        yield env
    finally:
        await env.shutdown()


async def test_waiting_for_a_missing_controller_rolls_the_history_over(
    small_history_env: WorkflowEnvironment,
) -> None:
    h = Harness(small_history_env.client, FakeCluster())
    async with h.worker():
        handle = await start(h, controller_timeout_seconds=1)
        query = f"WorkflowId = '{handle.id}'"  # type: ignore[attr-defined]

        async def runs() -> int:
            return len([wf async for wf in h.client.list_workflows(query)])

        for _ in range(120):
            if await runs() >= 3:
                break
            await asyncio.sleep(1)
        assert await runs() >= 3, "the wait for a controller never continued-as-new"
        assert h.cluster.steps == []
        async with h.controller():
            outcome = await asyncio.wait_for(handle.result(), 60)  # type: ignore[attr-defined]
    assert outcome.outcome == "completed"
    assert h.cluster.steps == ["requeue_hold", "exclude_nodes", "release"]
