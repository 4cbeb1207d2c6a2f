"""The job-array routes: `GET /v1/arrays/{cluster}/{array_id}` (the array-level view: tasks by
state, failures by fingerprint, nodes implicated, findings, mode) and
`POST /v1/arrays/{cluster}/{array_id}/mode` (operator: the coordinator's `set_mode` update).

A live array is read from its coordinator's `status` query (`workflows/array_coordinator.py`);
a finished one (or any array while Temporal is down) is folded from the audit store: the
coordinator's own events (`array_finding`, `action`, `mode_changed`, `monitoring_ended`) and
each task's (`<array>_<task>` workflows: their attributions and last events). Findings always
come from the audit store, where the coordinator records each one once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path
from pydantic import Field
from temporalio.client import (
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from resurgo.api.auth import Principal
from resurgo.api.core import (
    QUERY_TIMEOUT,
    ApiProblem,
    GatewayCore,
    attrs_of,
    is_running,
    temporal_down,
)
from resurgo.api.errors import documented
from resurgo.api.job_refs import parse_workflow_id
from resurgo.api.models import ModeRequest, Out
from resurgo.api.visibility import shown_to
from resurgo.array_models import ArrayStatus, array_workflow_id
from resurgo.audit.store import MAX_JOBS_LIMIT, JobSummary, StoredAuditEvent
from resurgo.contracts import AuditEventType, ModeChange
from resurgo.workflows.array_coordinator import ArrayCoordinatorWorkflow

__all__ = ["ArrayDetail", "ArrayReads", "arrays_router"]

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,127}$"
MAX_ARRAY_ID = 2**63 - 1
# A task list longer than this is cut (the counts by state still cover every task).
MAX_TASKS_LISTED = 1000
UPDATE_TIMEOUT = timedelta(seconds=30)

Cluster = Annotated[str, Path(pattern=NAME, max_length=128, description="cluster name")]
# A string checked by pattern: an int path would read `1_2` as 12 (Python's digit grouping).
ArrayId = Annotated[
    str, Path(pattern=r"^[0-9]{1,19}$", max_length=19, description="the array's Slurm job id")
]


def array_id_of(text: str) -> int:
    value = int(text)
    if value > MAX_ARRAY_ID:
        raise ApiProblem(422, f"an array id is at most {MAX_ARRAY_ID}")
    return value


class ArrayTaskItem(Out):
    task_id: int
    job_id: int = Field(description="Slurm's own id of the task")
    name: str = Field(description="`<array id>_<task id>`")
    workflow_id: str
    state: str | None = Field(description="workflow phase (live) or outcome / last event")
    live: bool


class ArrayFindingView(Out):
    at: datetime
    finding: str = Field(description="systematic | node | node_over_cap")
    summary: str
    fingerprint: str | None = None
    node: str | None = None
    tasks: list[int] = Field(default_factory=list)


class ArrayDetail(Out):
    """One job array as a whole. `tasks_by_state` counts Slurm's states while the coordinator
    runs (as its last look at the array saw them), else Resurgo's view of each task."""

    cluster: str
    array_job_id: int
    workflow_id: str
    live: bool = Field(description="its coordinator is running")
    source: Literal["temporal", "audit"]
    degraded: bool = Field(default=False, description="Temporal unreachable: from the store")
    mode: str | None
    user: str | None = None
    tasks_by_state: dict[str, int]
    failures_by_fingerprint: dict[str, list[int]]
    nodes_implicated: dict[str, list[int]]
    held: bool
    excluded_nodes: list[str]
    findings: list[ArrayFindingView]
    tasks: list[ArrayTaskItem]
    tasks_truncated: bool = False
    warnings: list[str] = Field(default_factory=list)


class ArrayModeResponse(Out):
    array: ArrayDetail
    change: ModeChange


def _int_list(value: Any) -> list[int]:
    return sorted({v for v in value if isinstance(v, int)}) if isinstance(value, list) else []


def fold_array(
    cluster: str,
    array_id: int,
    coordinator: list[StoredAuditEvent],
    tasks: list[ArrayTaskItem],
    attributions: dict[int, list[StoredAuditEvent]],
) -> ArrayDetail:
    """The array from the audit store alone (pure): the coordinator's events and the tasks'."""
    mode: str | None = None
    user: str | None = None
    held = False
    excluded: list[str] = []
    ended_counts: dict[str, int] | None = None
    findings: list[ArrayFindingView] = []
    for e in coordinator:
        d = e.data
        if e.type == AuditEventType.MONITORING_STARTED:
            mode = d.get("mode") if isinstance(d.get("mode"), str) else mode
            user = d.get("user") if isinstance(d.get("user"), str) and d.get("user") else user
        elif e.type == AuditEventType.MODE_CHANGED and isinstance(d.get("mode"), str):
            mode = d["mode"]
        elif e.type == AuditEventType.ACTION and d.get("outcome") in (
            "applied",
            "already_satisfied",
        ):
            held = held or d.get("step") == "hold_pending"
            if d.get("step") == "exclude_pending":
                excluded = [n for n in d.get("nodes", []) if isinstance(n, str)] or excluded
        elif e.type == AuditEventType.MONITORING_ENDED:
            counts = d.get("tasks_by_state")
            if isinstance(counts, dict):
                ended_counts = {str(k): v for k, v in counts.items() if isinstance(v, int)}
            held = held or d.get("held") is True
            nodes = d.get("excluded_nodes")
            if isinstance(nodes, list):
                excluded = [n for n in nodes if isinstance(n, str)] or excluded
        elif e.type == AuditEventType.ARRAY_FINDING:
            findings.append(_finding(e))
    by_fp: dict[str, set[int]] = {}
    by_node: dict[str, set[int]] = {}
    for task_id, events in attributions.items():
        for e in events:
            fp = e.data.get("fingerprint")
            if isinstance(fp, str) and fp:
                by_fp.setdefault(fp, set()).add(task_id)
            for node in e.data.get("culprit_nodes") or []:
                if isinstance(node, str):
                    by_node.setdefault(node, set()).add(task_id)
    for f in findings:
        if f.fingerprint:
            by_fp.setdefault(f.fingerprint, set()).update(f.tasks)
        if f.node:
            by_node.setdefault(f.node, set()).update(f.tasks)
    if ended_counts is None:
        ended_counts = {}
        for t in tasks:
            key = t.state or "unknown"
            ended_counts[key] = ended_counts.get(key, 0) + 1
    return ArrayDetail(
        cluster=cluster, array_job_id=array_id, workflow_id=array_workflow_id(cluster, array_id),
        live=False, source="audit", mode=mode, user=user, tasks_by_state=ended_counts,
        failures_by_fingerprint={fp: sorted(t) for fp, t in sorted(by_fp.items())},
        nodes_implicated={n: sorted(t) for n, t in sorted(by_node.items())},
        held=held, excluded_nodes=excluded, findings=findings, tasks=tasks,
    )  # fmt: skip


def _finding(e: StoredAuditEvent) -> ArrayFindingView:
    d = e.data
    fp, node = d.get("fingerprint"), d.get("node")
    return ArrayFindingView(
        at=e.at, finding=str(d.get("finding") or "unknown"), summary=e.summary,
        fingerprint=fp if isinstance(fp, str) else None,
        node=node if isinstance(node, str) else None, tasks=_int_list(d.get("tasks")),
    )  # fmt: skip


def with_status(detail: ArrayDetail, status: ArrayStatus) -> ArrayDetail:
    """The folded view overlaid with the live coordinator's own answer."""
    return detail.model_copy(update={
        "live": True, "source": "temporal", "mode": status.mode.value,
        "tasks_by_state": dict(status.tasks_by_state),
        "failures_by_fingerprint": dict(status.failures_by_fingerprint),
        "nodes_implicated": dict(status.nodes_implicated),
        "held": status.held, "excluded_nodes": list(status.excluded_nodes),
    })  # fmt: skip


class ArrayReads:
    """The array view over the gateway's common reads (Temporal, the audit store)."""

    def __init__(self, core: GatewayCore) -> None:
        self.core = core

    def _task_summaries(self, cluster: str, array_id: int) -> list[tuple[int, JobSummary]]:
        # The newest workflow of each task (a requeued task keeps its workflow; a reused
        # array id's older runs are older summaries).
        found: dict[int, JobSummary] = {}
        for j in self.core.store.jobs(cluster, limit=MAX_JOBS_LIMIT):
            named = parse_workflow_id(j.workflow_id)
            # The cluster must match: a notice (`resurgo:<cluster>:notice:<ref>:..`) is no task.
            if named is None or named[0] != cluster or named[1].task_id is None:
                continue
            if named[1].job_id != array_id:
                continue
            task = named[1].task_id
            if task not in found or j.first_at > found[task].first_at:
                found[task] = j
        return sorted(found.items())

    def _store_reads(
        self, cluster: str, array_id: int
    ) -> tuple[list[StoredAuditEvent], list[tuple[int, JobSummary]], dict[int, list[Any]]]:
        wid = array_workflow_id(cluster, array_id)
        coordinator = list(self.core.store.iter_all(workflow_id=wid))
        summaries = self._task_summaries(cluster, array_id)
        attributions = {
            task: self.core.store.query(
                workflow_id=j.workflow_id, types=[AuditEventType.ATTRIBUTION], limit=50
            )
            for task, j in summaries[:MAX_TASKS_LISTED]
        }
        return coordinator, summaries, attributions

    async def array(self, cluster: str, array_id: int) -> ArrayDetail:
        wid = array_workflow_id(cluster, array_id)
        coordinator, summaries, attributions = await asyncio.to_thread(
            self._store_reads, cluster, array_id
        )
        warnings: list[str] = []
        degraded = False
        executions: dict[str, Any] = {}
        try:
            ids = [wid] + [j.workflow_id for _, j in summaries[:MAX_TASKS_LISTED]]
            executions = await self.core._by_ids(ids)
        except (ApiProblem, RPCError) as exc:
            if not temporal_down(exc):
                raise
            degraded = True
            warnings.append(
                "Temporal is unreachable: shown from the audit store; whether the array is still "
                "coordinated (and its live state) is unknown"
            )
        if not coordinator and not summaries and wid not in executions:
            raise ApiProblem(404, f"no array {array_id} on cluster {cluster!r} is known to Resurgo")
        tasks = [
            _task_item(task, j, executions.get(j.workflow_id))
            for task, j in summaries[:MAX_TASKS_LISTED]
        ]
        detail = fold_array(cluster, array_id, coordinator, tasks, attributions)
        detail = detail.model_copy(update={
            "degraded": degraded, "tasks_truncated": len(summaries) > MAX_TASKS_LISTED,
        })  # fmt: skip
        if is_running(executions.get(wid)):
            status, problem = await self._status(wid)
            if status is not None:
                detail = with_status(detail, status)
            else:
                detail = detail.model_copy(update={"live": True})
                warnings.append(problem)
        return detail.model_copy(update={"warnings": detail.warnings + warnings})

    async def _status(self, wid: str) -> tuple[ArrayStatus | None, str]:
        client = await self.core.temporal.get()
        handle = client.get_workflow_handle_for(ArrayCoordinatorWorkflow.run, wid)
        try:
            status = await handle.query(ArrayCoordinatorWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            return None, f"status query of {wid} failed (is a worker running?): {exc}"
        return status, ""

    async def set_mode(
        self, cluster: str, array_id: int, change: ModeChange, request_id: str | None
    ) -> ArrayModeResponse:
        wid = array_workflow_id(cluster, array_id)
        client = await self.core.temporal.get()
        handle = client.get_workflow_handle_for(ArrayCoordinatorWorkflow.run, wid)
        # update ids dedupe within a run: a fresh one unless the client gave an idempotency key.
        update_id = f"api-{request_id or uuid.uuid4().hex}"
        # Typed Any: the SDK's overloads do not resolve an async update method's result type.
        update: Any = ArrayCoordinatorWorkflow.set_mode
        try:
            updated: ArrayStatus = await handle.execute_update(
                update, change, id=update_id, rpc_timeout=UPDATE_TIMEOUT
            )
        except WorkflowUpdateFailedError as exc:
            raise ApiProblem(409, f"{cluster}/{array_id}_*: {exc.cause}") from exc
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            raise ApiProblem(
                504, "no worker took the update in time: is `resurgo worker` running?"
            ) from exc
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ApiProblem(
                    409, f"{cluster}/{array_id}_*: the array is not coordinated (ended or unknown)"
                ) from exc
            raise
        # The update's own answer wins over a status query that might race a continue-as-new.
        detail = with_status(await self.array(cluster, array_id), updated)
        return ArrayModeResponse(array=detail, change=change)


def _task_item(task: int, j: JobSummary, e: Any) -> ArrayTaskItem:
    named = parse_workflow_id(j.workflow_id)
    name = str(named[1]) if named is not None else str(j.job_id)
    state = attrs_of(e)["state"] if e is not None else None
    return ArrayTaskItem(
        task_id=task, job_id=j.job_id, name=name, workflow_id=j.workflow_id,
        state=state or j.last_type, live=is_running(e),
    )  # fmt: skip


def arrays_router(
    core: GatewayCore,
    viewer: Callable[..., Awaitable[Principal]],
    operator: Callable[..., Awaitable[Principal]],
) -> APIRouter:
    reads = ArrayReads(core)
    router = APIRouter(
        tags=["arrays"], responses=documented(400, 401, 403, 404, 409, 422, 503, 504)
    )

    @router.get("/v1/arrays/{cluster}/{array_id}")
    async def get_array(
        cluster: Cluster, array_id: ArrayId,
        who: Principal = Depends(viewer),  # noqa: B008 - FastAPI's dependency idiom
    ) -> ArrayDetail:  # fmt: skip
        """One job array as a whole: its tasks by state, failures by root-cause fingerprint,
        nodes implicated, the coordinator's findings and mode, and its tasks (each monitored
        on its own: `GET /v1/jobs/{cluster}/{array_id}_{task_id}`)."""
        detail = await reads.array(cluster, array_id_of(array_id))
        return shown_to(who, detail.user, detail)

    @router.post("/v1/arrays/{cluster}/{array_id}/mode")
    async def set_array_mode(
        cluster: Cluster, array_id: ArrayId, body: ModeRequest,
        who: Principal = Depends(operator),  # noqa: B008
        idempotency_key: Annotated[str | None, Header(
            alias="Idempotency-Key", pattern=r"^[A-Za-z0-9_.\-]{1,100}$",
            description="retrying with the same key returns the first answer",
        )] = None,
    ) -> ArrayModeResponse:  # fmt: skip
        """Switch the array's coordinator between observe and action (operator). In action,
        the advice it gave so far (hold pending tasks, exclude a node) is then carried out,
        within the cluster's gates. Each task's own mode is unchanged."""
        change = ModeChange(mode=body.mode, actor=who.name, reason=body.reason)
        return await reads.set_mode(cluster, array_id_of(array_id), change, idempotency_key)

    return router
