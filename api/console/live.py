"""The jobs list as the console shows it, read once for every viewer and pushed when it changes.

One `LiveJobs` per API process: a page view or the refresh loop reads the list (Temporal
visibility for live jobs, the audit store for finished ones and for culprit nodes) at most once
per `max_age` seconds, whoever asks; the refresh loop runs only while a browser listens and
wakes listeners only when the list actually changed (a fingerprint of what is shown). So ten
open consoles cost the same as one, and an idle one costs nothing.

When Temporal cannot be read, the list falls back to the audit store (every job Resurgo ever
recorded, its last event as its state) and says so.
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
from resurgo.api.listing import JobFilter
from resurgo.api.service import Gateway
from resurgo.audit.store import AuditStoreUnavailable
from resurgo.contracts import AuditEventType
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
    def __init__(self, gateway: Gateway, *, max_age: float = 2.0) -> None:
        self.gateway = gateway
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
        self.reads += 1
        culprits = await asyncio.to_thread(self._culprits)
        try:
            page = await asyncio.wait_for(
                self.gateway.list_jobs(JobFilter(), None, MAX_JOBS), TEMPORAL_TIMEOUT
            )
        except (ApiProblem, RPCError, RuntimeError, TimeoutError, OSError) as exc:
            detail = getattr(exc, "detail", None) or str(exc) or type(exc).__name__
            return JobsSnapshot(
                await asyncio.to_thread(self._from_store, culprits),
                f"Temporal cannot be read ({detail}): jobs and states below "
                "come from the audit trail",
                time.monotonic(),
            )
        rows = [
            JobRow(
                i.cluster,
                i.job_id,
                i.workflow_id,
                i.live,
                i.state or "",
                i.mode or "",
                "" if i.attempt is None else str(i.attempt),
                i.last_category or "",
                culprits.get(i.workflow_id, ""),
                i.needs_approval,
                i.user or "",
                i.last_seen or i.first_seen,
            )
            for i in page.items
        ]
        return JobsSnapshot(rows, None, time.monotonic())

    def _culprits(self) -> dict[str, str]:
        """The culprit nodes of each job's latest attribution, as a compressed hostlist."""
        try:
            events = self.gateway.store.query(
                types=[AuditEventType.ATTRIBUTION], order="desc", limit=MAX_JOBS
            )
        except AuditStoreUnavailable:
            return {}
        found: dict[str, str] = {}
        for e in events:
            nodes = e.data.get("culprit_nodes")
            if e.workflow_id not in found and isinstance(nodes, list):
                found[e.workflow_id] = compress_hostlist(str(n) for n in nodes)
        return found

    def _from_store(self, culprits: dict[str, str]) -> list[JobRow]:
        try:
            summaries = self.gateway.store.jobs(limit=MAX_JOBS)
        except AuditStoreUnavailable:
            return []
        return [
            JobRow(
                j.cluster,
                j.job_id,
                j.workflow_id,
                False,
                j.last_type,
                "",
                "",
                "",
                culprits.get(j.workflow_id, ""),
                False,
                "",
                j.last_at,
            )
            for j in summaries
        ]


__all__ = ["MAX_JOBS", "JobRow", "JobsSnapshot", "LiveJobs"]
