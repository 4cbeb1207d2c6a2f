"""The gateway's common ground: the error a request turns into, page cursors, the one Temporal
connection, and the reads every part of the gateway shares (visibility, the `status` query, the
audit store) down to locating one job.

Every workflow handle is run-less, so it follows continue-as-new.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from resurgo.api.history import job_ref
from resurgo.api.job_refs import SlurmRef, parse_workflow_id, slurm_ref
from resurgo.api.models import JobRef
from resurgo.audit.components import RecordedComponent, recorded_component
from resurgo.audit.store import MAX_JOBS_LIMIT, AuditStore, JobSummary, StoredAuditEvent
from resurgo.config import TemporalSettings
from resurgo.contracts import JobStatus, RecoveryOutcome
from resurgo.workflows import search_attributes as sa
from resurgo.workflows.client import TemporalUnavailable, connect
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

log = logging.getLogger("resurgo.api")

WORKFLOW_TYPE = "JobRecoveryWorkflow"
QUERY_TIMEOUT = timedelta(seconds=5)
LIST_TIMEOUT = timedelta(seconds=10)
CONNECT_TIMEOUT = 5.0
VISIBILITY_CHUNK = 50

JobHandle = WorkflowHandle[JobRecoveryWorkflow, RecoveryOutcome]


class ApiProblem(Exception):
    """A request that cannot be served as asked: HTTP status and a message for a person."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


@dataclass
class Located:
    ref: JobRef
    execution: WorkflowExecution | None
    live: bool
    # Temporal did not answer: found in the audit store, whether it is live is unknown.
    degraded: bool = False
    # Asked for by a hetjob component's own job id (`86`): the component, as recorded.
    component: RecordedComponent | None = None


def temporal_down(exc: Exception) -> bool:
    """Temporal cannot be reached (as opposed to refusing a request)."""
    if isinstance(exc, ApiProblem):
        return exc.status == 503
    return isinstance(exc, RPCError) and exc.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
    )


# ------------------------------------------------------------------------- helpers


def as_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def quote(value: str) -> str:
    """A visibility-query string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Cursors:
    """Opaque page cursors: JSON, base64url, with a MAC so that only cursors this API handed
    out are accepted (a forged one never reaches Temporal or the store)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def encode(self, payload: dict[str, Any]) -> str:
        raw = json.dumps(payload, separators=(",", ":")).encode()
        body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return f"{body}.{self._mac(body)}"

    def decode(self, cursor: str) -> dict[str, Any]:
        body, _, mac = cursor.partition(".")
        payload = None
        if hmac.compare_digest(mac, self._mac(body)):
            try:
                payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            except (binascii.Error, ValueError, UnicodeDecodeError):
                payload = None
        if not isinstance(payload, dict):
            raise ApiProblem(400, "invalid cursor: pass back a next_cursor value unchanged")
        return payload


def parse_job_ref(text: str | int | SlurmRef) -> SlurmRef:
    """`slurm_ref`, or the API's 422 for anything else."""
    if isinstance(text, SlurmRef):
        return text
    ref = slurm_ref(text)
    if ref is None:
        raise ApiProblem(
            422,
            "a job is named by its Slurm id: digits, <array id>_<task id> for an array task, or "
            "<hetjob id>+<component> (squeue's form; names the whole heterogeneous job)",
        )
    return ref


def _latest(executions: Iterable[WorkflowExecution]) -> WorkflowExecution | None:
    """The running run of a workflow id if any, else the most recently started one."""
    best: WorkflowExecution | None = None
    for e in executions:
        if best is None or _rank(e) > _rank(best):
            best = e
    return best


def _rank(e: WorkflowExecution) -> tuple[bool, datetime]:
    running = e.status == WorkflowExecutionStatus.RUNNING
    return running, as_utc(e.start_time) or datetime.min.replace(tzinfo=UTC)


def is_running(e: WorkflowExecution | None) -> bool:
    return e is not None and e.status == WorkflowExecutionStatus.RUNNING


def attrs_of(e: WorkflowExecution) -> dict[str, Any]:
    attrs = e.typed_search_attributes
    return {
        "cluster": attrs.get(sa.CLUSTER),
        "job_id": attrs.get(sa.SLURM_JOB_ID),
        "state": attrs.get(sa.STATE),
        "mode": attrs.get(sa.MODE),
        "attempt": attrs.get(sa.ATTEMPT),
        "category": attrs.get(sa.LAST_CATEGORY),
        "needs_approval": bool(attrs.get(sa.NEEDS_APPROVAL)),
        "user": attrs.get(sa.USER),
        "partition": attrs.get(sa.PARTITION),
    }


def ref_of(e: WorkflowExecution, job_id: int | None = None) -> JobRef | None:
    """The job `e` watches. `job_id`: Slurm's own id of an array task when the caller knows it
    (its search attribute and workflow id carry `<array>_<task>` only); else the array's id."""
    parsed = parse_workflow_id(e.id)
    attrs = attrs_of(e)
    cluster = attrs["cluster"] or (parsed[0] if parsed else None)
    raw_job = attrs["job_id"]
    if job_id is None:
        if raw_job and str(raw_job).isdigit():
            job_id = int(raw_job)
        elif parsed is not None:
            job_id = parsed[1].job_id
    if cluster is None or job_id is None:
        return None
    return job_ref(cluster, job_id, e.id)


def summary_key(j: JobSummary) -> tuple[int, str, int, str]:
    """Newest first (by when monitoring began, which never changes), then by identity: a total
    and stable order for keyset pagination."""
    first = as_utc(j.first_at)
    assert first is not None
    micros = int((first - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    return -micros, j.cluster, j.job_id, j.workflow_id


# ------------------------------------------------------------------------- the gateway


class TemporalConnection:
    """One client for the gateway's lifetime, connected on first use (and again after a
    failed connect), always with the shared pydantic data converter."""

    def __init__(self, settings: TemporalSettings, client: Client | None = None) -> None:
        self.settings = settings
        self._client = client
        self._lock = asyncio.Lock()

    async def get(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.wait_for(
                        connect(self.settings), timeout=CONNECT_TIMEOUT
                    )
                except (TemporalUnavailable, TimeoutError) as exc:
                    # The transport's error chain goes to the log, a plain sentence to callers.
                    log.warning("Temporal at %s is unreachable: %s", self.settings.address, exc)
                    raise ApiProblem(
                        503,
                        f"Temporal at {self.settings.address} is unreachable; reads of jobs the "
                        "audit store knows still answer",
                    ) from exc
        return self._client


class GatewayCore:
    """What every part of the gateway stands on: the connection, the store, the cursors, and
    the reads they share."""

    def __init__(self, temporal: TemporalConnection, store: AuditStore, cursor_key: bytes) -> None:
        self.temporal = temporal
        self.store = store
        self.cursors = Cursors(cursor_key)

    # ---- Temporal reads --------------------------------------------------------------------
    async def _visibility_page(
        self, query: str, page_size: int, token: bytes | None
    ) -> tuple[Sequence[WorkflowExecution], bytes | None]:
        client = await self.temporal.get()
        it = client.list_workflows(
            query, page_size=page_size, next_page_token=token, rpc_timeout=LIST_TIMEOUT
        )
        try:
            await it.fetch_next_page()
        except RPCError as exc:
            if token and exc.status == RPCStatusCode.INVALID_ARGUMENT:
                raise ApiProblem(400, "invalid cursor (or the filters changed)") from exc
            raise
        return it.current_page or [], it.next_page_token

    async def _visibility_all(self, query: str, limit: int) -> list[WorkflowExecution]:
        client = await self.temporal.get()
        found: list[WorkflowExecution] = []
        async for e in client.list_workflows(
            query, limit=limit, page_size=min(limit, 1000), rpc_timeout=LIST_TIMEOUT
        ):
            found.append(e)
        return found

    async def _by_ids(self, ids: Sequence[str]) -> dict[str, WorkflowExecution]:
        """The latest run of each workflow id that visibility still has."""
        runs: dict[str, list[WorkflowExecution]] = {}
        for start in range(0, len(ids), VISIBILITY_CHUNK):
            chunk = ids[start : start + VISIBILITY_CHUNK]
            query = f"WorkflowId IN ({', '.join(quote(i) for i in chunk)})"
            for run in await self._visibility_all(query, limit=10 * len(chunk)):
                runs.setdefault(run.id, []).append(run)
        return {wid: e for wid, group in runs.items() if (e := _latest(group)) is not None}

    async def _handle(self, workflow_id: str) -> JobHandle:
        client = await self.temporal.get()
        return client.get_workflow_handle_for(JobRecoveryWorkflow.run, workflow_id)

    async def _status(self, workflow_id: str) -> tuple[JobStatus | None, str | None]:
        handle = await self._handle(workflow_id)
        try:
            status = await handle.query(JobRecoveryWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            return None, f"status query of {workflow_id} failed (is a worker running?): {exc}"
        return status, None

    # ---- audit store reads -------------------------------------------------------------------
    async def _events(self, workflow_id: str) -> list[StoredAuditEvent]:
        return await asyncio.to_thread(lambda: list(self.store.iter_all(workflow_id=workflow_id)))

    async def _summaries(self, cluster: str | None) -> list[JobSummary]:
        found = await asyncio.to_thread(self.store.jobs, cluster, limit=MAX_JOBS_LIMIT)
        return sorted(found, key=summary_key)

    # ---- locating one job ---------------------------------------------------------------------
    async def _task_job_id(self, workflow_id: str) -> int | None:
        """Slurm's own id of the job a workflow watched, as its audit events recorded it."""
        found = await asyncio.to_thread(self.store.query, workflow_id=workflow_id, limit=1)
        return found[0].job_id if found else None

    async def locate(
        self, cluster: str, job: int | str | SlurmRef, workflow_id: str | None = None
    ) -> Located:
        """The job's latest workflow; from the audit store alone when Temporal is down. `job`
        is a Slurm id, an array task (`500_1`) or a hetjob component (`500+1`, its leader); a
        component's own job id (`501`) names its hetjob when the hetjob's workflow recorded it
        (resurgo/audit/components.py)."""
        ref = parse_job_ref(job)
        try:
            return await self._locate(cluster, ref, workflow_id)
        except (ApiProblem, RPCError) as exc:
            if not temporal_down(exc):
                raise
            found = await self._from_store(cluster, ref, workflow_id)
            part = None
            if found is None and (part := await self._component(cluster, ref)) is not None:
                found = await self._from_store(
                    cluster, SlurmRef(part.component.leader), part.workflow_id
                )
            if found is None:
                raise
            return Located(found, None, live=False, degraded=True, component=part)

    async def _component(self, cluster: str, ref: SlurmRef) -> RecordedComponent | None:
        """The hetjob component whose own job id `ref` is, as its hetjob's workflow recorded
        it (never for an array task's name)."""
        if ref.task_id is not None:
            return None
        return await asyncio.to_thread(recorded_component, self.store, ref.job_id, cluster)

    async def _from_store(
        self, cluster: str, ref: SlurmRef, workflow_id: str | None
    ) -> JobRef | None:
        """The most recently begun job the audit store knows by that name (a plain id also
        finds an array task by Slurm's per-task id)."""
        for j in await self._summaries(cluster):
            if workflow_id not in (None, j.workflow_id):
                continue
            named = parse_workflow_id(j.workflow_id)
            same = named is not None and named == (cluster, ref)
            if same or (ref.task_id is None and j.job_id == ref.job_id):
                return job_ref(cluster, j.job_id, j.workflow_id)
        return None

    async def _locate(self, cluster: str, ref: SlurmRef, workflow_id: str | None) -> Located:
        query = (
            f"WorkflowType = {quote(WORKFLOW_TYPE)} AND ResurgoCluster = {quote(cluster)} "
            f"AND ResurgoSlurmJobId = {quote(str(ref))}"
        )
        if workflow_id is not None:
            query += f" AND WorkflowId = {quote(workflow_id)}"
        runs: dict[str, list[WorkflowExecution]] = {}
        for run in await self._visibility_all(query, limit=200):
            runs.setdefault(run.id, []).append(run)
        latest = [e for group in runs.values() if (e := _latest(group)) is not None]
        if latest:
            best = max(latest, key=_rank)
            job_id = ref.job_id
            if ref.task_id is not None:
                job_id = await self._task_job_id(best.id) or ref.job_id
            return Located(job_ref(cluster, job_id, best.id), best, is_running(best))
        found = await self._from_store(cluster, ref, workflow_id)
        if found is not None:
            return Located(found, None, False)
        part = await self._component(cluster, ref)
        if part is not None and workflow_id in (None, part.workflow_id):
            leader = await self._locate(cluster, SlurmRef(part.component.leader), part.workflow_id)
            leader.component = part
            return leader
        raise ApiProblem(404, f"no job {ref} on cluster {cluster!r} is known to Resurgo")


__all__ = [
    "ApiProblem",
    "Cursors",
    "GatewayCore",
    "JobHandle",
    "Located",
    "TemporalConnection",
    "as_utc",
    "attrs_of",
    "is_running",
    "parse_job_ref",
    "parse_workflow_id",
    "quote",
    "ref_of",
    "summary_key",
    "temporal_down",
]
