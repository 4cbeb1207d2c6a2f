"""One job in detail: the status query (live jobs) over the story the audit store tells, its
timeline, and the audit-trail pages the timeline is cut from.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Literal

from resurgo.api.core import ApiProblem, GatewayCore, Located, as_utc, attrs_of
from resurgo.api.history import Folded, fold_events
from resurgo.api.models import AdviceView, AuditPage, JobDetail, TimelinePage
from resurgo.audit.components import recorded_component
from resurgo.contracts import JobStatus


class JobDetails(GatewayCore):
    """`job_detail`, `timeline` and `audit`."""

    # ---- one job ---------------------------------------------------------------------------
    async def job_detail(
        self, cluster: str, job_id: int | str, workflow_id: str | None
    ) -> JobDetail:
        loc = await self.locate(cluster, job_id, workflow_id)
        wid = loc.ref.workflow_id
        events = await self._events(wid)
        folded = fold_events(events)
        warnings = list(folded.warnings)
        if loc.degraded:
            warnings.append(
                "Temporal is unreachable: shown from the audit store; whether the job is still "
                "monitored (and its live state) is unknown"
            )
        status: JobStatus | None = None
        if loc.live:
            status, problem = await self._status(wid)
            if problem:
                warnings.append(problem)
        return build_detail(loc, folded, status, warnings)

    async def timeline(
        self,
        cluster: str,
        job_id: int | str,
        workflow_id: str | None,
        types: list[str] | None,
        cursor: str | None,
        limit: int,
    ) -> TimelinePage:
        loc = await self.locate(cluster, job_id, workflow_id)
        page = await self.audit(
            workflow_id=loc.ref.workflow_id, types=types, cursor=cursor, limit=limit
        )
        return TimelinePage(
            job=loc.ref, events=page.events, next_cursor=page.next_cursor, degraded=loc.degraded,
            named_by=loc.component.sentence() if loc.component else None,
        )  # fmt: skip

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
        named_by: str | None = None
        if job_id is not None:
            # A hetjob component's own job id: the hetjob's trail (resurgo/audit/components).
            part = await asyncio.to_thread(recorded_component, self.store, job_id, cluster)
            if part is not None and workflow_id in (None, part.workflow_id):
                job_id, workflow_id = part.component.leader, part.workflow_id
                named_by = part.sentence()
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
        return AuditPage(events=events, next_cursor=next_cursor, named_by=named_by)


def build_detail(
    loc: Located, folded: Folded, status: JobStatus | None, warnings: list[str]
) -> JobDetail:
    """One shape for live and finished jobs: the status query (live) over the audit story."""
    attrs = attrs_of(loc.execution) if loc.execution is not None else {}
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
        user=attrs.get("user") or folded.user,
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
        named_by=loc.component.sentence() if loc.component else None,
    )


__all__ = ["JobDetails", "build_detail"]
