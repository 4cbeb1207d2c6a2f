"""Shared by the API tests and the Temporal UI test (no tests here): a scriptable cluster and a
real JobRecoveryWorkflow worker on the real Temporal dev server.

The workflow, its `record_audit` activity and the audit store are the real ones; only the cluster
side (watch, attribute, scheduler steps, verify) is scripted, under the real activity names on
the test's own `slurm.<cluster>` queue. Each job's watch plays `started`, `progress`, then waits
for the test to `push` what happens next: "crash", "complete" or "gone".
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from resurgo.activities.audit import AuditActivities
from resurgo.audit.store import AuditStore
from resurgo.contracts import (
    ActionRequest,
    ActionResult,
    Anomaly,
    AnomalyKind,
    AttributeRequest,
    Attribution,
    Category,
    ClusterGates,
    Directive,
    JobKey,
    JobObservation,
    LogLine,
    PolicyConfig,
    Reconciliation,
    RecoveryInput,
    RecoveryOutcome,
    VerifyRequest,
    WatchRequest,
    WatchResult,
    controller_task_queue,
)
from resurgo.workflows import search_attributes as sa
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

SUBMIT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def observation(job_id: int, state: str, restarts: int) -> JobObservation:
    nodes = ["node1", "node2"] if restarts == 0 else ["node3", "node4"]
    return JobObservation(job_id=job_id, state=state, restarts=restarts, node_list=nodes,
                          exc_node_list=[] if restarts == 0 else ["node2"])  # fmt: skip


# The job's own output line, as the watch would report it (user text: markup included).
ECC_LINE = LogLine(
    source="job.log", line_no=42,
    text="1: RuntimeError: CUDA error: uncorrectable ECC error encountered <script>x</script>",
)  # fmt: skip


class ScriptedCluster:
    """The cluster side of every job of one test cluster; records each scheduler step."""

    def __init__(self) -> None:
        self.steps: dict[int, list[str]] = defaultdict(list)
        self._next: dict[int, asyncio.Queue[str]] = defaultdict(asyncio.Queue)

    def push(self, job_id: int, what: str) -> None:
        self._next[job_id].put_nowait(what)

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        job_id, attempt = req.job.job_id, req.attempt
        if not req.seen_started:
            return WatchResult(outcome="started", observation=observation(job_id, "RUNNING",
                                                                          attempt))  # fmt: skip
        if not req.seen_progress:
            return WatchResult(
                outcome="progress", observation=observation(job_id, "RUNNING", attempt),
                progress={"iteration": 10 + 20 * attempt, "line_no": 1, "at": SUBMIT},  # type: ignore[arg-type]
                last_iteration=10 + 20 * attempt, resumed_from=10 if attempt else None,
            )  # fmt: skip
        queue = self._next[job_id]
        while queue.empty():
            activity.heartbeat()
            await asyncio.sleep(0.2)
        what = queue.get_nowait()
        if what == "crash":
            anomaly = Anomaly(
                kind=AnomalyKind.CRASH, attempt=attempt, detected_at=datetime.now(UTC),
                summary="rank 1 exited: uncorrectable ECC error", job_state="FAILED",
                nodes=["node1", "node2"], exit_code=1, signals=[ECC_LINE],
            )  # fmt: skip
            return WatchResult(outcome="anomaly", anomaly=anomaly, last_iteration=30,
                               observation=observation(job_id, "FAILED", attempt))  # fmt: skip
        if what == "complete":
            return WatchResult(outcome="completed",
                               observation=observation(job_id, "COMPLETED", attempt))  # fmt: skip
        return WatchResult(outcome="job_gone")

    @activity.defn(name="attribute_anomaly")
    async def attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        return Attribution(
            kind=AnomalyKind.CRASH, category=Category.HARDWARE_GPU, culprit_nodes=["node2"],
            culprit_ranks=[1], confidence=0.95, fingerprint="hardware_gpu:ecc:node2",
            summary="uncorrectable ECC error on node2 (rank 1)", evidence=[ECC_LINE],
        )  # fmt: skip

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        self.steps[req.job.job_id].append(req.step.value)
        return ActionResult(step=req.step, idempotency_key=req.idempotency_key, outcome="applied",
                            detail="scripted")  # fmt: skip

    @activity.defn(name="verify_advice")
    async def verify_advice(self, req: VerifyRequest) -> Reconciliation:
        return Reconciliation(
            status="converged", reason="desired_state_observed",
            observation=observation(req.job.job_id, "PENDING", req.advice.attempt + 1),
        )  # fmt: skip

    def activities(self) -> list[Any]:
        return [self.watch_attempt, self.attribute_anomaly, self.scheduler_action,
                self.verify_advice]  # fmt: skip


class JobStarter:
    """Starts job workflows the way discovery does (same id, search attributes, summary)."""

    def __init__(self, client: Client, cluster: str, queue: str) -> None:
        self.client = client
        self.cluster = cluster
        self.queue = queue

    async def start(
        self, job_id: int, directive: Directive, *, ack: bool = True, user: str = "alice",
        partition: str = "gpu", name: str = "llama-7b",
    ) -> WorkflowHandle[JobRecoveryWorkflow, RecoveryOutcome]:  # fmt: skip
        inp = RecoveryInput(
            job=JobKey(cluster=self.cluster, job_id=job_id, submit_time=SUBMIT),
            directive=directive, policy=PolicyConfig(),
            gates=ClusterGates(acknowledge_scheduler_actions=ack),
            job_name=name, user=user, partition=partition,
        )  # fmt: skip
        mode = directive.mode.value
        return await self.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=inp.job.workflow_id(), task_queue=self.queue,
            search_attributes=TypedSearchAttributes([
                SearchAttributePair(sa.CLUSTER, self.cluster),
                SearchAttributePair(sa.SLURM_JOB_ID, str(job_id)),
                SearchAttributePair(sa.USER, user),
                SearchAttributePair(sa.PARTITION, partition),
                SearchAttributePair(sa.MODE, mode),
            ]),
            static_summary=f"{inp.job.label()} {name} ({mode})",
        )  # fmt: skip


@asynccontextmanager
async def recovery_workers(
    client: Client, store: AuditStore, cluster: str | None = None
) -> AsyncIterator[tuple[JobStarter, ScriptedCluster]]:
    """The real workflow + real audit activity on a private queue, and a scripted cluster."""
    name = cluster or "api" + uuid.uuid4().hex[:8]
    queue = f"test-{name}"
    scripted = ScriptedCluster()
    core = Worker(client, task_queue=queue, workflows=[JobRecoveryWorkflow],
                  activities=[AuditActivities(store).record_audit])  # fmt: skip
    side = Worker(client, task_queue=controller_task_queue(name),
                  activities=scripted.activities())  # fmt: skip
    async with core, side:
        yield JobStarter(client, name, queue), scripted


@asynccontextmanager
async def serve_in_loop(app: Any) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on a free loopback port, inside the running event loop (so it
    can share the test's Temporal client); yields the base URL."""
    import uvicorn

    from resurgo.api.server import free_port

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started or task.done():
            break
        await asyncio.sleep(0.05)
    if not server.started:
        task.cancel()
        raise RuntimeError(f"uvicorn did not start on port {port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)


async def terminate_running(client: Client, cluster: str) -> None:
    """End every workflow of the test cluster still listed as running.

    Visibility lags the history: a workflow that completed a moment ago can still be listed as
    running, and terminating it then answers NOT_FOUND, which is what this teardown wants anyway.
    """
    query = f'ResurgoCluster = "{cluster}" AND ExecutionStatus = "Running"'
    async for e in client.list_workflows(query):
        try:
            await client.get_workflow_handle(e.id).terminate("test over")
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
