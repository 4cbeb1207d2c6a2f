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
from resurgo.slurm.errors import ParseError
from resurgo.slurm.json_records import Listing
from resurgo.slurm.parsers import parse_job

log = logging.getLogger(__name__)

_FIELD = "\x1f"
_ROW_END = "\x1e"
_TEXTS_FORMAT = f"%i{_FIELD}%j{_FIELD}%k{_ROW_END}"
# Jobs asked about within this many seconds stay in the listing's squeue filter.
_INTEREST_SECONDS = 30.0
# squeue -j takes a comma list; keep each command line well below ARG_MAX.
_IDS_PER_SQUEUE = 2000
# A listing is not taken again sooner than this many times as long as the last one took, so
# listings cost at most about a quarter of the time however big the cluster: at 1,000 jobs an
# `squeue --json` is ~4 MB, 0.2-1.5 s of slurmctld and JSON decoding each.
LISTING_COST_FACTOR = 4.0


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
    # `squeue --json`: every job slurmctld holds, parsed when first asked about. A watch that
    # began while this was being taken finds its job here instead of asking alone: at a
    # thousand new jobs those lone asks were each a whole listing too (22.05 ignores -j),
    # hundreds at once, and took a 24 GB machine out of memory.
    raw: Listing | None = None
    unreadable: set[int] = field(default_factory=set)

    def get(self, job_id: int) -> JobObservation | None:
        job = self.jobs.get(job_id)
        raw = self.raw
        if job is not None or raw is None or job_id in self.unreadable:
            return job
        try:
            job = raw.observation(job_id)
        except ParseError as exc:  # costs this job only: it is asked about on its own
            log.error("job listing: %s; asking about it alone", exc)
            self.unreadable.add(job_id)
            return None
        if job is not None:
            self.jobs[job_id] = job
        return job


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
        self._refresh_started = 0.0
        self._interest: dict[int, float] = {}
        self._parsed: dict[int, tuple[str, JobObservation]] = {}
        self.refreshes = 0
        self.fallbacks = 0
        self.last_cost = 0.0  # seconds the last listing took

    @property
    def effective_max_age(self) -> float:
        """`max_age`, or longer when listings are slow (LISTING_COST_FACTOR)."""
        return max(self.max_age, LISTING_COST_FACTOR * self.last_cost)

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation | None:
        now = self._clock()
        self._interest[job_id] = now
        listing = self._listing
        if listing is None or now - listing.taken_at > self.effective_max_age:
            listing = await self._refreshed()
        cached = listing.get(job_id)
        if cached is None and listing.taken_at < now:
            # Newer than the listing (a watch that just began): the next listing, shared with
            # every other such watch. Asked alone it would be a whole listing each on Slurm
            # before 23.02, which ignores -j with --json.
            listing = await self._refreshed(newer_than=now)
            cached = listing.get(job_id)
        # Older than what the caller knows (taken before its own requeue): never report that.
        if cached is not None and cached.restarts >= at_least_restarts:
            return cached
        self.fallbacks += 1
        return await self.slurm.show_job(job_id)

    async def _refreshed(self, newer_than: float | None = None) -> _Listing:
        """A listing no older than the effective max age, or (`newer_than`) one begun since."""
        while True:
            listing = self._listing
            if listing is not None:
                if newer_than is not None and listing.taken_at >= newer_than:
                    return listing
                age = self._clock() - listing.taken_at
                if newer_than is None and age <= self.effective_max_age:
                    return listing
            refresh = self._refresh
            if refresh is None or refresh.done():
                self._refresh_started = self._clock()
                self._refresh = refresh = asyncio.create_task(self._take())
            elif newer_than is not None and self._refresh_started < newer_than:
                # The one under way began too early: wait for it, then for a newer one.
                await asyncio.shield(refresh)
                continue
            # Shielded: one watch being cancelled must not cancel the refresh others wait on.
            return await asyncio.shield(refresh)

    async def _take(self) -> _Listing:
        started = self._clock()
        try:
            return await self._list(started)
        finally:
            self.last_cost = max(0.0, self._clock() - started)

    async def _list(self, started: float) -> _Listing:
        cutoff = started - _INTEREST_SECONDS
        self._interest = {j: t for j, t in self._interest.items() if t >= cutoff}
        ids = sorted(self._interest)
        listing = _Listing(taken_at=started)
        if await self.slurm.structured() and (raw := await self.slurm.squeue_json()) is not None:
            listing.raw = raw
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
