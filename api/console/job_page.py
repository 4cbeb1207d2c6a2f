"""One job's page: its timeline from the audit store, and what Temporal adds while it runs
(phase, mode, the advice waiting for approval). Without Temporal the page still tells the
whole recorded story and says it is degraded."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.service import RPCError

from resurgo.api.auth import Principal
from resurgo.api.console.session import Refused
from resurgo.api.console.timeline import timeline_rows
from resurgo.api.core import ApiProblem
from resurgo.api.job_refs import SlurmRef, slurm_ref
from resurgo.api.models import JobDetail
from resurgo.api.service import Gateway
from resurgo.api.visibility import owners, shown_to
from resurgo.audit.components import RecordedComponent, recorded_component
from resurgo.audit.store import AuditStoreUnavailable, StoredAuditEvent
from resurgo.contracts import AuditEventType
from resurgo.policy.decide import describe_advice

# A job's page shows at most this many events (progress ticks excluded): enough for hundreds
# of attempts; the API's /timeline pages through the rest.
MAX_EVENTS = 5000
STORY_TYPES = [t.value for t in AuditEventType if t != AuditEventType.PROGRESS]
TEMPORAL_TIMEOUT = 6.0


def _events(gateway: Gateway, cluster: str, job_id: int) -> list[StoredAuditEvent]:
    found: list[StoredAuditEvent] = []
    for e in gateway.store.iter_all(cluster=cluster, job_id=job_id, types=STORY_TYPES):
        found.append(e)
        if len(found) >= MAX_EVENTS:
            break
    return found


async def _task_number(gateway: Gateway, cluster: str, ref: SlurmRef) -> tuple[int, str | None]:
    """An array task's own Slurm id (its audit events carry it) and its workflow."""
    try:
        loc = await asyncio.wait_for(gateway.locate(cluster, ref), TEMPORAL_TIMEOUT)
    except ApiProblem as exc:
        raise Refused(exc.status, exc.detail) from exc
    except (RPCError, TimeoutError, RuntimeError, OSError) as exc:
        raise Refused(503, f"Array task {ref} cannot be located right now ({exc}).") from exc
    return loc.ref.job_id, loc.ref.workflow_id


async def job_page_context(
    gateway: Gateway, principal: Principal, cluster: str, name: str, workflow_id: str | None
) -> dict[str, Any]:
    """`name`: the job id, `<array>_<task>` or `<leader>+<n>` (checked by the caller)."""
    ref = slurm_ref(name)
    if ref is None:
        raise Refused(400, "not a job: its Slurm id, or <array id>_<task id> for an array task")
    job_id = ref.job_id
    if ref.task_id is not None:
        job_id, located = await _task_number(gateway, cluster, ref)
        workflow_id = workflow_id or located
    named_by = None
    if ref.task_id is None:
        # A hetjob component's own job id (`86`): the hetjob's page, saying so.
        part = await _component(gateway, cluster, job_id)
        if part is not None and workflow_id in (None, part.workflow_id):
            ref, job_id = SlurmRef(part.component.leader), part.component.leader
            workflow_id, named_by = part.workflow_id, part.sentence()
    try:
        events = await asyncio.to_thread(_events, gateway, cluster, job_id)
        store_problem = None
    except AuditStoreUnavailable as exc:
        events, store_problem = [], f"The audit store cannot be read ({exc})."
    runs = sorted(
        {e.workflow_id for e in events},
        key=lambda w: max(e.id for e in events if e.workflow_id == w),
    )
    chosen = workflow_id if workflow_id in runs else (runs[-1] if runs else workflow_id)
    events = [e for e in events if e.workflow_id == chosen]
    detail: JobDetail | None = None
    degraded = store_problem
    try:
        detail = await asyncio.wait_for(
            gateway.job_detail(cluster, str(ref), chosen), TEMPORAL_TIMEOUT
        )
    except ApiProblem as exc:
        if exc.status != 404 or events:
            degraded = (
                f"Temporal cannot be read ({exc.detail}): the story below is the audit "
                "trail's; live state and approvals are unavailable."
            )
    except (RPCError, TimeoutError, RuntimeError, OSError) as exc:
        degraded = (
            f"Temporal cannot be read ({exc or type(exc).__name__}): the story below is "
            "the audit trail's; live state and approvals are unavailable."
        )
    if detail is not None and detail.warnings:
        # e.g. Temporal unreachable: the gateway answered from the audit store and says so.
        degraded = " ".join([*([degraded] if degraded else []), *detail.warnings])
    if detail is None and not events:
        raise Refused(404, f"no job {ref} on cluster {cluster} is known to Resurgo")
    # Output lines reach only those allowed to read this user's jobs (as in the API).
    owner = (await owners(gateway.store, [chosen]))[chosen] if chosen else None
    events = [shown_to(principal, owner, e) for e in events]
    rows = timeline_rows(events)
    pending = detail.pending_approval if detail else None
    return {
        "cluster": cluster,
        # How the page names the job (and its forms post it): `<array>_<task>` for a task.
        "job_id": str(ref),
        "slurm_job_id": job_id,
        "array_job_id": ref.job_id if ref.task_id is not None else None,
        "workflow_id": chosen or (detail.workflow_id if detail else ""),
        "runs": runs,
        "detail": detail,
        "named_by": named_by,
        "degraded": degraded,
        "rows": rows,
        "pending": pending,
        "pending_words": describe_advice(pending) if pending else "",
        "live": bool(detail and detail.live),
        "summary": _summary(events, detail),
    }


async def _component(gateway: Gateway, cluster: str, job_id: int) -> RecordedComponent | None:
    try:
        return await asyncio.to_thread(recorded_component, gateway.store, job_id, cluster)
    except AuditStoreUnavailable:
        return None  # the page says the store cannot be read


def _summary(events: list[StoredAuditEvent], detail: JobDetail | None) -> dict[str, str]:
    last = {str(e.type): e for e in events}
    attempts = [e.attempt for e in events if e.attempt is not None]
    ended = last.get(AuditEventType.MONITORING_ENDED)
    recovered = last.get(AuditEventType.PROGRESS_RECOVERED)
    attribution = last.get(AuditEventType.ATTRIBUTION)
    return {
        "state": (detail.phase or detail.state or "")
        if detail
        else str(ended.data.get("outcome", ""))
        if ended
        else (events[-1].type if events else ""),
        "mode": (detail.mode or "") if detail else "",
        "attempts": str(max(attempts) + 1) if attempts else "1",
        "category": str(attribution.data.get("category", "")) if attribution else "",
        "recovered": str(recovered.summary) if recovered else "",
        "outcome": str(ended.data.get("outcome", "")) if ended else "",
    }


__all__ = ["job_page_context"]
