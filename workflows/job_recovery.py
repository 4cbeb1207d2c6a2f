"""JobRecoveryWorkflow: one long-running workflow per monitored Slurm job.

Orchestration only. Every decision is a pure call into `resurgo.policy.decide`; every read of the
world is an activity, called by reference through `resurgo.activities.calls` (which holds each
activity's timeouts and retry policy). Scheduler steps run on the cluster's own task queue
(`slurm.<cluster>`), audit writes on the core queue. Each step's idempotency key is recorded in
the state, so a replay or a retried activity never repeats an action.

The class is split by concern: `base` (state, audit, UI, running activities), `approval_gate`
(may advice be carried out; operator approval), `acting` (scheduler steps and verification).
"""

from __future__ import annotations

import hashlib

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from resurgo.activities import calls
    from resurgo.array_models import ArrayVerdict
    from resurgo.contracts import (
        AdviceKind,
        Anomaly,
        ApprovalAck,
        ApprovalDecision,
        AttemptRecord,
        AttributeRequest,
        Attribution,
        AuditEvent,
        AuditEventType,
        Category,
        Directive,
        JobObservation,
        JobStatus,
        ModeChange,
        RecoveryInput,
        RecoveryOutcome,
        RecoveryState,
        WatchRequest,
        WatchResult,
        controller_task_queue,
    )
    from resurgo.policy import arrays as array_policy
    from resurgo.policy import decide as policy
    from resurgo.slurm import hetjobs
    from resurgo.workflows import patches
    from resurgo.workflows import search_attributes as sa
    from resurgo.workflows.acting import SchedulerSteps
    from resurgo.workflows.approval_gate import ApprovalGate
    from resurgo.workflows.array_coordinator import VERDICT_SIGNAL
    from resurgo.workflows.array_task import ArrayTask

WATCH_WINDOW_SECONDS = 3600.0
FOLLOW_FAILED_SECONDS = 600.0


@workflow.defn(name="JobRecoveryWorkflow")
class JobRecoveryWorkflow(SchedulerSteps, ApprovalGate, ArrayTask):
    @workflow.init
    def __init__(self, inp: RecoveryInput) -> None:
        self.inp = inp
        self.directive = inp.directive or Directive()
        self.s = inp.state or RecoveryState(mode=self.directive.mode)
        if not self.s.attempts:
            self.s.attempts.append(AttemptRecord(attempt=self.s.attempt))
        self.wfid = inp.job.workflow_id()
        self.queue = controller_task_queue(inp.job.cluster)
        self.array_verdicts = {}

    # ---- read side -----------------------------------------------------------------------
    @workflow.query(description="Current phase, attempt, exclusions and recent advice")
    def status(self) -> JobStatus:
        return JobStatus(
            job=self.inp.job,
            phase=self.s.phase,
            mode=self.s.mode,
            attempt=self.s.attempt,
            last_category=self.s.last_category,
            excluded_nodes=self.s.excluded_nodes,
            advice=self.s.advice_log,
            outcome=self.s.outcome,
            pending_approval=self._pending_advice(),
        )

    # ---- operator messages -----------------------------------------------------------------
    @workflow.signal(name=VERDICT_SIGNAL, description="The array coordinator's verdict")
    def array_verdict(self, answer: ArrayVerdict) -> None:
        self._keep_verdict(answer)

    @workflow.update(description="Approve or reject the advice waiting for approval")
    async def decide_advice(self, decision: ApprovalDecision) -> ApprovalAck:
        self.s.decisions[decision.generation] = decision
        verb = "approved" if decision.approve else "rejected"
        await self._audit(
            AuditEventType.APPROVAL_APPROVED
            if decision.approve
            else AuditEventType.APPROVAL_REJECTED,
            f"g{decision.generation} {verb} by {decision.actor}"
            + (f": {decision.reason}" if decision.reason else ""),
            attempt=self.s.attempt,
            data=decision.model_dump(mode="json"),
            suffix=f"g{decision.generation}",
        )
        return ApprovalAck(generation=decision.generation, accepted=True, message=verb)

    @decide_advice.validator
    def _validate_decision(self, decision: ApprovalDecision) -> None:
        # Validators leave no history: stale or duplicate answers are refused cheaply.
        pending = self.s.pending_approval
        if pending is None:
            raise ValueError("no advice is waiting for approval")
        if decision.generation != pending:
            raise ValueError(f"advice g{decision.generation} is not the pending one (g{pending})")
        if decision.generation in self.s.decisions:
            raise ValueError(f"advice g{decision.generation} was already decided")

    @workflow.update(description="Switch the job between observe and action mode")
    async def set_mode(self, change: ModeChange) -> JobStatus:
        previous = self.s.mode
        self.s.mode = change.mode
        workflow.upsert_search_attributes([sa.MODE.value_set(change.mode.value)])
        self._details()
        await self._audit(
            AuditEventType.MODE_CHANGED,
            f"{previous.value} -> {change.mode.value} by {change.actor}"
            + (f": {change.reason}" if change.reason else ""),
            data=change.model_dump(mode="json"),
            suffix=f"{workflow.info().get_current_history_length()}",
        )
        return self.status()

    @set_mode.validator
    def _validate_mode(self, change: ModeChange) -> None:
        if self.s.outcome is not None:
            raise ValueError(f"monitoring has ended ({self.s.outcome})")

    # ---- main loop -----------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: RecoveryInput) -> RecoveryOutcome:
        self._publish()
        if inp.directive is None:
            await self._audit(
                AuditEventType.DIRECTIVE_INVALID,
                "directive rejected, job left alone: " + "; ".join(inp.problems),
                data={"problems": inp.problems},
            )
            return await self._finish("directive_invalid")
        if inp.state is None:
            data: dict[str, object] = {
                "directive": self.directive.model_dump(mode="json"),
                "problems": inp.problems,
                # Whose output becomes evidence: the API shows it only to tokens allowed to
                # read that user's jobs (an activity input, not a command: replays as is).
                "user": inp.user,
            }
            # A hetjob's components by their own job ids, so that one of them finds this job
            # before it runs (attempt_started adds their nodes). Only hetjobs ask the patch.
            components = hetjobs.named_components(inp.job.job_id, inp.het_job_ids)
            if components and workflow.patched(patches.HETJOB_COMPONENTS_AT_START):
                data["components"] = components
            await self._audit(
                AuditEventType.MONITORING_STARTED,
                f"monitoring {inp.job.label()} in {self.s.mode.value} mode",
                data=data,
            )
        while True:
            # Derived from the state (not a local) so it survives continue-as-new.
            following = self.s.phase == "following_failed"
            follow_window = FOLLOW_FAILED_SECONDS if following else WATCH_WINDOW_SECONDS
            if self._should_roll_over():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(inp.model_copy(update={"state": self.s}))
            result = await self._watch(follow_window)
            if result.notes and workflow.patched(patches.EVIDENCE_LIMITED_EVENT):
                await self._record_limits(result.notes)
            cur = self.s.attempts[-1]
            self.s.cursor = result.cursor
            # Where the attempt's output begins moves only when the watch skipped the previous
            # attempt's tail or the file was truncated under it (state only, no command).
            cur.start_line = result.attempt_start_line
            self.s.source_cursor = result.source_cursor
            if result.last_iteration is not None:
                cur.max_iteration = max(cur.max_iteration or -1, result.last_iteration)
            cur.checkpoint_failure = cur.checkpoint_failure or result.checkpoint_failure
            if result.resumed_from is not None:
                cur.resumed_from = result.resumed_from
            outcome = result.outcome
            if outcome == "started":
                await self._attempt_started(result)
            elif outcome == "progress":
                await self._progress(result)
            elif outcome == "completed":
                await self._audit(
                    AuditEventType.COMPLETED, "training job completed", attempt=self.s.attempt
                )
                return await self._finish("completed")
            elif outcome == "job_gone":
                await self._audit(AuditEventType.JOB_GONE, "slurmctld no longer knows the job")
                return await self._finish(self.s.outcome or "job_gone")
            elif outcome == "requeued":
                await self._requeued_elsewhere(result)
            elif outcome == "window_elapsed":
                if following:
                    return await self._finish(self.s.outcome or "observed")
            elif outcome == "ended":
                await self._failure_ended(result)
            elif outcome == "anomaly" and result.anomaly is not None:
                # Progress read in the same batch as the fatal line still happened first.
                if (
                    result.progress is not None
                    and not cur.seen_progress
                    and workflow.patched(patches.PROGRESS_WITH_ANOMALY)
                ):
                    await self._progress(result)
                done = await self._handle_anomaly(result.anomaly, result.observation)
                if done is not None:
                    return await self._finish(done)

    async def _watch(self, window: float) -> WatchResult:
        cur = self.s.attempts[-1]
        self._set_phase("watching" if self.s.phase != "following_failed" else self.s.phase)
        req = WatchRequest(
            job=self.inp.job,
            attempt=self.s.attempt,
            cursor=self.s.cursor,
            attempt_start_line=cur.start_line,
            hang_timeout=self.directive.hang_timeout,
            progress_pattern=self.directive.progress_pattern,
            max_window_seconds=window,
            seen_started=cur.started,
            seen_progress=cur.seen_progress,
            follow_only=self.s.phase == "following_failed",
            failure_reported=cur.reported_advice is not None,
            straggler=self.directive.straggler,
            source_cursor=self.s.source_cursor,
        )
        result: WatchResult = await self._on_cluster(
            calls.watch,
            req,
            calls.watch_attempt(window),
            # A watch resumes from the state's cursor: a long wait for it may start over.
            rollover=True,
            summary=f"watch attempt {self.s.attempt}",
        )
        return result

    async def _record_limits(self, notes: list[str]) -> None:
        """What the watch could not read (a refused output file, an unusable pattern) is an
        event of its own, once per distinct note, not only a clause in a later anomaly."""
        for note in notes:
            if note in self.s.noted:
                continue
            self.s.noted = [*self.s.noted, note][-20:]
            await self._audit(
                AuditEventType.EVIDENCE_LIMITED,
                note,
                attempt=self.s.attempt,
                data={"note": note[:2000]},
                # The note's digest: a stable id per note, whatever else was noted before.
                suffix=hashlib.sha256(note.encode()).hexdigest()[:16],
            )

    async def _failure_ended(self, result: WatchResult) -> None:
        """The attempt whose failure was reported while it ran has now ended: follow it."""
        obs = result.observation
        stopped = self.s.attempts[-1].reported_advice == AdviceKind.STOP
        self.s.outcome = "stopped_observed" if stopped else "failed"
        self._set_phase("following_failed")
        await self._audit(
            AuditEventType.ATTEMPT_ENDED,
            f"attempt {self.s.attempt} ended {obs.state if obs else '?'}"
            + (f" (exit {obs.exit_code}:{obs.exit_signal})" if obs else "")
            + ": the failure reported above",
            attempt=self.s.attempt,
            data={"state": obs.state if obs else None,
                  "exit_code": obs.exit_code if obs else None},
        )  # fmt: skip

    async def _attempt_started(self, result: WatchResult) -> None:
        cur = self.s.attempts[-1]
        cur.started = True
        cur.start_line = result.attempt_start_line
        obs = result.observation
        nodes = obs.node_list if obs else []
        self._set_phase("running")
        data: dict[str, object] = {"nodes": nodes, "excluded": obs.exc_node_list if obs else []}
        summary = f"attempt {self.s.attempt} running on {','.join(nodes) or '?'}"
        # A hetjob: which component ran where, and each component's own job id (how a user
        # who names a component by it finds this job). Only hetjobs ask the patch.
        components = hetjobs.recorded_components(obs) if obs else []
        if components and workflow.patched(patches.HETJOB_COMPONENTS_RECORDED):
            data["components"] = components
            summary += f" ({hetjobs.where_components_ran(obs)})" if obs else ""
        await self._audit(
            AuditEventType.ATTEMPT_STARTED, summary, attempt=self.s.attempt, data=data
        )

    async def _progress(self, result: WatchResult) -> None:
        cur = self.s.attempts[-1]
        cur.seen_progress = True
        iteration = result.progress.iteration if result.progress else None
        cur.first_iteration = iteration
        if self.s.attempt == 0:
            await self._audit(
                AuditEventType.PROGRESS, f"training progress: iteration {iteration}", attempt=0,
                data={"iteration": iteration},
            )  # fmt: skip
            return
        resumed = result.resumed_from
        await self._audit(
            AuditEventType.PROGRESS_RECOVERED,
            f"training progress recovered at iteration {iteration}"
            + (f" (resumed from checkpoint iteration {resumed})" if resumed is not None else ""),
            attempt=self.s.attempt,
            data={"iteration": iteration, "resumed_from": resumed},
        )

    async def _requeued_elsewhere(self, result: WatchResult) -> None:
        obs = result.observation
        restarts = obs.restarts if obs else self.s.attempt + 1
        if len(self.s.attempts) == 1 and not self.s.attempts[0].started:
            # Monitoring began after earlier attempts (e.g. discovered late): adopt, not news.
            self.s.attempts = []
            self._next_attempt(restarts)
            return
        await self._audit(
            AuditEventType.REQUEUED_EXTERNALLY,
            f"job was requeued outside Resurgo (Restarts={restarts})",
            attempt=restarts,
        )
        self._next_attempt(restarts)

    # ---- anomaly → attribution → advice → action -----------------------------------------
    async def _handle_anomaly(self, anomaly: Anomaly, obs: JobObservation | None) -> str | None:
        self._set_phase("attributing")
        # Record the anomaly before attribution settles, so it is visible at once.
        early = workflow.patched(patches.ANOMALY_FIRST)
        if early:
            await self._audit_many([self._anomaly_event(anomaly)])
        attribution = await self._attribute(anomaly, obs)
        obs = attribution.observation or obs
        cur = self.s.attempts[-1]
        cur.fingerprint = attribution.fingerprint
        cur.category = attribution.category
        cur.checkpoint_failure = cur.checkpoint_failure or attribution.checkpoint_failure
        verdict: ArrayVerdict | None = None
        # Only array tasks ask (no recorded history has one): the patch marks the new commands.
        if self.inp.job.array_job_id is not None and workflow.patched(patches.ARRAY_COORDINATION):
            nodes = obs.node_list if obs and obs.node_list else anomaly.nodes
            verdict = await self._array_verdict(attribution, nodes)
        rules = self.inp.policy
        if not workflow.patched(patches.EXCLUSION_CAP):
            # Histories from before the per-job exclusion cap replay with the old decisions.
            rules = rules.model_copy(update={"max_nodes_excluded_per_job": 1_000_000})
        # Stragglers with no node to exclude are left running (issue 13); older histories
        # replay with the decisions they were recorded with.
        calibrated = workflow.patched(patches.CALIBRATED_ACTIONS)
        advice = policy.decide(self.s, attribution, rules, self.directive, calibrated=calibrated)
        advice = array_policy.apply_verdict(advice, verdict)
        self.s = policy.apply_advice(self.s, advice)
        workflow.upsert_search_attributes([sa.LAST_CATEGORY.value_set(attribution.category.value)])
        attempt = self.s.attempt
        await self._audit_many(
            ([] if early else [self._anomaly_event(anomaly)])
            + [
                self._event(AuditEventType.ATTRIBUTION, f"{attribution.category.value}"
                            + (f" on {','.join(attribution.culprit_nodes)}"
                               if attribution.culprit_nodes else "")
                            + f" ({attribution.confidence:.2f}): {attribution.summary}",
                            attempt, attribution.model_dump(mode="json")),
                self._event(AuditEventType.ADVICE, f"g{advice.generation} "
                            f"{policy.describe_advice(advice)}: {advice.reason}", attempt,
                            advice.model_dump(mode="json")),
            ]
        )  # fmt: skip
        terminal = obs is not None and obs.terminal
        if advice.kind == AdviceKind.NONE:
            if terminal:
                return (
                    "cancelled" if attribution.scheduler_outcome == "owner_cancelled" else "ended"
                )
            return None
        blocked = self._action_blocker()
        if blocked:
            await self._audit(
                AuditEventType.WOULD_ACT,
                f"would {policy.describe_advice(advice)} ({', '.join(policy.advice_steps(advice))})"
                f" but {blocked}",
                attempt=attempt,
                data={"steps": policy.advice_steps(advice), "blocked_by": blocked,
                      "generation": advice.generation},
            )  # fmt: skip
            if terminal:
                self.s.outcome = "stopped_observed" if advice.kind == AdviceKind.STOP else "failed"
                self._set_phase("following_failed")
            elif workflow.patched(patches.ONE_REPORT_PER_FAILURE):
                # The job's end will be this same failure: do not report (and count) it twice.
                self.s.attempts[-1].reported_advice = advice.kind
            return None
        if self._approval_required() and not await self._approved(advice, attribution):
            if terminal:
                self.s.outcome = "not_approved"
                self._set_phase("following_failed")
            return None
        self._het_nodes = tuple(tuple(c) for c in obs.het_nodes) if obs else ()
        return await self._act(advice)

    def _anomaly_event(self, anomaly: Anomaly) -> AuditEvent:
        return self._event(
            AuditEventType.ANOMALY, f"{anomaly.kind.value}: {anomaly.summary}", anomaly.attempt,
            anomaly.model_dump(mode="json"),
        )  # fmt: skip

    async def _attribute(self, anomaly: Anomaly, obs: JobObservation | None) -> Attribution:
        cur = self.s.attempts[-1]
        req = AttributeRequest(
            job=self.inp.job,
            anomaly=anomaly,
            log_path=self.s.cursor.path if self.s.cursor else None,
            attempt_start_line=cur.start_line,
            node_list=obs.node_list if obs else anomaly.nodes,
        )
        try:
            verdict: Attribution = await self._on_cluster(
                calls.attribute,
                req,
                calls.ATTRIBUTE_ANOMALY,
                summary=f"attribute {anomaly.kind.value} of attempt {anomaly.attempt}",
            )
            return verdict
        except ActivityError as err:
            # Attribution is an enrichment: its failure must never block recovery.
            return Attribution(
                kind=anomaly.kind,
                category=Category.UNKNOWN,
                confidence=0.0,
                fingerprint="unknown:attribution-failed",
                summary=f"attribution failed ({err.cause or err}); treating cause as unknown",
            )

    # ---- audit and UI ----------------------------------------------------------------------

    async def _finish(self, outcome: str) -> RecoveryOutcome:
        self.s.outcome = outcome
        self._set_phase(outcome)
        if workflow.patched(patches.ENDED_EVENT):
            await self._audit(
                AuditEventType.MONITORING_ENDED,
                f"monitoring ended: {outcome} after {self.s.attempt + 1} attempt(s)",
                data={"outcome": outcome, "attempts": self.s.attempt + 1,
                      "excluded_nodes": self.s.excluded_nodes},
            )  # fmt: skip
        return RecoveryOutcome(
            job=self.inp.job, outcome=outcome, attempts=self.s.attempt + 1,
            advice=self.s.advice_log,
        )  # fmt: skip
