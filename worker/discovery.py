"""Job discovery: every opted-in job on a cluster gets exactly one JobRecoveryWorkflow.

The workflow id is the job's identity (cluster, job id, submit time), so starting is idempotent:
a second start of a running workflow returns the existing one, a finished one is never
restarted. A malformed directive still starts a (short) workflow, which records the problem in
the audit trail and leaves the job alone.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from resurgo.config import ClusterSettings, ConfigError, ResurgoConfig
from resurgo.contracts import CORE_TASK_QUEUE, TERMINAL_STATES, RecoveryInput
from resurgo.policy.directive import parse_directive
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import CommandTimeout, SchedulerError, SchedulerUnavailable
from resurgo.slurm.hetjobs import listed_components
from resurgo.slurm.parsers import DiscoveredJob
from resurgo.slurm.snapshot import LISTING_COST_FACTOR
from resurgo.worker.array_discovery import ArrayDiscovery, job_key
from resurgo.workflows import search_attributes as sa
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

log = logging.getLogger("resurgo.discovery")

# A job whose data fails is looked at again after this long (seconds), not at every poll.
BAD_JOB_RETRY = 60.0
# New jobs looked at (Temporal visibility query, workflow start) at once in one poll.
DISCOVERY_CONCURRENCY = 16
# Temporal itself is unavailable: the poll ends (and is retried), no job is blamed.
_TEMPORAL_DOWN = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)


def recovery_input(
    cluster: str, settings: ClusterSettings, config: ResurgoConfig, job: DiscoveredJob
) -> RecoveryInput | None:
    """The workflow input for a discovered job, or None when the job did not opt in."""
    parsed = parse_directive(job.comment)
    if not parsed.opted_in or job.submit_time is None:
        return None
    problems = list(parsed.problems)
    directive = parsed.directive
    # A broken directive cannot say which environment it meant: report it everywhere.
    if (
        settings.environment is not None
        and directive is not None
        and directive.environment != settings.environment
    ):
        return None
    policy = config.policy(None)
    if directive is not None and directive.policy:
        try:
            policy = config.policy(directive.policy)
        except ConfigError as exc:
            problems.append(str(exc))
            directive = None
    return RecoveryInput(
        job=job_key(cluster, job),
        directive=directive,
        problems=problems,
        policy=policy,
        gates=settings.gates(),
        hold_timeout_seconds=settings.hold_timeout,
        job_name=job.name,
        user=job.user,
        partition=job.partition,
    )


def is_recent(job: DiscoveredJob, lookback: float, now: datetime) -> bool:
    if job.state not in TERMINAL_STATES:
        return True
    return job.end_time is not None and now - job.end_time <= timedelta(seconds=lookback)


class Discovery(ArrayDiscovery):
    def __init__(
        self, client: Client, slurm: SlurmClient, cluster: str, config: ResurgoConfig
    ) -> None:
        self.client = client
        self.slurm = slurm
        self.cluster = cluster
        self.config = config
        self.settings = config.cluster(cluster)
        # Candidate workflow ids already handled -> when to look again (None: never).
        self.known: dict[str, float | None] = {}
        # Jobs listed at the last poll that did not opt in -> the comment that said so.
        self._not_opted: dict[str, str] = {}
        self.listing_cost = 0.0  # seconds the last poll's job listing took
        # This poll's hetjob leaders -> their components' own job ids by offset.
        self._het_ids: dict[int, list[int]] = {}

    async def run_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except SchedulerError as exc:
                log.warning("discovery on %s: Slurm unavailable: %s", self.cluster, exc)
            except RPCError as exc:
                log.warning("discovery on %s: Temporal unavailable: %s", self.cluster, exc)
            except Exception:
                # Nothing a poll meets may end discovery: log it and poll again.
                log.exception("discovery on %s: poll failed", self.cluster)
            # A slow listing (a big cluster) is taken less often, as the watches' (snapshot).
            await asyncio.sleep(
                max(self.settings.discovery_interval, LISTING_COST_FACTOR * self.listing_cost)
            )

    async def poll_once(self) -> list[str]:
        """Start workflows for newly seen opted-in jobs; returns the ids started now.

        Each job is handled on its own: whatever its fields hold (a directive that breaks the
        parser, text that cannot be serialised, a value Temporal rejects) costs that job alone,
        logged and looked at again later. Only Slurm or Temporal being unavailable ends a poll.
        """
        now = datetime.now(UTC)
        clock = asyncio.get_running_loop().time()
        not_opted: dict[str, str] = {}
        jobs = await self.slurm.list_jobs()
        self.listing_cost = asyncio.get_running_loop().time() - clock
        self._het_ids = listed_components(jobs)
        candidates: list[tuple[DiscoveredJob, RecoveryInput]] = []
        for job in jobs:
            try:
                inp = self._candidate(job, now, clock, not_opted)
            except Exception as exc:
                self._job_failed(job, exc, clock)
                continue
            if inp is not None:
                candidates.append((job, inp))
        self._not_opted = not_opted
        # Each candidate waits on Temporal (a visibility query, a start) and maybe on Slurm: a
        # thousand new jobs one after another took a quarter of an hour to be monitored.
        gate = asyncio.Semaphore(DISCOVERY_CONCURRENCY)
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(self._settle(j, i, now, clock, gate)) for j, i in candidates
                ]
        except ExceptionGroup as failed:
            # Slurm or Temporal unavailable: the poll ends, as run_forever expects one error.
            raise failed.exceptions[0] from None
        return [inp.job.workflow_id() for (_, inp), t in zip(candidates, tasks, strict=True)
                if t.result()]  # fmt: skip

    async def _settle(
        self,
        job: DiscoveredJob,
        inp: RecoveryInput,
        now: datetime,
        clock: float,
        gate: asyncio.Semaphore,
    ) -> bool:
        """Start the candidate's workflow unless one runs; False if none was started. Whatever
        the job holds costs it alone; only Slurm or Temporal being unavailable is raised."""
        async with gate:
            try:
                return await self._consider(job, inp, now, clock)
            except (SchedulerUnavailable, CommandTimeout):
                raise
            except RPCError as exc:
                if exc.status in _TEMPORAL_DOWN:
                    raise
                self._job_failed(job, exc, clock)
            except Exception as exc:
                self._job_failed(job, exc, clock)
            return False

    def _job_failed(self, job: DiscoveredJob, exc: BaseException, clock: float) -> None:
        # repr: the message may quote the job's own text, newlines and all.
        log.error(
            "discovery on %s: job %s skipped (looked at again in %.0fs): %s: %s",
            self.cluster, job.job_id, BAD_JOB_RETRY, type(exc).__name__, repr(str(exc))[:500],
        )  # fmt: skip
        if job.submit_time is not None:
            self.known[job_key(self.cluster, job).workflow_id()] = clock + BAD_JOB_RETRY

    def _candidate(
        self, job: DiscoveredJob, now: datetime, clock: float, not_opted: dict[str, str]
    ) -> RecoveryInput | None:
        """The workflow input of a job worth a closer look this poll, or None. No I/O: most of a
        cluster's jobs never opt in and cost only this."""
        if job.submit_time is None:
            return None
        wf_id = job_key(self.cluster, job).workflow_id()
        recheck = self.known.get(wf_id, 0.0)
        if recheck is None or recheck > clock:
            return None
        # Directives are parsed once per job and comment, not at every poll: a cluster
        # holds thousands of jobs, most of which never opt in (or opt in later, by
        # `scontrol update Comment=`, which changes the text and is seen then).
        if self._not_opted.get(wf_id) == job.comment:
            not_opted[wf_id] = job.comment
            return None
        inp = recovery_input(self.cluster, self.settings, self.config, job)
        if inp is None:
            not_opted[wf_id] = job.comment
            return None
        if not is_recent(job, self.settings.discovery_lookback, now):
            return None
        return inp

    async def _consider(
        self, job: DiscoveredJob, inp: RecoveryInput, now: datetime, clock: float
    ) -> bool:
        wf_id = inp.job.workflow_id()
        if job.unreadable:
            await self._skip(job, inp, job.unreadable)
            return False
        if job.het_job_id is not None and job.het_job_id != job.job_id:
            return False  # a heterogeneous job's component: its leader's workflow follows all
        if job.het_job_id is not None:
            inp = inp.model_copy(update={"het_job_ids": self._het_ids.get(job.job_id, [])})
        if job.array_job_id is not None and not await self._array_row(job, inp, clock):
            return False
        if not await self._own_comment_agrees(job):
            self.known[wf_id] = clock + BAD_JOB_RETRY
            return False
        # Slurm rewrites SubmitTime on every requeue, so a requeued job shows up under a new
        # candidate id. A running workflow for the same job id is that job: leave it be, and
        # look again later in case it ends because the id was reused by a different job.
        # A finished job also counts as handled when a workflow for it ran recently (its last
        # requeue changed SubmitTime after that workflow started).
        recent = now - timedelta(seconds=self.settings.discovery_lookback)
        closed_since = recent if job.state in TERMINAL_STATES else None
        if await self.existing_workflow_for(inp.job.slurm_ref(), closed_since=closed_since):
            self.known[wf_id] = clock + 30.0
            return False
        started = await self.start(inp)
        self.known[wf_id] = None
        return started

    async def _own_comment_agrees(self, job: DiscoveredJob) -> bool:
        """Slurm without `squeue --json`: a row in the text listing may be forged in another
        job's comment, so the job's own comment is read on its own and must be the same."""
        if await self.slurm.structured():
            return True
        own = await self.slurm.job_comment(job.job_id)
        if (own or "") == job.comment:
            return True
        log.error(
            "discovery on %s: job %s's listed comment is not its own (a row forged in another "
            "job's comment?); ignored", self.cluster, job.job_id,
        )  # fmt: skip
        return False

    async def existing_workflow_for(
        self, job_id: int | str, *, closed_since: datetime | None = None
    ) -> str | None:
        """A running workflow for this job id (or, with `closed_since`, one started since)."""
        status = 'ExecutionStatus = "Running"'
        if closed_since is not None:
            stamp = closed_since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            status = f'({status} OR StartTime > "{stamp}")'
        query = f'ResurgoCluster = "{self.cluster}" AND ResurgoSlurmJobId = "{job_id}" AND {status}'
        async for execution in self.client.list_workflows(query, limit=1):
            return execution.id
        return None

    async def start(self, inp: RecoveryInput) -> bool:
        mode = inp.directive.mode.value if inp.directive else "invalid"
        name = f" {inp.job_name}" if inp.job_name else ""
        try:
            await self.client.start_workflow(
                JobRecoveryWorkflow.run,
                inp,
                id=inp.job.workflow_id(),
                task_queue=CORE_TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(sa.CLUSTER, inp.job.cluster),
                        SearchAttributePair(sa.SLURM_JOB_ID, inp.job.slurm_ref()),
                        SearchAttributePair(sa.USER, inp.user or "-"),
                        SearchAttributePair(sa.PARTITION, inp.partition or "-"),
                        SearchAttributePair(sa.MODE, mode),
                    ]
                ),
                static_summary=f"{inp.job.label()}{name} ({mode})"[:200],
                static_details=_details(inp),
            )
        except WorkflowAlreadyStartedError:
            return False
        log.info("monitoring %s (%s)", inp.job.label(), mode)
        return True


def _details(inp: RecoveryInput) -> str:
    task = f" (task {inp.job.slurm_ref()} of an array)" if inp.job.array_job_id is not None else ""
    lines = [
        f"**Slurm job** {inp.job.job_id}{task} on cluster `{inp.job.cluster}`",
        f"submitted {inp.job.submit_time.isoformat()} by `{inp.user}` to `{inp.partition}`",
        f"**policy** `{inp.policy.name}`; scheduler actions acknowledged: "
        f"{inp.gates.acknowledge_scheduler_actions}",
    ]
    if inp.directive:
        lines.append(f"**directive** `{inp.directive.model_dump_json(exclude_defaults=True)}`")
    if inp.problems:
        lines.append("**problems**: " + "; ".join(inp.problems))
    return "\n\n".join(lines)
