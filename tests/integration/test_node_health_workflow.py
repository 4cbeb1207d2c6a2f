"""NodeHealthWorkflow on the real Temporal dev server with the real audit activity and store; the
cluster side (drain, look, check, return) is scripted under the real activity names, so the
paths the shared Slurm cluster cannot cheaply show are covered: approval (approve, reject,
expire), a refused drain, the configured time, Slurm's own repair sign, an outside resume."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from resurgo.activities.audit import AuditActivities
from resurgo.audit.store import AuditStore, StoredAuditEvent
from resurgo.contracts import ApprovalDecision, Mode, controller_task_queue
from resurgo.nodes.lemon import LemonAdvice
from resurgo.nodes.models import (
    HealthCheckRequest,
    HealthCheckResult,
    HealthCheckSpec,
    NodeDrainRequest,
    NodeHealthInput,
    NodeLook,
    NodeStepResult,
    RepairMark,
    ReturnRequest,
    node_workflow_id,
)
from resurgo.workflows.node_client import decide_drain, mark_repaired
from resurgo.workflows.node_health import NodeHealthWorkflow

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


class ScriptedNode:
    """One node's Slurm side: what each step was asked, and scripted answers."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.refuse_drain: str | None = None
        self.look = NodeLook(node="n1", state="IDLE+DRAIN")
        self.verdicts: list[bool] = []
        self.returns: list[ReturnRequest] = []

    @activity.defn(name="node_drain")
    async def node_drain(self, req: NodeDrainRequest) -> NodeStepResult:
        self.calls.append("drain")
        if self.refuse_drain:
            raise ApplicationError(self.refuse_drain, type="PreconditionFailed",
                                   non_retryable=True)  # fmt: skip
        return NodeStepResult(outcome="applied", detail=req.reason)

    @activity.defn(name="node_look")
    async def node_look(self, node: str) -> NodeLook:
        self.calls.append("look")
        return self.look

    @activity.defn(name="node_health_check")
    async def node_health_check(self, req: HealthCheckRequest) -> HealthCheckResult:
        self.calls.append(f"check{req.round}")
        passed = self.verdicts.pop(0)
        return HealthCheckResult(job_id=100 + req.round, passed=passed, state="COMPLETED",
                                 summary="ok" if passed else "FAIL gpu 3")  # fmt: skip

    @activity.defn(name="node_return")
    async def node_return(self, req: ReturnRequest) -> NodeStepResult:
        self.calls.append("return")
        self.returns.append(req)
        return NodeStepResult(outcome="applied", detail="resumed" if req.passed else "drained")


def ours(cluster: str) -> NodeLook:
    """The node as our drain left it: DRAIN, with the workflow's key in the Reason."""
    reason = f"resurgo {node_workflow_id(cluster, 'n1')} lemon: ..."
    return NodeLook(node="n1", state="IDLE+DRAIN", reason=reason)


@asynccontextmanager
async def running(
    env: WorkflowEnvironment, store: AuditStore, node: ScriptedNode
) -> AsyncIterator[str]:
    cluster = "c" + uuid.uuid4().hex[:8]
    core = f"core-{cluster}"
    node.look = ours(cluster)
    workers = [
        Worker(env.client, task_queue=core, workflows=[NodeHealthWorkflow],
               activities=[AuditActivities(store).record_audit]),
        Worker(env.client, task_queue=controller_task_queue(cluster),
               activities=[node.node_drain, node.node_look, node.node_health_check,
                           node.node_return]),
    ]  # fmt: skip
    async with workers[0], workers[1]:
        yield cluster


def start_input(cluster: str, at: datetime = NOW, **fields: Any) -> NodeHealthInput:
    """A run per advice: its events are keyed by the advice's last failure time `at`."""
    reason = "resurgo lemon: n1 blamed for failures of 3 jobs"
    advice = LemonAdvice(cluster=cluster, node="n1", jobs=[1, 2, 3], failures=3, reason=reason,
                         window_seconds=60, first_at=at, last_at=at)  # fmt: skip
    return NodeHealthInput(cluster=cluster, node="n1", advice=advice, poll_seconds=1,
                           **{"mode": Mode.ACTION,
                              "check": HealthCheckSpec(command=["true"]), **fields})  # fmt: skip


async def start(client: Client, inp: NodeHealthInput) -> Any:
    return await client.start_workflow(NodeHealthWorkflow.run, inp, id=inp.workflow_id(),
                                       task_queue=f"core-{inp.cluster}")  # fmt: skip


def types(store: AuditStore, cluster: str) -> list[str]:
    return [e.type for e in store.iter_all(cluster=cluster)]


async def phase(handle: Any, wanted: str) -> None:
    for _ in range(200):
        if (await handle.query(NodeHealthWorkflow.status)).phase == wanted:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {wanted}")


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    return AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")


async def test_approved_drain_then_failed_then_passed_validation(
    temporal_env: WorkflowEnvironment, store: AuditStore
) -> None:
    node = ScriptedNode()
    node.verdicts = [False, True]
    client = temporal_env.client
    async with running(temporal_env, store, node) as cluster:
        handle = await start(client, start_input(cluster, require_approval=True))
        await phase(handle, "awaiting_approval")
        assert "drain" not in node.calls
        with pytest.raises(WorkflowUpdateFailedError):
            await mark_repaired(client, cluster, "n1", RepairMark(actor="ann"))
        await decide_drain(client, cluster, "n1",
                           ApprovalDecision(generation=0, approve=True, actor="ann"))  # fmt: skip
        await phase(handle, "drained")
        await mark_repaired(client, cluster, "n1", RepairMark(actor="ann", note="reseated"))
        for _ in range(200):  # the first check fails: drained again, waiting for a repair
            if node.returns:
                break
            await asyncio.sleep(0.05)
        await phase(handle, "drained")
        assert node.returns[0].passed is False and "FAIL gpu 3" in node.returns[0].reason
        await mark_repaired(client, cluster, "n1", RepairMark(actor="ann", note="replaced"))
        assert await handle.result() == "resumed"
    assert [c for c in node.calls if c != "look"] == [
        "drain", "check1", "return", "check2", "return",
    ]  # fmt: skip
    assert types(store, cluster) == [
        "node_drain_advised", "approval_requested", "approval_approved", "node_drained",
        "node_validation", "node_validation", "node_drained", "node_validation",
        "node_validation", "node_resumed",
    ]  # fmt: skip


async def test_rejected_or_refused_drains_leave_the_node_alone(
    temporal_env: WorkflowEnvironment, store: AuditStore
) -> None:
    node = ScriptedNode()
    client = temporal_env.client
    async with running(temporal_env, store, node) as cluster:
        handle = await start(client, start_input(cluster, require_approval=True))
        await phase(handle, "awaiting_approval")
        await decide_drain(client, cluster, "n1",
                           ApprovalDecision(generation=0, approve=False, actor="ann"))  # fmt: skip
        assert await handle.result() == "not_approved"
        node.refuse_drain = "drain of n1 refused by circuit breaker: ..."
        handle = await start(client, start_input(cluster, NOW.replace(hour=13)))
        assert await handle.result() == "drain_refused"
    assert node.calls == ["drain"]
    refused = [e for e in store.iter_all(cluster=cluster) if e.type == "would_act"]
    assert "circuit breaker" in refused[-1].data["blocked_by"]


async def test_observe_mode_and_an_unanswered_approval_do_nothing(
    temporal_env: WorkflowEnvironment, store: AuditStore
) -> None:
    node = ScriptedNode()
    client = temporal_env.client
    async with running(temporal_env, store, node) as cluster:
        observed = await start(client, start_input(cluster, mode=Mode.OBSERVE))
        assert await observed.result() == "advised"
        expired = await start(client, start_input(cluster, NOW.replace(hour=13),
                                                  require_approval=True,
                                                  approval_timeout_seconds=1))  # fmt: skip
        assert await expired.result() == "not_approved"
    assert node.calls == []
    assert "approval_expired" in types(store, cluster)


async def test_repair_seen_in_slurm_or_after_the_configured_time(
    temporal_env: WorkflowEnvironment, store: AuditStore
) -> None:
    node = ScriptedNode()
    node.verdicts = [True, True]
    client = temporal_env.client
    async with running(temporal_env, store, node) as cluster:
        handle = await start(client, start_input(cluster))
        await phase(handle, "drained")
        node.look = NodeLook(node="n1", state="IDLE+DRAIN", reason="repaired: new PSU")
        assert await handle.result() == "resumed"
        node.look = ours(cluster)
        later = NOW.replace(hour=13)
        timed = await start(client, start_input(cluster, later, validate_after_seconds=2))
        assert await timed.result() == "resumed"
    marks: list[StoredAuditEvent] = [
        e for e in store.iter_all(cluster=cluster)
        if e.type == "node_validation" and e.data.get("phase") == "started"
    ]  # fmt: skip
    assert marks[0].data["actor"] == "slurm" and "new PSU" in marks[0].data["note"]
    assert marks[1].data["actor"] == "resurgo" and "validate_after" in marks[1].data["note"]


async def test_a_node_resumed_outside_resurgo_ends_the_workflow_unvalidated(
    temporal_env: WorkflowEnvironment, store: AuditStore
) -> None:
    node = ScriptedNode()
    async with running(temporal_env, store, node) as cluster:
        handle = await start(temporal_env.client, start_input(cluster))
        await phase(handle, "drained")
        node.look = NodeLook(node="n1", state="IDLE", reason="")
        assert await handle.result() == "resumed_externally"
    assert not [c for c in node.calls if c.startswith("check")]
    last = list(store.iter_all(cluster=cluster))[-1]
    assert last.type == "node_resumed" and last.data["external"] is True


async def test_a_drain_made_for_a_job_is_adopted_then_validated(
    temporal_env: WorkflowEnvironment, store: AuditStore
) -> None:
    node = ScriptedNode()
    node.verdicts = [True]
    client = temporal_env.client
    async with running(temporal_env, store, node) as cluster:
        # Approval is for new drains: adopting one already made waits for nobody.
        handle = await start(client, start_input(cluster, adopt=True, require_approval=True))
        await phase(handle, "drained")
        await mark_repaired(client, cluster, "n1", RepairMark(actor="ann"))
        assert await handle.result() == "resumed"
    assert [c for c in node.calls if c != "look"] == ["drain", "check1", "return"]
    kinds = types(store, cluster)
    assert kinds[0] == "node_drained" and "node_drain_advised" not in kinds
    assert next(e.data.get("adopted") for e in store.iter_all(cluster=cluster)) is True
