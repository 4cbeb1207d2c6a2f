"""What the HTTP gateway does, independent of HTTP: reads from Temporal and the audit store,
operator decisions as workflow updates.

Live jobs are read from Temporal (visibility for listings, the `status` query for details);
finished ones from the audit store, enriched with their closed workflow's search attributes while
Temporal still keeps them. Every workflow handle is run-less, so it follows continue-as-new.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from resurgo.api.auth import Principal
from resurgo.api.history import Folded, fold_events, job_ref, submit_time_of
from resurgo.api.models import (
    AdviceItem,
    AdvicePage,
    AdviceView,
    AuditPage,
    DecisionResponse,
    JobDetail,
    JobItem,
    JobPage,
    JobRef,
    ModeResponse,
    Readiness,
    ReadinessCheck,
    TimelinePage,
)
from resurgo.audit.store import (
    MAX_JOBS_LIMIT,
    AuditStore,
    AuditStoreUnavailable,
    JobSummary,
    StoredAuditEvent,
)
from resurgo.config import TemporalSettings
from resurgo.contracts import ApprovalDecision, JobStatus, Mode, ModeChange, RecoveryOutcome
from resurgo.workflows import search_attributes as sa
from resurgo.workflows.client import TemporalUnavailable, connect
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

log = logging.getLogger("resurgo.api")

WORKFLOW_TYPE = "JobRecoveryWorkflow"
QUERY_TIMEOUT = timedelta(seconds=5)
UPDATE_TIMEOUT = timedelta(seconds=20)
LIST_TIMEOUT = timedelta(seconds=10)
CONNECT_TIMEOUT = 5.0
READY_TIMEOUT = 3.0
# A finished-jobs page looks at no more than this many candidates (the rest: next cursor).
SCAN_BUDGET = 2000
VISIBILITY_CHUNK = 50

JobHandle = WorkflowHandle[JobRecoveryWorkflow, RecoveryOutcome]


class ApiProblem(Exception):
    """A request that cannot be served as asked: HTTP status and a message for a person."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


@dataclass(frozen=True)
class JobFilter:
    cluster: str | None = None
    state: str | None = None
    mode: str | None = None
    category: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def window(self, first: datetime | None, last: datetime | None, live: bool) -> bool:
        """Monitored at some point in [since, until)."""
        if self.until is not None and first is not None and first >= self.until:
            return False
        return not (self.since is not None and not live and last is not None and last < self.since)

    def facts(self, state: str | None, mode: str | None, category: str | None) -> bool:
        return (
            (self.state is None or state == self.state)
            and (self.mode is None or mode == self.mode)
            and (self.category is None or category == self.category)
        )


@dataclass
class Located:
    ref: JobRef
    execution: WorkflowExecution | None
    live: bool


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


def parse_workflow_id(workflow_id: str) -> tuple[str, int] | None:
    """`resurgo:<cluster>:<job id>:<submit epoch>` -> (cluster, job id)."""
    if not workflow_id.startswith("resurgo:"):
        return None
    parts = workflow_id[len("resurgo:") :].rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


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


def _is_running(e: WorkflowExecution | None) -> bool:
    return e is not None and e.status == WorkflowExecutionStatus.RUNNING


def _sa(e: WorkflowExecution) -> dict[str, Any]:
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


def _ref_of(e: WorkflowExecution) -> JobRef | None:
    parsed = parse_workflow_id(e.id)
    attrs = _sa(e)
    cluster = attrs["cluster"] or (parsed[0] if parsed else None)
    raw_job = attrs["job_id"]
    job_id = int(raw_job) if raw_job and str(raw_job).isdigit() else (parsed[1] if parsed else None)
    if cluster is None or job_id is None:
        return None
    return job_ref(cluster, job_id, e.id)


def item_from_execution(e: WorkflowExecution, summary: JobSummary | None = None) -> JobItem | None:
    ref = _ref_of(e)
    if ref is None:
        return None
    attrs = _sa(e)
    live = _is_running(e)
    return JobItem(
        **ref.model_dump(),
        live=live,
        source="temporal" if live else "audit",
        state=attrs["state"],
        mode=attrs["mode"],
        attempt=attrs["attempt"],
        last_category=attrs["category"],
        needs_approval=attrs["needs_approval"] and live,
        user=attrs["user"],
        partition=attrs["partition"],
        first_seen=summary.first_at if summary else as_utc(e.start_time),
        last_seen=summary.last_at if summary else as_utc(e.close_time),
    )


def item_from_audit(summary: JobSummary, folded: Folded) -> JobItem:
    attempt = max(folded.attempts) if folded.attempts else None
    return JobItem(
        **job_ref(summary.cluster, summary.job_id, summary.workflow_id).model_dump(),
        live=False,
        source="audit",
        state=folded.outcome or "ended",
        mode=folded.mode,
        attempt=attempt,
        last_category=folded.last_category,
        first_seen=summary.first_at,
        last_seen=summary.last_at,
    )


def _summary_key(j: JobSummary) -> tuple[int, str, int, str]:
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
                    raise ApiProblem(
                        503, f"Temporal at {self.settings.address} is unreachable: {exc}"
                    ) from exc
        return self._client


class Gateway:
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
        return sorted(found, key=_summary_key)

    # ---- locating one job ---------------------------------------------------------------------
    async def locate(self, cluster: str, job_id: int, workflow_id: str | None = None) -> Located:
        query = (
            f"WorkflowType = {quote(WORKFLOW_TYPE)} AND ResurgoCluster = {quote(cluster)} "
            f"AND ResurgoSlurmJobId = {quote(str(job_id))}"
        )
        if workflow_id is not None:
            query += f" AND WorkflowId = {quote(workflow_id)}"
        runs: dict[str, list[WorkflowExecution]] = {}
        for run in await self._visibility_all(query, limit=200):
            runs.setdefault(run.id, []).append(run)
        latest = [e for group in runs.values() if (e := _latest(group)) is not None]
        if latest:
            best = max(latest, key=_rank)
            return Located(job_ref(cluster, job_id, best.id), best, _is_running(best))
        for j in await self._summaries(cluster):
            if j.job_id == job_id and workflow_id in (None, j.workflow_id):
                return Located(job_ref(cluster, job_id, j.workflow_id), None, False)
        raise ApiProblem(404, f"no job {job_id} on cluster {cluster!r} is known to Resurgo")

    # ---- jobs -----------------------------------------------------------------------------------
    def _jobs_query(self, f: JobFilter, running: bool) -> str:
        parts = [f"WorkflowType = {quote(WORKFLOW_TYPE)}"]
        if running:
            parts.append('ExecutionStatus = "Running"')
        for key, value in (
            ("ResurgoCluster", f.cluster),
            ("ResurgoState", f.state),
            ("ResurgoMode", f.mode),
            ("ResurgoLastCategory", f.category),
        ):
            if value is not None:
                parts.append(f"{key} = {quote(value)}")
        return " AND ".join(parts)

    async def list_jobs(self, f: JobFilter, cursor: str | None, limit: int) -> JobPage:
        """Live jobs first (Temporal's order), then finished ones, newest first."""
        state = self.cursors.decode(cursor) if cursor else {"p": "live"}
        items: list[JobItem] = []
        if state.get("p") == "live":
            token = state.get("t")
            try:
                raw_token = base64.b64decode(token) if isinstance(token, str) else None
            except binascii.Error as exc:
                raise ApiProblem(400, "invalid cursor") from exc
            page, next_token = await self._visibility_page(
                self._jobs_query(f, running=True), limit, raw_token
            )
            for e in page:
                item = item_from_execution(e)
                if item is not None and f.window(item.first_seen, None, live=True):
                    items.append(item)
            if next_token:
                return JobPage(
                    items=items,
                    next_cursor=self.cursors.encode(
                        {"p": "live", "t": base64.b64encode(next_token).decode()}
                    ),
                )
            if len(items) >= limit:
                return JobPage(items=items, next_cursor=self.cursors.encode({"p": "done"}))
            state = {"p": "done"}
        if state.get("p") != "done":
            raise ApiProblem(400, "invalid cursor")
        after = state.get("k")
        if after is not None and not (
            isinstance(after, list)
            and [type(v) for v in after] == [int, str, int, str]  # the shape of _summary_key
        ):
            raise ApiProblem(400, "invalid cursor")
        more, next_key = await self._finished(
            f, tuple(after) if after else None, limit - len(items)
        )
        items += more
        done = self.cursors.encode({"p": "done", "k": list(next_key)}) if next_key else None
        return JobPage(items=items, next_cursor=done)

    async def _finished(
        self, f: JobFilter, after: tuple[Any, ...] | None, limit: int
    ) -> tuple[list[JobItem], tuple[int, str, int, str] | None]:
        candidates = [
            j for j in await self._summaries(f.cluster) if after is None or _summary_key(j) > after
        ]
        items: list[JobItem] = []
        pos = 0
        batch_size = max(limit, 20)
        while pos < len(candidates) and pos < SCAN_BUDGET:
            batch = candidates[pos : pos + batch_size]
            wanted = [j for j in batch if f.window(j.first_at, j.last_at, live=False)]
            known = await self._by_ids([j.workflow_id for j in wanted]) if wanted else {}
            for i, j in enumerate(batch):
                if not f.window(j.first_at, j.last_at, live=False):
                    continue
                e = known.get(j.workflow_id)
                if _is_running(e):
                    continue  # listed among the live jobs
                item = (
                    item_from_execution(e, j)
                    if e is not None
                    else item_from_audit(j, fold_events(await self._events(j.workflow_id)))
                )
                if item is not None and f.facts(item.state, item.mode, item.last_category):
                    items.append(item)
                if len(items) >= limit:
                    more = pos + i + 1 < len(candidates)
                    return items, _summary_key(j) if more else None
            pos += len(batch)
        # Scan budget spent: the next page goes on after the last candidate looked at.
        return items, _summary_key(candidates[pos - 1]) if pos < len(candidates) else None

    # ---- one job ---------------------------------------------------------------------------
    async def job_detail(self, cluster: str, job_id: int, workflow_id: str | None) -> JobDetail:
        loc = await self.locate(cluster, job_id, workflow_id)
        wid = loc.ref.workflow_id
        events = await self._events(wid)
        folded = fold_events(events)
        warnings = list(folded.warnings)
        status: JobStatus | None = None
        if loc.live:
            status, problem = await self._status(wid)
            if problem:
                warnings.append(problem)
        return build_detail(loc, folded, status, warnings)

    async def timeline(
        self,
        cluster: str,
        job_id: int,
        workflow_id: str | None,
        types: list[str] | None,
        cursor: str | None,
        limit: int,
    ) -> TimelinePage:
        loc = await self.locate(cluster, job_id, workflow_id)
        page = await self.audit(
            workflow_id=loc.ref.workflow_id, types=types, cursor=cursor, limit=limit
        )
        return TimelinePage(job=loc.ref, events=page.events, next_cursor=page.next_cursor)

    # ---- advice ---------------------------------------------------------------------------------
    async def list_advice(
        self, pending: bool, cluster: str | None, cursor: str | None, limit: int
    ) -> AdvicePage:
        token: bytes | None = None
        if cursor:
            raw = self.cursors.decode(cursor).get("t")
            try:
                token = base64.b64decode(raw) if isinstance(raw, str) else None
            except binascii.Error as exc:
                raise ApiProblem(400, "invalid cursor") from exc
            if token is None:
                raise ApiProblem(400, "invalid cursor")
        query = self._jobs_query(JobFilter(cluster=cluster), running=True)
        if pending:
            query += " AND ResurgoNeedsApproval = true"
        page, next_token = await self._visibility_page(query, limit, token)
        results = await asyncio.gather(*(self._advice_of(e, pending) for e in page))
        items = [item for item, _ in results if item is not None]
        warnings = [w for _, w in results if w]
        return AdvicePage(
            items=items,
            next_cursor=self.cursors.encode({"t": base64.b64encode(next_token).decode()})
            if next_token
            else None,
            warnings=warnings,
        )

    async def _advice_of(
        self, e: WorkflowExecution, pending_only: bool
    ) -> tuple[AdviceItem | None, str | None]:
        ref = _ref_of(e)
        if ref is None:
            return None, None
        status, problem = await self._status(e.id)
        folded = fold_events(await self._events(e.id))
        attrs = _sa(e)
        if status is not None:
            advice = status.pending_approval or (status.advice[-1] if status.advice else None)
            is_pending = status.pending_approval is not None
            phase, mode = status.phase, status.mode.value
        else:
            gen = folded.pending_generation if attrs["needs_approval"] else None
            view = folded.advice.get(gen) if gen is not None else None
            if view is None and folded.advice:
                view = folded.advice[max(folded.advice)]
            advice = view.advice if view else None
            is_pending = gen is not None and view is not None
            phase, mode = attrs["state"], attrs["mode"]
        if advice is None or (pending_only and not is_pending):
            return None, problem
        return (
            AdviceItem(
                job=ref,
                advice=advice,
                pending=is_pending,
                state=phase,
                mode=mode,
                requested_at=folded.requested_at.get(advice.generation),
                expires_at=folded.approval_deadline(advice.generation) if is_pending else None,
            ),
            problem,
        )

    # ---- operator decisions -------------------------------------------------------------------
    async def _live(self, cluster: str, job_id: int) -> tuple[Located, JobHandle]:
        loc = await self.locate(cluster, job_id)
        if not loc.live:
            raise ApiProblem(
                409, f"monitoring of {cluster}/{job_id} has ended: there is nothing to change"
            )
        return loc, await self._handle(loc.ref.workflow_id)

    async def decide(
        self,
        cluster: str,
        job_id: int,
        generation: int,
        *,
        approve: bool,
        reason: str,
        principal: Principal,
        request_id: str | None,
    ) -> DecisionResponse:
        loc, handle = await self._live(cluster, job_id)
        status, _ = await self._status(loc.ref.workflow_id)
        label = f"{cluster}/{job_id}"
        if status is not None:
            newest = max((a.generation for a in status.advice), default=0)
            if generation < 1 or generation > newest:
                pending = status.pending_approval
                raise ApiProblem(
                    404,
                    f"there is no advice g{generation} for {label}"
                    + (f" (g{pending.generation} is waiting for approval)" if pending else ""),
                )
        decision = ApprovalDecision(
            generation=generation, approve=approve, actor=principal.name, reason=reason
        )
        ack = await self._update(
            handle,
            JobRecoveryWorkflow.decide_advice,
            decision,
            request_id,
            refused=lambda msg: ApiProblem(409, f"{label}: {msg}"),
        )
        return DecisionResponse(job=loc.ref, decision=decision, ack=ack)

    async def set_mode(
        self, cluster: str, job_id: int, mode: Mode, reason: str, principal: Principal,
        request_id: str | None,
    ) -> ModeResponse:  # fmt: skip
        loc, handle = await self._live(cluster, job_id)
        change = ModeChange(mode=mode, actor=principal.name, reason=reason)
        status = await self._update(
            handle,
            JobRecoveryWorkflow.set_mode,
            change,
            request_id,
            refused=lambda msg: ApiProblem(409, f"{cluster}/{job_id}: {msg}"),
        )
        return ModeResponse(job=loc.ref, change=change, status=status)

    async def _update(
        self, handle: JobHandle, update: Any, arg: Any, request_id: str | None,
        refused: Any,
    ) -> Any:  # fmt: skip
        # A fresh update id per request unless the client supplied an idempotency key: update
        # ids dedupe within a run, so reusing one would replay an earlier answer.
        update_id = f"api-{request_id or uuid.uuid4().hex}"
        try:
            return await handle.execute_update(
                update, arg, id=update_id, rpc_timeout=UPDATE_TIMEOUT
            )
        except WorkflowUpdateFailedError as exc:
            raise refused(str(exc.cause)) from exc
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            raise ApiProblem(
                504, "no worker took the update in time: is `resurgo worker` running?"
            ) from exc
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise refused("monitoring has ended") from exc
            raise

    # ---- audit ----------------------------------------------------------------------------------
    async def audit(
        self,
        *,
        cluster: str | None = None,
        job_id: int | None = None,
        workflow_id: str | None = None,
        attempt: int | None = None,
        types: list[str] | None = None,
        producer: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        cursor: str | None = None,
        limit: int = 100,
        order: Literal["asc", "desc"] = "asc",
    ) -> AuditPage:
        after_id: int | None = None
        if cursor:
            payload = self.cursors.decode(cursor)
            after = payload.get("a")
            if not isinstance(after, int) or payload.get("o") != order:
                raise ApiProblem(400, "invalid cursor (or `order` differs from the first page)")
            after_id = after
        events = await asyncio.to_thread(
            self.store.query,
            cluster=cluster,
            job_id=job_id,
            workflow_id=workflow_id,
            attempt=attempt,
            types=types or None,
            producer=producer,
            since=since,
            until=until,
            after_id=after_id,
            limit=limit,
            order=order,
        )
        next_cursor = (
            self.cursors.encode({"a": events[-1].id, "o": order}) if len(events) >= limit else None
        )
        return AuditPage(events=events, next_cursor=next_cursor)

    # ---- health ---------------------------------------------------------------------------------
    async def readiness(self) -> Readiness:
        temporal, audit = await asyncio.gather(self._temporal_ready(), self._store_ready())
        return Readiness(
            ready=temporal.ok and audit.ok, checks={"temporal": temporal, "audit": audit}
        )

    async def _temporal_ready(self) -> ReadinessCheck:
        try:
            client = await self.temporal.get()
            ok = await asyncio.wait_for(
                client.service_client.check_health(timeout=timedelta(seconds=READY_TIMEOUT)),
                READY_TIMEOUT + 1,
            )
        except (ApiProblem, RPCError, TimeoutError, RuntimeError) as exc:
            return ReadinessCheck(ok=False, detail=str(exc) or type(exc).__name__)
        return ReadinessCheck(
            ok=bool(ok), detail=self.temporal.settings.address if ok else "not serving"
        )

    async def _store_ready(self) -> ReadinessCheck:
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self.store.query, limit=1), timeout=READY_TIMEOUT
            )
        except AuditStoreUnavailable as exc:
            return ReadinessCheck(ok=False, detail=str(exc))
        except TimeoutError:
            return ReadinessCheck(ok=False, detail=f"{self.store.url} did not answer in time")
        return ReadinessCheck(ok=True, detail=self.store.url)


def build_detail(
    loc: Located, folded: Folded, status: JobStatus | None, warnings: list[str]
) -> JobDetail:
    """One shape for live and finished jobs: the status query (live) over the audit story."""
    attrs = _sa(loc.execution) if loc.execution is not None else {}
    views: dict[int, AdviceView] = {g: v.model_copy() for g, v in folded.advice.items()}
    pending = None
    if status is not None:
        for a in status.advice:
            views.setdefault(a.generation, AdviceView(advice=a, state="recorded"))
        pending = status.pending_approval
        if pending is not None:
            view = views.setdefault(
                pending.generation, AdviceView(advice=pending, state="pending_approval")
            )
            view.state = "pending_approval"
    elif loc.live and attrs.get("needs_approval") and folded.pending_generation in views:
        pending = views[folded.pending_generation].advice
    final_state = attrs.get("state") if loc.execution is not None and not loc.live else None
    if status is not None:
        phase: str | None = status.phase
        mode: str | None = status.mode.value
        attempt: int | None = status.attempt
        category = status.last_category
        excluded = list(status.excluded_nodes)
        outcome = status.outcome
    else:
        phase = attrs.get("state") or folded.outcome or ("unknown" if loc.live else "ended")
        mode = attrs.get("mode") or folded.mode
        attempt = attrs.get("attempt")
        if attempt is None and folded.attempts:
            attempt = max(folded.attempts)
        category = attrs.get("category") or folded.last_category
        excluded = folded.excluded_nodes
        outcome = None if loc.live else (final_state or folded.outcome)
    source: Literal["temporal", "audit"] = "temporal" if loc.live else "audit"
    return JobDetail(
        **loc.ref.model_dump(),
        live=loc.live,
        source=source,
        state=phase,
        phase=phase,
        mode=mode,
        attempt=attempt,
        last_category=category,
        needs_approval=pending is not None,
        user=attrs.get("user"),
        partition=attrs.get("partition"),
        first_seen=folded.first_at or (as_utc(loc.execution.start_time) if loc.execution else None),
        last_seen=None if loc.live else folded.last_at,
        outcome=outcome,
        excluded_nodes=excluded,
        pending_approval=pending,
        attempts=[folded.attempts[n] for n in sorted(folded.attempts)],
        anomalies=folded.anomalies,
        attributions=folded.attributions,
        advice=[views[g] for g in sorted(views)],
        reconciliation=folded.reconciliation,
        warnings=warnings,
    )


__all__ = [
    "ApiProblem",
    "Cursors",
    "Gateway",
    "JobFilter",
    "TemporalConnection",
    "build_detail",
    "submit_time_of",
]
