"""A heterogeneous job's workflow on the real Temporal dev server (scripted cluster activities):
its attempt_started records each component's own job id and nodes behind a patch, and the
histories of workflows that ran before that change (no patch marker) replay with today's code
(issue 16)."""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from resurgo.contracts import (
    ClusterGates,
    JobKey,
    JobObservation,
    PolicyConfig,
    RecoveryInput,
    WatchRequest,
    WatchResult,
    controller_task_queue,
)
from resurgo.workflows import patches
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from tests.integration.test_workflow import ACTION, HISTORIES, NOW, FakeCluster, Harness
from tests.replay.hetjob_variants import BeforeComponents

RECORDED = HISTORIES / "hetjob_components_v11.json"


def het_obs(state: str, restarts: int = 0) -> JobObservation:
    """Job 7 = components 7+0 (job 7, node1) and 7+1 (job 8, node2), as whole_job makes it."""
    return JobObservation(
        job_id=7, state=state, restarts=restarts, node_list=["node1", "node2"], num_nodes=2,
        het_nodes=[["node1"], ["node2"]], het_job_ids=[7, 8],
    )  # fmt: skip


class HetJobCluster(FakeCluster):
    """FakeCluster's script (started, progress, a crash on attempt 0, completion) for a hetjob."""

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        result = await super().watch_attempt(req)
        if result.observation is None:
            return result
        state, restarts = result.observation.state, result.observation.restarts
        return result.model_copy(update={"observation": het_obs(state, restarts)})


async def run_hetjob(
    env: WorkflowEnvironment, workflow: Any, het_job_ids: list[int]
) -> tuple[HetJobCluster, Any]:
    """The scripted hetjob under `workflow`; `het_job_ids`: what discovery passed (none before
    this change)."""
    cluster = HetJobCluster()
    h = Harness(env.client, cluster)
    worker = Worker(env.client, task_queue=h.queue, workflows=[workflow],
                    activities=[cluster.record_audit])  # fmt: skip
    controller = Worker(
        env.client, task_queue=controller_task_queue(h.name),
        activities=[cluster.watch_attempt, cluster.attribute_anomaly, cluster.scheduler_action,
                    cluster.verify_advice],
    )  # fmt: skip
    async with worker, controller:
        inp = RecoveryInput(job=JobKey(cluster=h.name, job_id=7, submit_time=NOW),
                            directive=ACTION, policy=PolicyConfig(), het_job_ids=het_job_ids,
                            gates=ClusterGates(acknowledge_scheduler_actions=True))  # fmt: skip
        handle = await env.client.start_workflow(
            workflow.run, inp, id=inp.job.workflow_id(), task_queue=h.queue
        )
        outcome = await handle.result()
        assert outcome.outcome == "completed"
        return cluster, await handle.fetch_history()


def replayer() -> Replayer:
    return Replayer(workflows=[JobRecoveryWorkflow], data_converter=pydantic_data_converter)


def patch_ids(history: WorkflowHistory) -> set[str]:
    """The `workflow.patched` ids a history's markers recorded."""
    found: set[str] = set()
    for event in history.events:
        if event.HasField("marker_recorded_event_attributes"):
            for payload in event.marker_recorded_event_attributes.details["patch-data"].payloads:
                found.add(json.loads(payload.data)["id"])
    return found


def started(cluster: FakeCluster) -> list[dict[str, Any]]:
    return [e.data for e in cluster.audit if e.type == "attempt_started"]


async def test_a_hetjob_records_its_components_and_replays(
    temporal_env: WorkflowEnvironment,
) -> None:
    cluster, history = await run_hetjob(temporal_env, JobRecoveryWorkflow, [7, 8])
    (begun,) = [e.data for e in cluster.audit if e.type == "monitoring_started"]
    assert begun["components"] == [
        {"component": "7+0", "job_id": 7},
        {"component": "7+1", "job_id": 8},
    ]
    (first, second) = started(cluster)
    assert (
        first["components"]
        == second["components"]
        == [
            {"component": "7+0", "job_id": 7, "nodes": ["node1"]},
            {"component": "7+1", "job_id": 8, "nodes": ["node2"]},
        ]
    )
    summaries = [e.summary for e in cluster.audit if e.type == "attempt_started"]
    assert summaries[0] == "attempt 0 running on node1,node2 (7+0: node1; 7+1: node2)"
    assert patches.HETJOB_COMPONENTS_RECORDED in patch_ids(history)
    assert patches.HETJOB_COMPONENTS_AT_START in patch_ids(history)
    await replayer().replay_workflow(history)


async def test_a_hetjob_history_from_before_the_change_replays(
    temporal_env: WorkflowEnvironment,
) -> None:
    cluster, history = await run_hetjob(temporal_env, BeforeComponents, [])
    assert all("components" not in e.data for e in cluster.audit)
    assert patches.HETJOB_COMPONENTS_RECORDED not in patch_ids(history)
    assert patches.HETJOB_COMPONENTS_AT_START not in patch_ids(history)
    assert patches.ENDED_EVENT in patch_ids(history)  # markers are read: the check can fail
    await replayer().replay_workflow(history)


async def test_the_recorded_hetjob_history_replays() -> None:
    """Recorded with both patches (tests/replay/record.py's way); also in the replay suite."""
    history = WorkflowHistory.from_json(RECORDED.stem, RECORDED.read_text())
    assert patches.HETJOB_COMPONENTS_RECORDED in patch_ids(history)
    assert patches.HETJOB_COMPONENTS_AT_START in patch_ids(history)
    await replayer().replay_workflow(history)
