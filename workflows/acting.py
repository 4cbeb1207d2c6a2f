"""Carrying out advice: the scheduler steps (requeue_hold → exclude_nodes → release, or cancel,
drain), each exactly once by its idempotency key; the fail-open release when a step after the
hold failed; and verification from a fresh scheduler observation."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from resurgo.activities import calls
    from resurgo.contracts import (
        ActionRequest,
        ActionResult,
        ActionStep,
        Advice,
        AdviceKind,
        AuditEventType,
        Reconciliation,
        VerifyRequest,
    )
    from resurgo.policy import decide as policy
    from resurgo.workflows import narrative, patches
    from resurgo.workflows.base import RecoveryBase


class SchedulerSteps(RecoveryBase):
    # A heterogeneous job's nodes per component when the failure was seen (set before acting):
    # the controller excludes each culprit on the component that ran it.
    _het_nodes: tuple[tuple[str, ...], ...] = ()

    async def _act(self, advice: Advice) -> str | None:
        try:
            return await self._carry_out(advice)
        finally:
            self._holding = False

    async def _carry_out(self, advice: Advice) -> str | None:
        self._set_phase("acting")
        deadline = workflow.now() + timedelta(seconds=self.inp.hold_timeout_seconds)
        all_satisfied = True
        for step in policy.advice_steps(advice):
            key = f"{self.wfid}:g{advice.generation}:{step}"
            if key in self.s.completed_actions:
                continue
            nodes = (
                sorted(set(self.s.excluded_nodes) | set(advice.nodes))
                if step == ActionStep.EXCLUDE_NODES.value
                else advice.drain_nodes if step == ActionStep.DRAIN_NODE.value else []
            )  # fmt: skip
            req = ActionRequest(
                job=self.inp.job,
                step=ActionStep(step),
                idempotency_key=key,
                attempt=advice.attempt,
                nodes=nodes,
                reason=advice.reason,
                hold_deadline=deadline,
                cursor=self.s.cursor,
                component_nodes=[list(c) for c in self._het_nodes]
                if step == ActionStep.EXCLUDE_NODES.value
                else [],
            )
            if step == ActionStep.REQUEUE_HOLD.value:
                self._holding = True  # from here a hold of ours may exist until released
            try:
                res = await self._on_cluster(
                    calls.act,
                    req,
                    calls.scheduler_action(self.inp.hold_timeout_seconds),
                    activity_id=key,
                    summary=f"{step} job {self.inp.job.job_id}"
                    + (f" nodes {narrative.escape_all(nodes)}" if nodes else ""),
                )
            except ActivityError as err:
                await self._audit(
                    AuditEventType.RECONCILIATION,
                    f"abandoned: {step} failed ({err.cause or err})",
                    attempt=advice.attempt,
                    data={"status": "abandoned", "reason": "action_failed", "step": step},
                    suffix=f"g{advice.generation}",
                )
                held = f"{self.wfid}:g{advice.generation}:requeue_hold" in self.s.completed_actions
                if held and step != "release" and workflow.patched(patches.FAIL_OPEN_RELEASE):
                    return await self._fail_open(advice)
                # requeue_hold itself failed: it may have held the job before failing (COMPLETING
                # past the wait, a failed update, retries exhausted). Release whatever hold of
                # ours there is; the release step touches only a job tagged by this advice.
                started = step == ActionStep.REQUEUE_HOLD.value
                if started and workflow.patched(patches.FAIL_OPEN_HOLD_STARTED):
                    return await self._fail_open(advice, only_if_requeued=True)
                self.s.outcome = "action_failed"
                return "action_failed"
            if step == ActionStep.RELEASE.value:
                self._holding = False
            if step == ActionStep.REQUEUE_HOLD.value and res.output_end is not None:
                # The old attempt's output ends here. The next attempt's watch reads on from
                # it even when it first sees the job RUNNING, never seeing it PENDING (a
                # release that starts the job at once, a worker restarted after the release).
                # Only state changes, no command: a history recorded before output_end
                # existed replays with it None, so no patch is needed.
                self.s.cursor = res.output_end
            self.s.completed_actions[key] = res.outcome
            if step == ActionStep.EXCLUDE_NODES.value:
                self.s.excluded_nodes = nodes
            all_satisfied = all_satisfied and res.outcome == "already_satisfied"
            await self._audit(
                AuditEventType.ACTION,
                f"{step}: {res.outcome} ({res.detail})",
                attempt=advice.attempt,
                data=res.model_dump(mode="json", exclude={"observation"}),
                suffix=key,
            )
        self._prune_completed(advice.generation)
        rec = await self._verify(advice, all_satisfied)
        if advice.kind == AdviceKind.STOP:
            self.s.outcome = "stopped"
            return "stopped"
        if rec.status != "converged":
            self.s.outcome = "not_converged"
            return "not_converged"
        self._next_attempt(advice.attempt + 1)
        return None

    async def _fail_open(self, advice: Advice, only_if_requeued: bool = False) -> str | None:
        """A step after our hold failed: never leave the job held because of us. Release it as
        it is (plain Slurm behaviour) and follow the next attempt. `only_if_requeued`: the
        hold may never have happened; follow a next attempt only if Slurm shows one."""
        key = f"{self.wfid}:g{advice.generation}:fail_open_release"
        try:
            res: ActionResult = await self._on_cluster(
                calls.act,
                ActionRequest(job=self.inp.job, step=ActionStep.RELEASE, idempotency_key=key,
                              attempt=advice.attempt, reason="fail-open after a failed step"),
                calls.scheduler_action(self.inp.hold_timeout_seconds),
                activity_id=key,
                summary=f"fail-open release job {self.inp.job.job_id}",
            )  # fmt: skip
            self._holding = False
        except ActivityError as err:
            await self._audit(AuditEventType.ACTION,
                              f"fail-open release failed ({err.cause or err}); the watchdog "
                              "releases the hold at its deadline",
                              attempt=advice.attempt, suffix=key)  # fmt: skip
            self.s.outcome = "action_failed"
            return "action_failed"
        await self._audit(AuditEventType.ACTION,
                          f"release (fail-open): {res.outcome} ({res.detail})",
                          attempt=advice.attempt, data=res.model_dump(mode="json",
                          exclude={"observation"}), suffix=key)  # fmt: skip
        obs = res.observation
        if only_if_requeued and (obs is None or obs.restarts <= advice.attempt):
            self.s.outcome = "action_failed"
            return "action_failed"
        self._next_attempt(advice.attempt + 1)
        return None

    async def _verify(self, advice: Advice, all_satisfied: bool) -> Reconciliation:
        self._set_phase("verifying")
        rec: Reconciliation = await self._on_cluster(
            calls.verify,
            VerifyRequest(job=self.inp.job, advice=advice, timeout_seconds=60.0),
            calls.VERIFY_ADVICE,
            summary=f"verify g{advice.generation}",
        )
        reason = rec.reason
        if rec.status == "converged" and all_satisfied:
            reason = "already_satisfied"
        obs = rec.observation
        await self._audit(
            AuditEventType.RECONCILIATION,
            f"{rec.status}: {reason}"
            + (f" (state {obs.state}, Restarts={obs.restarts}, ExcNodeList="
               f"{','.join(obs.exc_node_list) or '-'})" if obs else ""),
            attempt=advice.attempt,
            data={"status": rec.status, "reason": reason, "generation": advice.generation,
                  "observation": obs.model_dump(mode="json") if obs else None},
            suffix=f"g{advice.generation}",
        )  # fmt: skip
        return rec

    def _prune_completed(self, generation: int) -> None:
        keep = f":g{generation}:"
        recent = {k: v for k, v in self.s.completed_actions.items() if keep in k}
        self.s.completed_actions = recent
