"""Listing jobs: the filters, live jobs from Temporal visibility, finished ones from the audit
store (enriched with their closed workflow's search attributes while Temporal still keeps them),
in one keyset-paginated order.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.client import WorkflowExecution
from temporalio.service import RPCError

from resurgo.api.core import (
    WORKFLOW_TYPE,
    ApiProblem,
    GatewayCore,
    as_utc,
    attrs_of,
    is_running,
    parse_workflow_id,
    quote,
    ref_of,
    summary_key,
    temporal_down,
)
from resurgo.api.history import Folded, fold_events, job_ref
from resurgo.api.models import JobItem, JobPage
from resurgo.audit.store import JobSummary

# A finished-jobs page looks at no more than this many candidates (the rest: next cursor).
SCAN_BUDGET = 2000


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


def jobs_query(f: JobFilter, running: bool) -> str:
    """The visibility query for Resurgo's jobs that match `f` (only running ones if asked)."""
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


def item_from_execution(
    e: WorkflowExecution, summary: JobSummary | None = None, job_id: int | None = None
) -> JobItem | None:
    ref = ref_of(e, summary.job_id if summary else job_id)
    if ref is None:
        return None
    attrs = attrs_of(e)
    live = is_running(e)
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


class JobListing(GatewayCore):
    """`list_jobs`: live jobs first, then finished ones."""

    async def list_jobs(self, f: JobFilter, cursor: str | None, limit: int) -> JobPage:
        """Live jobs first (Temporal's order), then finished ones, newest first. With Temporal
        down, every job the audit store knows, from the store alone (`degraded`)."""
        try:
            return await self._list_jobs(f, cursor, limit)
        except (ApiProblem, RPCError) as exc:
            if not temporal_down(exc):
                raise
        state = self.cursors.decode(cursor) if cursor else {}
        after = _after_key(state.get("k")) if state.get("p") == "done" else None
        items, next_key = await self._finished(f, after, limit, enrich=False)
        done = self.cursors.encode({"p": "done", "k": list(next_key)}) if next_key else None
        return JobPage(items=items, next_cursor=done, degraded=True)

    async def _list_jobs(self, f: JobFilter, cursor: str | None, limit: int) -> JobPage:
        state = self.cursors.decode(cursor) if cursor else {"p": "live"}
        items: list[JobItem] = []
        if state.get("p") == "live":
            token = state.get("t")
            try:
                raw_token = base64.b64decode(token) if isinstance(token, str) else None
            except binascii.Error as exc:
                raise ApiProblem(400, "invalid cursor") from exc
            page, next_token = await self._visibility_page(
                jobs_query(f, running=True), limit, raw_token
            )
            for e in page:
                named = parse_workflow_id(e.id)
                # An array task's own Slurm id is in its audit trail, not in visibility.
                is_task = named is not None and named[1].task_id is not None
                task_id = await self._task_job_id(e.id) if is_task else None
                item = item_from_execution(e, job_id=task_id)
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
        more, next_key = await self._finished(f, _after_key(state.get("k")), limit - len(items))
        items += more
        done = self.cursors.encode({"p": "done", "k": list(next_key)}) if next_key else None
        return JobPage(items=items, next_cursor=done)

    async def _finished(
        self, f: JobFilter, after: tuple[Any, ...] | None, limit: int, *, enrich: bool = True
    ) -> tuple[list[JobItem], tuple[int, str, int, str] | None]:
        """Jobs from the audit store after `after`, with their closed workflow's search
        attributes when `enrich` (Temporal answers); from the events alone otherwise."""
        candidates = [
            j for j in await self._summaries(f.cluster) if after is None or summary_key(j) > after
        ]
        items: list[JobItem] = []
        pos = 0
        batch_size = max(limit, 20)
        while pos < len(candidates) and pos < SCAN_BUDGET:
            batch = candidates[pos : pos + batch_size]
            wanted = [j for j in batch if f.window(j.first_at, j.last_at, live=False)]
            known = await self._by_ids([j.workflow_id for j in wanted]) if wanted and enrich else {}
            for i, j in enumerate(batch):
                if not f.window(j.first_at, j.last_at, live=False):
                    continue
                e = known.get(j.workflow_id)
                if is_running(e):
                    continue  # listed among the live jobs
                if e is not None:
                    item = item_from_execution(e, j)
                else:
                    folded = fold_events(await self._events(j.workflow_id))
                    item = item_from_audit(j, folded)
                    if not enrich and folded.outcome is None:
                        # Without Temporal, a job with no final event may still be running.
                        item = item.model_copy(update={"state": "unknown"})
                if item is not None and f.facts(item.state, item.mode, item.last_category):
                    items.append(item)
                if len(items) >= limit:
                    more = pos + i + 1 < len(candidates)
                    return items, summary_key(j) if more else None
            pos += len(batch)
        # Scan budget spent: the next page goes on after the last candidate looked at.
        return items, summary_key(candidates[pos - 1]) if pos < len(candidates) else None


def _after_key(after: Any) -> tuple[Any, ...] | None:
    """The keyset position of a finished-jobs cursor (400 unless it has summary_key's shape)."""
    if after is None:
        return None
    if not (isinstance(after, list) and [type(v) for v in after] == [int, str, int, str]):
        raise ApiProblem(400, "invalid cursor")
    return tuple(after)


__all__ = ["JobFilter", "JobListing", "item_from_audit", "item_from_execution", "jobs_query"]
