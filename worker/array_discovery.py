"""Discovery of job arrays (and of jobs it leaves alone), mixed into `Discovery`.

Every task of an opted-in array that starts gets a JobRecoveryWorkflow of its own, named
`<array job id>_<task id>`; the tasks that never started are one row of `squeue --json` and
never a workflow each. Each array gets one ArrayCoordinatorWorkflow, started before its first
task's workflow, so that a task's failure report always finds it. An opted-in job discovery
leaves alone (an array read from text output, where tasks cannot be told apart safely) gets
one `job_skipped` audit event that says why.
"""

from __future__ import annotations

import contextlib
import logging

from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from resurgo.array_models import ArrayInput, ArrayKey
from resurgo.contracts import (
    CORE_TASK_QUEUE,
    TERMINAL_STATES,
    AuditEvent,
    AuditEventType,
    JobKey,
    RecoveryInput,
)
from resurgo.slurm.parsers import DiscoveredJob
from resurgo.workflows import search_attributes as sa
from resurgo.workflows.array_coordinator import ArrayCoordinatorWorkflow
from resurgo.workflows.job_notice import JobNoticeWorkflow

log = logging.getLogger("resurgo.discovery")

# An array's coordinator is started again (a no-op while it runs) at most this often.
COORDINATOR_RECHECK = 300.0


def job_key(cluster: str, job: DiscoveredJob) -> JobKey:
    """The job's identity; a task of an array is `<array job id>_<task id>` (its own Slurm job
    id kept for the scheduler steps)."""
    if job.submit_time is None:
        raise ValueError(f"job {job.job_id} has no submit time")
    task = job.array_task_id if job.array_job_id is not None else None
    return JobKey(
        cluster=cluster, job_id=job.job_id, submit_time=job.submit_time,
        array_job_id=job.array_job_id if task is not None else None, array_task_id=task,
    )  # fmt: skip


def array_input(inp: RecoveryInput, job: DiscoveredJob) -> ArrayInput | None:
    """The coordinator's input for the array a (task or pending) row belongs to."""
    if job.array_job_id is None or job.submit_time is None or inp.directive is None:
        return None
    return ArrayInput(
        array=ArrayKey(cluster=inp.job.cluster, array_job_id=job.array_job_id,
                       submit_time=job.submit_time),
        policy=inp.policy, gates=inp.gates, mode=inp.directive.mode, partition=inp.partition,
        user=inp.user, job_name=inp.job_name,
    )  # fmt: skip


class ArrayDiscovery:
    """What discovery does with array rows and jobs it leaves alone (mixed into Discovery)."""

    client: Client
    cluster: str
    known: dict[str, float | None]

    async def _array_row(self, job: DiscoveredJob, inp: RecoveryInput, clock: float) -> bool:
        """Start the array's coordinator; True when this row gets a workflow of its own: a task
        that started. The tasks that never started are one row, and never a workflow each."""
        coordinator = array_input(inp, job)
        if coordinator is not None and job.state not in TERMINAL_STATES:
            await self._start_coordinator(coordinator, clock)
        # A task's own PENDING row: requeued (its workflow follows it) or split off unstarted.
        return job.array_task_id is not None and job.state != "PENDING"

    async def _start_coordinator(self, inp: ArrayInput, clock: float) -> None:
        wf_id = inp.array.workflow_id()
        recheck = self.known.get(wf_id, 0.0)
        if recheck is None or recheck > clock:
            return
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self.client.start_workflow(
                ArrayCoordinatorWorkflow.run,
                inp,
                id=wf_id,
                task_queue=CORE_TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # A finished coordinator's array is done; the id may come back with a reused id.
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(sa.CLUSTER, inp.array.cluster),
                        SearchAttributePair(sa.SLURM_JOB_ID, str(inp.array.array_job_id)),
                        SearchAttributePair(sa.USER, inp.user or "-"),
                        SearchAttributePair(sa.PARTITION, inp.partition or "-"),
                        SearchAttributePair(sa.MODE, inp.mode.value),
                    ]
                ),
                static_summary=f"array {inp.array.label()} {inp.job_name} ({inp.mode.value})"[:200],
            )
        self.known[wf_id] = clock + COORDINATOR_RECHECK

    async def _skip(self, job: DiscoveredJob, inp: RecoveryInput, why: str) -> None:
        """An opted-in job discovery leaves alone: one `job_skipped` audit event says why."""
        assert job.submit_time is not None
        ref = inp.job.slurm_ref()
        wf_id = f"resurgo:{self.cluster}:notice:{ref}:{int(job.submit_time.timestamp())}"
        if wf_id in self.known:
            return
        event = AuditEvent(
            event_id=wf_id, cluster=self.cluster, job_id=job.job_id,
            workflow_id=wf_id, type=AuditEventType.JOB_SKIPPED, producer="discovery",
            summary=why[:2000], data={"reason": why, "job_id": job.job_id, "user": job.user},
        )  # fmt: skip
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self.client.start_workflow(
                JobNoticeWorkflow.run, event, id=wf_id, task_queue=CORE_TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(
                    [SearchAttributePair(sa.CLUSTER, self.cluster),
                     SearchAttributePair(sa.SLURM_JOB_ID, ref)]
                ),
            )  # fmt: skip
        log.info("discovery on %s: job %s skipped: %s", self.cluster, ref, why)
        self.known[wf_id] = None
