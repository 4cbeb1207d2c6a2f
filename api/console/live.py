"""The jobs list as the console shows it, read once for every viewer and pushed when it changes.

One `LiveJobs` per API process: a page view or the refresh loop reads the list (Temporal
visibility for live jobs, the audit store for finished ones and for culprit nodes) at most once
per `max_age` seconds, whoever asks; the refresh loop runs only while a browser listens and
wakes listeners only when the list actually changed (a fingerprint of what is shown). So ten
open consoles cost the same as one, and an idle one costs nothing.

A read costs one Temporal visibility call (the running jobs) and the audit events stored since
the previous read (`DigestReader`): finished jobs, culprit nodes and categories come from the
digest, never from one store query per job. When Temporal cannot be read, the list is the
digest's alone, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import datetime

from temporalio.service import RPCError

from resurgo.api.core import ApiProblem
from resurgo.api.job_refs import parse_workflow_id
from resurgo.api.listing import JobFilter, item_from_execution, jobs_query
from resurgo.api.models import JobItem
from resurgo.api.service import Gateway
from resurgo.audit.store import AuditStoreUnavailable
from resurgo.metrics.digest import JobDigest
from resurgo.metrics.reader import DigestReader
from resurgo.slurm.parsers import compress_hostlist

log = logging.getLogger("resurgo.api.console")

MAX_JOBS = 1000
TEMPORAL_TIMEOUT = 6.0


@dataclass
class JobRow:
    cluster: str
    job_id: int
    workflow_id: str
    live: bool
    state: str
    mode: str
    attempt: str
    category: str
    culprits: str
    needs_approval: bool
    user: str
    last_seen: datetime | None
    # How people name it: `<array>_<task>` for an array task, else the job id.
    name: str = ""


@dataclass
class JobsSnapshot:
    rows: list[JobRow]
    degraded: str | None
    read_at: float
    fingerprint: str = ""
    clusters: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        shown = [asdict(r) | {"last_seen": None} for r in self.rows]
        raw = json.dumps([shown, self.degraded], default=str, sort_keys=True).encode()
        self.fingerprint = hashlib.sha256(raw).hexdigest()[:16]
        self.clusters = sorted({r.cluster for r in self.rows})


class LiveJobs:
    def __init__(self, gateway: Gateway, digest: DigestReader, *, max_age: float = 2.0) -> None:
        self.gateway = gateway
        self.digest = digest
        self.max_age = max_age
        self._snapshot: JobsSnapshot | None = None
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._listeners = 0
        self._loop: asyncio.Task[None] | None = None
        self.reads = 0  # how many times the list was actually read (for tests and the bench)

    async def snapshot(self) -> JobsSnapshot:
        async with self._lock:
            current = self._snapshot
            if current is None or time.monotonic() - current.read_at >= self.max_age:
                current = await self._read()
                previous, self._snapshot = self._snapshot, current
                if previous is None or previous.fingerprint != current.fingerprint:
                    async with self._changed:
                        self._changed.notify_all()
            return current

    async def changes(self) -> AsyncIterator[JobsSnapshot]:
        """The current list, then each changed one, for as long as the caller listens."""
        self._listeners += 1
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._refresh_while_listened())
        try:
            sent = await self.snapshot()
            yield sent
            while True:
                async with self._changed:
                    await self._changed.wait()
                latest = self._snapshot
                if latest is not None and latest.fingerprint != sent.fingerprint:
                    sent = latest
                    yield sent
        finally:
            self._listeners -= 1

    async def _refresh_while_listened(self) -> None:
        while self._listeners > 0:
            try:
                await self.snapshot()
            except Exception:  # keep the loop alive; the next round tries again
                log.exception("console: reading the jobs list failed")
            await asyncio.sleep(self.max_age)

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    # ---- reading ------------------------------------------------------------------------------
    async def _read(self) -> JobsSnapshot:
        """One visibility call (running jobs) and the digest's new events: every finished job,
        and every job's culprits, come from the digest, not from a read per job."""
        self.reads += 1
        try:
            known = await asyncio.to_thread(self.digest.view, lambda d: d.job_summaries(MAX_JOBS))
            store_problem = None
        except AuditStoreUnavailable as exc:
            known, store_problem = [], f"The audit store cannot be read ({exc})."
        by_id = {j.workflow_id: j for j in known}
        try:
            page, _ = await asyncio.wait_for(
                self.gateway._visibility_page(
                    jobs_query(JobFilter(), running=True), MAX_JOBS, None
                ),
                TEMPORAL_TIMEOUT,
            )
        except (ApiProblem, RPCError, RuntimeError, TimeoutError, OSError) as exc:
            detail = getattr(exc, "detail", None) or str(exc) or type(exc).__name__
            degraded = (
                f"Temporal cannot be read ({detail}): jobs and states below come from "
                "the audit trail; whether a job is still monitored is unknown."
            )
            rows = [_from_digest(j) for j in known]
            return JobsSnapshot(rows, _joined(store_problem, degraded), time.monotonic())
        rows = []
        for e in page:
            seen = by_id.pop(e.id, None)
            # An array task's own Slurm id is the digest's (visibility has `<array>_<task>`).
            item = item_from_execution(e, job_id=seen.job_id if seen else None)
            if item is None:
                continue
            rows.append(row_from_item(item, seen))
        rows += [_from_digest(j) for j in by_id.values()][: max(0, MAX_JOBS - len(rows))]
        return JobsSnapshot(rows, store_problem, time.monotonic())


def row_from_item(item: JobItem, seen: JobDigest | None) -> JobRow:
    """A row of the API's listing, with the culprits the digest knows of the job."""
    return JobRow(
        item.cluster,
        item.job_id,
        item.workflow_id,
        item.live,
        item.state or "",
        item.mode or "",
        "" if item.attempt is None else str(item.attempt),
        item.last_category or "",
        compress_hostlist(seen.culprits) if seen and seen.culprits else "",
        item.needs_approval,
        item.user or "",
        seen.last_at if seen else (item.last_seen or item.first_seen),
        item.name or str(item.job_id),
    )


def _from_digest(j: JobDigest) -> JobRow:
    state = j.outcome or f"not running ({j.last_type.replace('_', ' ')})"
    return JobRow(
        j.cluster,
        j.job_id,
        j.workflow_id,
        False,
        state,
        j.mode,
        str(j.attempt),
        j.category,
        compress_hostlist(j.culprits) if j.culprits else "",
        False,
        j.user,
        j.last_at,
        _name(j.workflow_id, j.job_id),
    )


def _name(workflow_id: str, job_id: int) -> str:
    named = parse_workflow_id(workflow_id)
    return str(named[1]) if named is not None and named[1].task_id is not None else str(job_id)


def _joined(*parts: str | None) -> str | None:
    return " ".join(p for p in parts if p) or None


__all__ = ["MAX_JOBS", "JobRow", "JobsSnapshot", "LiveJobs", "row_from_item"]
