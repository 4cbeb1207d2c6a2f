"""One cluster-wide job listing per poll, shared by every watch of a controller.

Asking slurmctld about each watched job on its own costs a command per job per poll: at a
thousand jobs that is thousands of RPCs a second, which neither slurmctld nor a 2-core controller
can serve. Instead one `squeue --json` (all jobs; each field a JSON value, so no user text can
pose as another job or field) refreshes a shared snapshot, and concurrent watches that want
fresher state than the snapshot wait for the same refresh. A job whose record cannot be read is
left out of the snapshot (logged) and so asked about on its own: it fails alone.

Slurm without `squeue --json` is read from text: one `scontrol show -o job` (all jobs) plus one
`squeue -j <watched ids>` (their exact names and comments, for the anti-spoof cut-out in
`parse_job`), with the defences described at `parse_texts` and `parse_listing`.

Only watches read through here: scheduler actions and verification always ask for fresh state.
A job missing from the listing (submitted after it, or purged) is asked about on its own.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from resurgo.contracts import JobObservation
from resurgo.errors import PermanentError
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.parsers import parse_job

log = logging.getLogger(__name__)

_FIELD = "\x1f"
_ROW_END = "\x1e"
_TEXTS_FORMAT = f"%i{_FIELD}%j{_FIELD}%k{_ROW_END}"
# Jobs asked about within this many seconds stay in the listing's squeue filter.
_INTEREST_SECONDS = 30.0
# squeue -j takes a comma list; keep each command line well below ARG_MAX.
_IDS_PER_SQUEUE = 2000


class JobReader(Protocol):
    """What a watch needs of the scheduler (a `JobSnapshot` in the controller)."""

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation | None:
        """The job as Slurm shows it, or None when slurmctld no longer knows it. A reader that
        serves older state asks afresh when its copy shows fewer restarts than the caller
        already knows of (the workflow requeued the job after that copy was taken)."""
        ...


class ListingTampered(PermanentError):
    """User text in the listing could pose as other jobs' records: do not trust this listing."""


def parse_texts(output: str) -> dict[int, tuple[str, str | None]]:
    """`squeue -o '%i<US>%j<US>%k<RS>'` rows → {job id: (name, comment)}.

    `scontrol show -o` prints names and comments raw: a newline in either splits that job's
    record (and can forge a whole `JobId=...` line for another job). Such jobs are left out here,
    so they are asked about on their own. Rows that do not even split (separators inside user
    text) make the whole listing untrusted.
    """
    texts: dict[int, tuple[str, str | None]] = {}
    if not output.strip():
        return texts
    rows = output.split(_ROW_END + "\n")
    if rows[-1].strip() == "":
        rows.pop()
    left_out: set[int] = set()
    for row in rows:
        parts = row.split(_FIELD)
        if len(parts) != 3 or not parts[0].isdigit() or int(parts[0]) in texts:
            raise ListingTampered(f"unexpected squeue row {row[:120]!r}")
        job_id, name, comment = int(parts[0]), parts[1], parts[2]
        if "\n" in name or "\n" in comment or job_id in left_out:
            left_out.add(job_id)
            continue
        texts[job_id] = (name, None if comment in ("", "(null)") else comment)
    return texts


# Fields that change every second for a running job and that no watch reads.
_CLOCK_FIELDS = re.compile(r" RunTime=\S+")


def parse_listing(
    scontrol: str,
    texts: dict[int, tuple[str, str | None]],
    cache: dict[int, tuple[str, JobObservation]] | None = None,
) -> dict[int, JobObservation]:
    """The records of the jobs in `texts` from a full `scontrol show -o job` listing.

    A watched job whose id heads more than one line has a record forged in some other job's
    text: it is left out (asked about on its own). `cache` (job id -> record without its clock
    fields, observation) is read and refreshed, so an unchanged record is not parsed again.
    """
    jobs: dict[int, JobObservation] = {}
    seen: set[int] = set()
    for line in scontrol.split("\n"):
        if not line.startswith("JobId="):
            continue
        head = line[6 : line.find(" ", 6)] if " " in line else line[6:]
        if not head.isdigit() or int(head) not in texts:
            continue
        job_id = int(head)
        if job_id in seen:
            log.warning("job listing: job %s heads two records; asking about it alone", job_id)
            jobs.pop(job_id, None)
            continue
        seen.add(job_id)
        name, comment = texts[job_id]
        key = _CLOCK_FIELDS.sub("", line) + "\x00" + name + "\x00" + (comment or "")
        if cache is not None and (hit := cache.get(job_id)) is not None and hit[0] == key:
            jobs[job_id] = hit[1]
            continue
        try:
            jobs[job_id] = parse_job(line, comment, name)
        except Exception as exc:  # one job's record, whatever it holds, costs only that job
            log.error("job listing: skipping job %s: %s: %r", job_id, type(exc).__name__, exc)
            continue
        if cache is not None:
            cache[job_id] = (key, jobs[job_id])
    if cache is not None:
        for gone in [j for j in cache if j not in jobs]:
            del cache[gone]
    return jobs


@dataclass
class _Listing:
    taken_at: float
    jobs: dict[int, JobObservation] = field(default_factory=dict)


class JobSnapshot:
    """`show_job` with the same contract as `SlurmClient.show_job`, served from a shared listing
    at most `max_age` seconds old."""

    def __init__(
        self,
        slurm: SlurmClient,
        max_age: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slurm = slurm
        self.max_age = max_age
        self._clock = clock
        self._listing: _Listing | None = None
        self._refresh: asyncio.Task[_Listing] | None = None
        self._interest: dict[int, float] = {}
        self._parsed: dict[int, tuple[str, JobObservation]] = {}
        self.refreshes = 0
        self.fallbacks = 0

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation | None:
        now = self._clock()
        self._interest[job_id] = now
        listing = self._listing
        if listing is None or now - listing.taken_at > self.max_age or job_id not in listing.jobs:
            listing = await self._refreshed()
        cached = listing.jobs.get(job_id)
        # Older than what the caller knows (taken before its own requeue): never report that.
        if cached is not None and cached.restarts >= at_least_restarts:
            return cached
        self.fallbacks += 1
        return await self.slurm.show_job(job_id)

    async def _refreshed(self) -> _Listing:
        listing = self._listing
        # A job newer than a fresh listing needs no new listing: it is asked about on its own.
        if listing is not None and self._clock() - listing.taken_at <= self.max_age:
            return listing
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._take())
        # Shielded: one watch being cancelled must not cancel the refresh the others wait on.
        return await asyncio.shield(self._refresh)

    async def _take(self) -> _Listing:
        started = self._clock()
        cutoff = started - _INTEREST_SECONDS
        self._interest = {j: t for j, t in self._interest.items() if t >= cutoff}
        ids = sorted(self._interest)
        listing = _Listing(taken_at=started)
        if await self.slurm.structured():
            listing.jobs = await self.slurm.all_jobs(set(ids))
            self.refreshes += 1
            self._listing = listing
            return listing
        try:
            # The listing first: a job purged before it is then gone from squeue too, so a
            # record forged in another job's text never stands alone for it.
            records = await self.slurm.all_job_records()
            texts: dict[int, tuple[str, str | None]] = {}
            for i in range(0, len(ids), _IDS_PER_SQUEUE):
                rows = await self.slurm.squeue_rows(ids[i : i + _IDS_PER_SQUEUE], _TEXTS_FORMAT)
                texts.update(parse_texts(rows))
            listing.jobs = parse_listing(records, texts, self._parsed)
        except ListingTampered as exc:
            # Correct but slower: every watched job is asked about on its own until it is gone.
            log.warning("cluster job listing not trusted (%s); asking per job", exc)
        self.refreshes += 1
        self._listing = listing
        return listing
