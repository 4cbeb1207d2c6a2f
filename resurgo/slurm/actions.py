"""Scheduler actions, each idempotent: observe first, skip what is already true, act, re-observe.

A retried or replayed step (a worker killed after `scontrol` returned but before Temporal heard
of it) finds its effect already in Slurm and returns `already_satisfied` instead of acting twice.
The proof for requeue is Slurm's own `Restarts` counter: advice for attempt n is satisfied once
Restarts > n.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from resurgo.contracts import (
    ActionRequest,
    ActionResult,
    ActionStep,
    JobObservation,
    NodeObservation,
)
from resurgo.errors import TransientError
from resurgo.metrics.process import PROCESS
from resurgo.policy.directive import parse_directive
from resurgo.slurm import breaker
from resurgo.slurm.breaker import BreakerSettings, Remediation
from resurgo.slurm.client import SlurmClient, check_node_name
from resurgo.slurm.errors import (
    ActionsNotAllowed,
    JobGone,
    PreconditionFailed,
    SchedulerError,
)
from resurgo.slurm.hetjobs import component_ref, exclusions_by_component
from resurgo.slurm.json_records import observation

# KillWait (5 s here, 30 s by default) plus SIGKILL delivery bounds how long COMPLETING lasts.
SETTLE_TIMEOUT = 40.0
UNUSABLE_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING")
HOLD_TAG = "resurgo:hold"
RELEASED_TAG = "resurgo:released"
log = logging.getLogger(__name__)


class StillCompleting(SchedulerError, TransientError):
    """The job has not left COMPLETING yet (slow epilog, unkillable processes): retry later."""


def hold_key(idempotency_key: str) -> str:
    """The key of the hold a step of the same advice refers to: release and the fail-open
    release of `<wf>:g<n>:<step>` belong to the hold tagged `<wf>:g<n>:requeue_hold`."""
    return idempotency_key.rsplit(":", 1)[0] + ":requeue_hold"


def hold_comment(key: str, deadline: datetime | None, at: datetime | None = None) -> str:
    """AdminComment written with a hold; the fail-open watchdog reads the deadline from it, the
    circuit breaker the time of the hold (`at`)."""
    when = deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if deadline else "none"
    stamp = f" at={breaker.stamp(at)}" if at else ""
    return f"{HOLD_TAG} key={key} deadline={when}{stamp}"


def parse_hold_comment(text: str) -> tuple[str, datetime | None] | None:
    """(key, deadline) of a Resurgo hold, or None when the AdminComment is not ours."""
    if not text.startswith(HOLD_TAG + " "):
        return None
    fields = dict(part.split("=", 1) for part in text.split()[1:] if "=" in part)
    key = fields.get("key", "")
    deadline: datetime | None = None
    raw = fields.get("deadline", "none")
    if raw != "none":
        try:
            deadline = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            deadline = None
    return key, deadline


async def check_own_opt_in(slurm: SlurmClient, req: ActionRequest) -> None:
    """Refuse to act on a job whose own comment, read afresh from Slurm, does not opt in.

    What started the workflow was read from a cluster-wide listing; this re-reads the job itself
    just before acting, so a directive forged into a listing (or a job id since reused by
    another user's job) is never acted on."""
    obs = await slurm.show_job(req.job.job_id)
    if obs is None:
        raise JobGone(f"job {req.job.job_id} is no longer known to slurmctld")
    parsed = parse_directive(obs.comment)
    if not parsed.opted_in or parsed.directive is None:
        raise ActionsNotAllowed(
            f"job {obs.job_id} of user {obs.user!r} ({obs.state}) does not opt in to Resurgo "
            f"in its own comment; refusing {req.step.value}"
        )


class SlurmActions:
    """The steps that carry out advice, for one cluster."""

    def __init__(
        self,
        slurm: SlurmClient,
        breaker: BreakerSettings | None = None,
        cluster: str = "",
        settle_timeout: float = SETTLE_TIMEOUT,
    ) -> None:
        self.slurm = slurm
        self.settle_timeout = settle_timeout
        # None: no circuit breaker, per-node caps or cross-job memory (tests, tools).
        self.breaker = breaker
        self.cluster = cluster
        # Check-then-act of the breaker is serialised within this controller; across replicas
        # concurrent steps may still overshoot by the number in flight.
        self._remediating = asyncio.Lock()

    async def observe(self, job_id: int) -> JobObservation:
        obs = await self.slurm.show_job(job_id)
        if obs is None:
            raise JobGone(f"job {job_id} is no longer known to slurmctld")
        return obs

    def _result(
        self, req: ActionRequest, outcome: str, obs: JobObservation, detail: str
    ) -> ActionResult:
        return ActionResult(
            step=req.step,
            idempotency_key=req.idempotency_key,
            outcome="applied" if outcome == "applied" else "already_satisfied",
            observation=obs,
            detail=detail,
        )

    async def run(self, req: ActionRequest) -> ActionResult:
        if req.step != ActionStep.RELEASE:
            # A release undoes our own hold and must never be refused (fail open).
            await check_own_opt_in(self.slurm, req)
        handlers = {
            ActionStep.REQUEUE_HOLD: self.requeue_hold,
            ActionStep.EXCLUDE_NODES: self.exclude_nodes,
            ActionStep.RELEASE: self.release,
            ActionStep.CANCEL: self.cancel,
            ActionStep.DRAIN_NODE: self.drain_nodes,
        }
        return await handlers[req.step](req)

    async def requeue_hold(self, req: ActionRequest) -> ActionResult:
        job_id = req.job.job_id
        obs = await self.observe(job_id)
        if obs.restarts > req.attempt:
            await self._tag_hold(req, obs)
            return self._result(req, "satisfied", obs, f"Restarts={obs.restarts} > {req.attempt}")
        if obs.state == "PENDING":
            raise PreconditionFailed(f"job {job_id} is pending at attempt {req.attempt}")
        # Tag before hold: a hold must never exist without its fail-open deadline, whatever
        # happens after `requeuehold` (a COMPLETING that outlasts the wait, a failed update, a
        # killed controller). The tag survives the requeue. Slurm refuses AdminComment on a
        # finished job, which goes straight to PENDING held: that one is tagged after the hold.
        tagged = await self._tag_before_hold(req, obs)
        await self.slurm.requeue_hold(req.job.slurm_ref())
        after = await self.settled(job_id)
        if after.restarts <= req.attempt or not after.held:
            raise PreconditionFailed(
                f"requeuehold of job {job_id} left it {after.state} Restarts={after.restarts}"
            )
        if not tagged:
            try:
                await self._tag_hold(req, after)
            except SchedulerError:
                # An untagged hold is invisible to the watchdog: never keep one. A retry finds
                # Restarts > attempt and an unheld job, and carries on from there.
                log.warning("job %s: cannot tag the hold, releasing it at once", job_id)
                await self.slurm.release(req.job.slurm_ref())
                raise
        detail = "requeued and held"
        if obs.running:
            # The job is PENDING before the old attempt's srun has finished killing its step
            # (it waits KillWait + 2 s): a next attempt released at once onto the same nodes
            # can die on the leftovers, without a word in its output. Let the old one go first.
            grace = await self.slurm.kill_wait() + 2.0
            await asyncio.sleep(grace)
            detail += f", waited {grace:.0f}s for the old step to end (KillWait)"
        return self._result(req, "applied", await self.observe(job_id), detail)

    async def _tag_before_hold(self, req: ActionRequest, obs: JobObservation) -> bool:
        """Write the hold tag on a job that is not finished yet; False when Slurm refused it
        (the job finished meanwhile), so the tag must follow the hold."""
        if obs.terminal:
            return False
        try:
            await self.slurm.update_job(
                req.job.slurm_ref(),
                AdminComment=hold_comment(
                    req.idempotency_key, req.hold_deadline, datetime.now(UTC)
                ),
            )
        except JobGone:
            # "Job has already finished": it ended since it was observed; requeuehold decides.
            return False
        return True

    async def _tag_hold(self, req: ActionRequest, obs: JobObservation) -> None:
        """Write the fail-open deadline onto a hold that is ours and not yet tagged. An
        AdminComment someone else wrote marks their hold: never claimed (and so never lifted)."""
        theirs = bool(obs.admin_comment) and not obs.admin_comment.startswith("resurgo:")
        if obs.held and not theirs and req.idempotency_key not in obs.admin_comment:
            await self.slurm.update_job(
                req.job.slurm_ref(),
                AdminComment=hold_comment(
                    req.idempotency_key, req.hold_deadline, datetime.now(UTC)
                ),
            )

    async def settled(self, job_id: int, timeout: float | None = None) -> JobObservation:
        """Observe once the job has left COMPLETING: a requeued RUNNING job passes through it,
        and updates sent meanwhile are silently undone when it reaches PENDING (FOOTGUNS 1)."""
        wait = self.settle_timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            obs = await self.observe(job_id)
            if obs.state != "COMPLETING" or asyncio.get_running_loop().time() > deadline:
                return obs
            await asyncio.sleep(0.1)

    async def exclude_nodes(self, req: ActionRequest) -> ActionResult:
        job_id = req.job.job_id
        wanted = {check_node_name(n) for n in req.nodes}
        obs = await self.settled(job_id)
        if wanted <= set(obs.exc_node_list):
            advice = await self._cross_job(req, wanted)
            return self._result(req, "satisfied", obs, f"ExcNodeList={obs.exc_node_list}{advice}")
        if obs.state != "PENDING":
            raise PreconditionFailed(f"job {job_id} is {obs.state}; exclusions need PENDING")
        merged = sorted(set(obs.exc_node_list) | wanted)
        await self._check_capacity(obs, set(merged))
        async with self._remediating:
            await self._check_breaker(req, wanted)
            detail = f"ExcNodeList={','.join(merged)}"
            if len(obs.het_nodes) > 1:
                detail = await self._exclude_on_components(req, wanted)
            else:
                await self.slurm.update_job(req.job.slurm_ref(), ExcNodeList=",".join(merged))
            after = await self.observe(job_id)
        if not wanted <= set(after.exc_node_list):
            raise PreconditionFailed(f"ExcNodeList of job {job_id} is {after.exc_node_list}")
        advice = await self._cross_job(req, wanted)
        return self._result(req, "applied", after, f"{detail}{advice}")

    async def _exclude_on_components(self, req: ActionRequest, wanted: set[str]) -> str:
        """A heterogeneous job: each culprit is excluded on the component that ran it. Returns
        the step's detail, naming each component as Slurm does (`85+1 ExcNodeList=node3`)."""
        listing = await self.slurm.squeue_json()
        parts = listing.components(req.job.job_id) if listing is not None else []
        plan = exclusions_by_component(sorted(wanted), req.component_nodes, max(len(parts), 1))
        done = []
        for offset, nodes in sorted(plan.items()):
            had = set(observation(parts[offset]).exc_node_list) if parts else set()
            target, now = component_ref(req.job.job_id, offset), ",".join(sorted(had | nodes))
            await self.slurm.update_tasks(target, ExcNodeList=now)
            done.append(f"{target} ExcNodeList={now}")
        return "; ".join(done)

    async def remediations(self) -> tuple[list[Remediation], list[NodeObservation]]:
        """What Resurgo excluded/drained on this cluster (from Slurm), and the cluster's nodes."""
        # Structured records where Slurm has them: no user text can pose as an AdminComment.
        jobs = list((await self.slurm.all_jobs()).values())
        nodes = await self.slurm.show_nodes()
        facts = breaker.remediations_from_jobs(jobs, self.cluster)
        facts += breaker.remediations_from_nodes(nodes, self.cluster)
        return facts, nodes

    async def _check_breaker(self, req: ActionRequest, nodes: set[str]) -> None:
        """Refuse (PreconditionFailed) what the circuit breaker or a per-node cap forbids."""
        if self.breaker is None or not nodes:
            return
        facts, all_nodes = await self.remediations()
        now = datetime.now(UTC)  # resurgo_breaker_open{cluster} on /metrics:
        PROCESS.breaker_checked(self.cluster, breaker.open_until(
            facts, total_nodes=len(all_nodes), settings=self.breaker, now=now))  # fmt: skip
        why = breaker.refusal(
            facts, cluster=self.cluster, job_id=req.job.job_id, requested=nodes,
            total_nodes=len(all_nodes), settings=self.breaker, now=now,
        )  # fmt: skip
        if why:
            raise PreconditionFailed(f"{req.step.value} refused by {why}")

    async def _cross_job(self, req: ActionRequest, nodes: set[str]) -> str:
        """Cross-job memory: a node this job excluded that failures of `drain_after_jobs`
        distinct jobs implicated in the window gets a drain advice; drained only when the
        cluster allows it. Returns text for the step's detail."""
        settings = self.breaker
        if settings is None or not nodes:
            return ""
        facts, all_nodes = await self.remediations()
        unusable = {n.name for n in all_nodes if any(bad in n.state for bad in UNUSABLE_STATES)}
        now = datetime.now(UTC)
        # Our own exclusion counts even if slurmctld does not show the tag yet.
        facts += [Remediation(n, "exclude", req.job.job_id, now) for n in nodes]
        advised = {
            node: count
            for node, count in breaker.nodes_to_drain(
                facts, settings.drain_after_jobs, settings.window, now
            ).items()
            if node in nodes
        }
        notes = []
        for node, count in advised.items():
            note = f"node {node} implicated in {count} jobs: drain advised"
            if settings.allow_drain and node in unusable:
                note += " (already out of service: left as it is)"
            elif settings.allow_drain:
                # Part of this job's remediation: the per-node cap counted it with the exclusion,
                # and the node already counts towards the breaker, so draining it adds nothing.
                reason = f"resurgo cross-job: implicated in {count} jobs ({req.idempotency_key})"
                await self.slurm.drain_node(check_node_name(node), reason[:250])
                note += " (drained)"
            else:
                note += " (allow_drain is off)"
            log.warning("%s: %s", self.cluster, note)
            notes.append(note)
        return "; " + "; ".join(notes) if notes else ""

    async def _check_capacity(self, obs: JobObservation, excluded: set[str]) -> None:
        """Refuse an exclusion that would leave the job fewer usable nodes than it needs: a job
        excluded out of its partition would wait forever instead of failing over."""
        if obs.num_nodes <= 0:
            return
        nodes = await self.slurm.show_nodes()
        usable = [
            n.name
            for n in nodes
            if n.name not in excluded and not any(bad in n.state for bad in UNUSABLE_STATES)
        ]
        if len(usable) < obs.num_nodes:
            raise PreconditionFailed(
                f"excluding {','.join(sorted(excluded))} would leave {len(usable)} usable "
                f"node(s) for a {obs.num_nodes}-node job"
            )

    async def release(self, req: ActionRequest) -> ActionResult:
        job_id = req.job.job_id
        obs = await self.settled(job_id)
        if obs.state == "COMPLETING":
            # It may still become PENDING held (ours, after a requeue): try again shortly.
            raise StillCompleting(f"job {job_id} is still COMPLETING; release retried")
        hold = parse_hold_comment(obs.admin_comment)
        if obs.held and (hold is None or hold_key(hold[0]) != hold_key(req.idempotency_key)):
            # Someone else's hold (an operator's `scontrol hold`, another tool's): not ours to
            # lift. Reported in the step's detail; the job stays as its owner left it.
            log.warning("job %s: held, but not by this advice (AdminComment %r): left alone",
                        job_id, obs.admin_comment[:200])  # fmt: skip
            theirs = obs.admin_comment[:200]
            detail = f"not released: the hold is not Resurgo's (AdminComment={theirs!r})"
            return self._result(req, "satisfied", obs, detail)
        released = obs.held
        if released:
            # Release first: dying before the retag leaves an unheld job with a stale tag
            # (harmless); the other order could leave a hold the watchdog no longer recognises.
            await self.slurm.release(req.job.slurm_ref())
            now = breaker.stamp(datetime.now(UTC))
            tag = f"{RELEASED_TAG} key={req.idempotency_key} at={now}"
            await self.slurm.update_job(req.job.slurm_ref(), AdminComment=tag)
            obs = await self.observe(job_id)
        if obs.state == "PENDING" and not obs.held and self._ours(obs, req):
            # A requeued job waits on BeginTime (~2 min) unless told to start now; Slurm takes
            # this only once the job is released. Repeating it is harmless, so a retry after a
            # crash between release and this line still gets the job started.
            await self.slurm.update_job(req.job.slurm_ref(), StartTime="now")
            obs = await self.observe(job_id)
        outcome = "applied" if released else "satisfied"
        return self._result(req, outcome, obs, f"released={released}, StartTime=now")

    @staticmethod
    def _ours(obs: JobObservation, req: ActionRequest) -> bool:
        """The job carries a Resurgo tag (hold, released) of the same advice as `req`."""
        fields = dict(p.split("=", 1) for p in obs.admin_comment.split()[1:3] if "=" in p)
        tagged = obs.admin_comment.startswith("resurgo:") and "key" in fields
        return tagged and hold_key(fields["key"]) == hold_key(req.idempotency_key)

    async def cancel(self, req: ActionRequest) -> ActionResult:
        job_id = req.job.job_id
        obs = await self.observe(job_id)
        if obs.terminal:
            return self._result(req, "satisfied", obs, f"already {obs.state}")
        await self.slurm.cancel(req.job.slurm_ref())
        for _ in range(20):
            after = await self.observe(job_id)
            if after.terminal or after.state == "COMPLETING":
                return self._result(req, "applied", after, "cancelled")
            await asyncio.sleep(0.5)
        return self._result(req, "applied", after, "cancel sent")

    async def drain_nodes(self, req: ActionRequest) -> ActionResult:
        nodes = [check_node_name(n) for n in req.nodes]
        observed = {n.name: n for n in await self.slurm.show_nodes(nodes)}
        todo = [
            n
            for n in nodes
            if not ("DRAIN" in observed[n].state and req.idempotency_key in observed[n].reason)
        ] if observed else nodes  # fmt: skip
        async with self._remediating:
            await self._check_breaker(req, set(todo))
            for node in todo:
                reason = f"resurgo {req.idempotency_key}: {req.reason}"[:250]
                await self.slurm.drain_node(node, reason)
        obs = await self.observe(req.job.job_id)
        outcome = "applied" if todo else "satisfied"
        return self._result(req, outcome, obs, f"drained {','.join(todo) or 'nothing new'}")
