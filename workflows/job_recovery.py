"""JobRecoveryWorkflow: one long-running workflow per monitored Slurm job.

Orchestration only. Every decision is a pure call into `resurgo.policy.decide`; every read of the
world is an activity. Scheduler steps run on the cluster's own task queue (`slurm.<cluster>`),
audit writes on the core queue. Each step's idempotency key is recorded in the state, so a replay
or a retried activity never repeats an action.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from resurgo.contracts import (
        ActionRequest,
        ActionResult,
        ActionStep,
        Advice,
        AdviceKind,
        Anomaly,
        ApprovalAck,
        ApprovalDecision,
        AttemptRecord,
        AttributeRequest,
        Attribution,
        AuditEvent,
        Category,
        Directive,
        JobObservation,
        JobStatus,
        Mode,
        ModeChange,
        Reconciliation,
        RecoveryInput,
        RecoveryOutcome,
        RecoveryState,
        VerifyRequest,
        WatchRequest,
        WatchResult,
        controller_task_queue,
    )
    from resurgo.policy import decide as policy
    from resurgo.workflows import search_attributes as sa

NON_RETRYABLE = ["JobGone", "PreconditionFailed", "ActionsNotAllowed", "ParseError"]
AUDIT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=15)
)
WATCH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
ACTION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    non_retryable_error_types=NON_RETRYABLE,
)
WATCH_WINDOW_SECONDS = 3600.0
FOLLOW_FAILED_SECONDS = 600.0
HISTORY_ROLLOVER_EVENTS = 8000
# Patch ids: never rename or reuse (they are recorded in running workflows' histories).
PATCH_ANOMALY_FIRST = "2026-11-anomaly-audited-before-attribution"
PATCH_FAIL_OPEN_RELEASE = "2026-11-fail-open-release-after-failed-step"
PATCH_NO_REASK = "2026-11-declined-cause-not-asked-again"
PATCH_ENDED_EVENT = "2026-11-monitoring-ended-event"
PATCH_EXCLUSION_CAP = "2026-11-per-job-exclusion-cap"
PATCH_ONE_REPORT_PER_FAILURE = "2026-11-one-report-per-failure"
PATCH_PROGRESS_WITH_ANOMALY = "2026-11-progress-read-with-the-anomaly"


@workflow.defn(name="JobRecoveryWorkflow")
class JobRecoveryWorkflow:
    @workflow.init
    def __init__(self, inp: RecoveryInput) -> None:
        self.inp = inp
        self.directive = inp.directive or Directive()
        self.s = inp.state or RecoveryState(mode=self.directive.mode)
        if not self.s.attempts:
            self.s.attempts.append(AttemptRecord(attempt=self.s.attempt))
        self.wfid = inp.job.workflow_id()
        self.queue = controller_task_queue(inp.job.cluster)

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

    def _pending_advice(self) -> Advice | None:
        gen = self.s.pending_approval
        return next((a for a in self.s.advice_log if a.generation == gen), None)

    # ---- operator messages -----------------------------------------------------------------
    @workflow.update(description="Approve or reject the advice waiting for approval")
    async def decide_advice(self, decision: ApprovalDecision) -> ApprovalAck:
        self.s.decisions[decision.generation] = decision
        verb = "approved" if decision.approve else "rejected"
        await self._audit(
            f"approval_{verb}",
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
            "mode_changed",
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
                "directive_invalid",
                "directive rejected, job left alone: " + "; ".join(inp.problems),
                data={"problems": inp.problems},
            )
            return await self._finish("directive_invalid")
        if inp.state is None:
            await self._audit(
                "monitoring_started",
                f"monitoring {inp.job.label()} in {self.s.mode.value} mode",
                data={
                    "directive": self.directive.model_dump(mode="json"),
                    "problems": inp.problems,
                },
            )
        while True:
            # Derived from the state (not a local) so it survives continue-as-new.
            following = self.s.phase == "following_failed"
            follow_window = FOLLOW_FAILED_SECONDS if following else WATCH_WINDOW_SECONDS
            if self._should_roll_over():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(inp.model_copy(update={"state": self.s}))
            result = await self._watch(follow_window)
            cur = self.s.attempts[-1]
            self.s.cursor = result.cursor
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
                await self._audit("completed", "training job completed", attempt=self.s.attempt)
                return await self._finish("completed")
            elif outcome == "job_gone":
                await self._audit("job_gone", "slurmctld no longer knows the job")
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
                    and workflow.patched(PATCH_PROGRESS_WITH_ANOMALY)
                ):
                    await self._progress(result)
                done = await self._handle_anomaly(result.anomaly, result.observation)
                if done is not None:
                    return await self._finish(done)

    def _should_roll_over(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > HISTORY_ROLLOVER_EVENTS
        )

    async def _on_cluster(self, activity: str, arg: object, **options: Any) -> Any:
        """Run an activity on the cluster's controller queue. If no controller picks it up in
        time (all controllers dead or partitioned), say so once and keep waiting: the work is
        never skipped or marked done."""
        reported = False
        while True:
            try:
                return await workflow.execute_activity(
                    activity,
                    arg,
                    task_queue=self.queue,
                    schedule_to_start_timeout=timedelta(
                        seconds=self.inp.controller_timeout_seconds
                    ),
                    **options,
                )
            except ActivityError as err:
                cause = err.cause
                stalled = (
                    isinstance(cause, TemporalTimeoutError)
                    and cause.type == TimeoutType.SCHEDULE_TO_START
                )
                if not stalled:
                    raise
            if not reported:
                reported = True
                await self._audit(
                    "controller_unreachable",
                    f"no controller for cluster {self.inp.job.cluster} picked up {activity} in "
                    f"{self.inp.controller_timeout_seconds:.0f}s (queue {self.queue}); waiting",
                    attempt=self.s.attempt,
                    data={"activity": activity, "task_queue": self.queue},
                    suffix=f"{workflow.info().get_current_history_length()}",
                )
            await workflow.sleep(timedelta(seconds=5), summary="controller-retry")

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
            "watch_attempt",
            req,
            result_type=WatchResult,
            start_to_close_timeout=timedelta(seconds=window + 300),
            heartbeat_timeout=timedelta(seconds=15),
            retry_policy=WATCH_RETRY,
            summary=f"watch attempt {self.s.attempt}",
        )
        return result

    async def _failure_ended(self, result: WatchResult) -> None:
        """The attempt whose failure was reported while it ran has now ended: follow it."""
        obs = result.observation
        stopped = self.s.attempts[-1].reported_advice == AdviceKind.STOP
        self.s.outcome = "stopped_observed" if stopped else "failed"
        self._set_phase("following_failed")
        await self._audit(
            "attempt_ended",
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
        nodes = result.observation.node_list if result.observation else []
        self._set_phase("running")
        await self._audit(
            "attempt_started",
            f"attempt {self.s.attempt} running on {','.join(nodes) or '?'}",
            attempt=self.s.attempt,
            data={"nodes": nodes, "excluded": result.observation.exc_node_list
                  if result.observation else []},
        )  # fmt: skip

    async def _progress(self, result: WatchResult) -> None:
        cur = self.s.attempts[-1]
        cur.seen_progress = True
        iteration = result.progress.iteration if result.progress else None
        cur.first_iteration = iteration
        if self.s.attempt == 0:
            await self._audit(
                "progress", f"training progress: iteration {iteration}", attempt=0,
                data={"iteration": iteration},
            )  # fmt: skip
            return
        resumed = result.resumed_from
        await self._audit(
            "progress_recovered",
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
            "requeued_externally",
            f"job was requeued outside Resurgo (Restarts={restarts})",
            attempt=restarts,
        )
        self._next_attempt(restarts)

    def _next_attempt(self, attempt: int) -> None:
        self.s.attempt = attempt
        self.s.attempts = [*self.s.attempts, AttemptRecord(attempt=attempt)][-50:]
        self.s.phase = "watching"
        workflow.upsert_search_attributes([sa.ATTEMPT.value_set(attempt)])

    # ---- anomaly → attribution → advice → action -----------------------------------------
    async def _handle_anomaly(self, anomaly: Anomaly, obs: JobObservation | None) -> str | None:
        self._set_phase("attributing")
        # Record the anomaly before attribution settles, so it is visible at once.
        early = workflow.patched(PATCH_ANOMALY_FIRST)
        if early:
            await self._audit_many([self._anomaly_event(anomaly)])
        attribution = await self._attribute(anomaly, obs)
        obs = attribution.observation or obs
        cur = self.s.attempts[-1]
        cur.fingerprint = attribution.fingerprint
        cur.category = attribution.category
        cur.checkpoint_failure = cur.checkpoint_failure or attribution.checkpoint_failure
        rules = self.inp.policy
        if not workflow.patched(PATCH_EXCLUSION_CAP):
            # Histories from before the per-job exclusion cap replay with the old decisions.
            rules = rules.model_copy(update={"max_nodes_excluded_per_job": 1_000_000})
        advice = policy.decide(self.s, attribution, rules, self.directive)
        self.s = policy.apply_advice(self.s, advice)
        workflow.upsert_search_attributes([sa.LAST_CATEGORY.value_set(attribution.category.value)])
        attempt = self.s.attempt
        await self._audit_many(
            ([] if early else [self._anomaly_event(anomaly)])
            + [
                self._event("attribution", f"{attribution.category.value}"
                            + (f" on {','.join(attribution.culprit_nodes)}"
                               if attribution.culprit_nodes else "")
                            + f" ({attribution.confidence:.2f}): {attribution.summary}",
                            attempt, attribution.model_dump(mode="json")),
                self._event("advice", f"g{advice.generation} {policy.describe_advice(advice)}: "
                            f"{advice.reason}", attempt, advice.model_dump(mode="json")),
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
                "would_act",
                f"would {policy.describe_advice(advice)} ({', '.join(policy.advice_steps(advice))})"
                f" but {blocked}",
                attempt=attempt,
                data={"steps": policy.advice_steps(advice), "blocked_by": blocked,
                      "generation": advice.generation},
            )  # fmt: skip
            if terminal:
                self.s.outcome = "stopped_observed" if advice.kind == AdviceKind.STOP else "failed"
                self._set_phase("following_failed")
            elif workflow.patched(PATCH_ONE_REPORT_PER_FAILURE):
                # The job's end will be this same failure: do not report (and count) it twice.
                self.s.attempts[-1].reported_advice = advice.kind
            return None
        if self._approval_required() and not await self._approved(advice, attribution):
            if terminal:
                self.s.outcome = "not_approved"
                self._set_phase("following_failed")
            return None
        return await self._act(advice)

    def _approval_required(self) -> bool:
        return self.directive.approval == "required" or self.inp.policy.require_approval

    async def _approved(self, advice: Advice, attribution: Attribution) -> bool:
        """Wait for an operator; on timeout fail open: no scheduler action at all."""
        gen = advice.generation
        cause = f"{advice.attempt}:{attribution.fingerprint}"
        if cause in self.s.declined and workflow.patched(PATCH_NO_REASK):
            # The same failure of the same attempt, seen again (e.g. the job died after a hang
            # was reported): the operator already said no.
            await self._audit(
                "would_act",
                f"would {policy.describe_advice(advice)} but the operator declined this cause "
                f"for attempt {advice.attempt} already",
                attempt=advice.attempt,
                data={"generation": gen, "blocked_by": "declined", "steps":
                      policy.advice_steps(advice)},
                suffix=f"g{gen}",
            )  # fmt: skip
            return False
        self.s.pending_approval = gen
        self._set_phase("awaiting_approval")
        workflow.upsert_search_attributes([sa.NEEDS_APPROVAL.value_set(True)])
        self._details()
        timing: dict[str, object] = {
            "generation": gen,
            "timeout_seconds": self.directive.approval_timeout,
        }
        await self._audit(
            "approval_requested",
            f"g{gen} {policy.describe_advice(advice)} waits for approval "
            f"(timeout {self.directive.approval_timeout:.0f}s)",
            attempt=advice.attempt,
            data={**timing, "advice": advice.model_dump(mode="json")},
            suffix=f"g{gen}",
        )
        try:
            await workflow.wait_condition(
                lambda: gen in self.s.decisions,
                timeout=timedelta(seconds=self.directive.approval_timeout),
                timeout_summary="approval-timeout",
            )
        except TimeoutError:
            self.s.pending_approval = None
            workflow.upsert_search_attributes([sa.NEEDS_APPROVAL.value_set(False)])
            await self._audit(
                "approval_expired",
                f"g{gen} was not approved in {self.directive.approval_timeout:.0f}s; "
                "no scheduler action taken (fail-open)",
                attempt=advice.attempt,
                data=timing,
                suffix=f"g{gen}",
            )
            self.s.declined = [*self.s.declined, cause][-50:]
            return False
        self.s.pending_approval = None
        workflow.upsert_search_attributes([sa.NEEDS_APPROVAL.value_set(False)])
        approved = self.s.decisions[gen].approve
        if not approved:
            self.s.declined = [*self.s.declined, cause][-50:]
        return approved

    def _action_blocker(self) -> str | None:
        if self.s.mode != Mode.ACTION:
            return "the job is in observe mode"
        if not self.inp.gates.acknowledge_scheduler_actions:
            return "the cluster has not set acknowledge_scheduler_actions"
        allowed = self.inp.gates.partitions
        if allowed and self.inp.partition not in allowed:
            return f"partition {self.inp.partition!r} is not in the cluster allowlist"
        return None

    def _anomaly_event(self, anomaly: Anomaly) -> AuditEvent:
        return self._event(
            "anomaly", f"{anomaly.kind.value}: {anomaly.summary}", anomaly.attempt,
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
                "attribute_anomaly",
                req,
                result_type=Attribution,
                start_to_close_timeout=timedelta(seconds=120),
                schedule_to_close_timeout=timedelta(minutes=5),
                # A dead controller is noticed in seconds, not after start_to_close.
                heartbeat_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(maximum_attempts=6),
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

    async def _act(self, advice: Advice) -> str | None:
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
            )
            try:
                res = await self._on_cluster(
                    "scheduler_action",
                    req,
                    result_type=ActionResult,
                    activity_id=key,
                    start_to_close_timeout=timedelta(seconds=30),
                    schedule_to_close_timeout=timedelta(seconds=self.inp.hold_timeout_seconds / 2),
                    retry_policy=ACTION_RETRY,
                    summary=f"{step} job {self.inp.job.job_id}"
                    + (f" nodes {','.join(nodes)}" if nodes else ""),
                )
            except ActivityError as err:
                await self._audit(
                    "reconciliation",
                    f"abandoned: {step} failed ({err.cause or err})",
                    attempt=advice.attempt,
                    data={"status": "abandoned", "reason": "action_failed", "step": step},
                    suffix=f"g{advice.generation}",
                )
                held = f"{self.wfid}:g{advice.generation}:requeue_hold" in self.s.completed_actions
                if held and step != "release" and workflow.patched(PATCH_FAIL_OPEN_RELEASE):
                    return await self._fail_open(advice)
                self.s.outcome = "action_failed"
                return "action_failed"
            self.s.completed_actions[key] = res.outcome
            if step == ActionStep.EXCLUDE_NODES.value:
                self.s.excluded_nodes = nodes
            all_satisfied = all_satisfied and res.outcome == "already_satisfied"
            await self._audit(
                "action",
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

    async def _fail_open(self, advice: Advice) -> str | None:
        """A step after our hold failed: never leave the job held because of us. Release it as
        it is (plain Slurm behaviour) and follow the next attempt."""
        key = f"{self.wfid}:g{advice.generation}:fail_open_release"
        try:
            res: ActionResult = await self._on_cluster(
                "scheduler_action",
                ActionRequest(job=self.inp.job, step=ActionStep.RELEASE, idempotency_key=key,
                              attempt=advice.attempt, reason="fail-open after a failed step"),
                result_type=ActionResult,
                activity_id=key,
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(seconds=self.inp.hold_timeout_seconds / 2),
                retry_policy=ACTION_RETRY,
                summary=f"fail-open release job {self.inp.job.job_id}",
            )  # fmt: skip
        except ActivityError as err:
            await self._audit("action", f"fail-open release failed ({err.cause or err}); the "
                              "watchdog releases the hold at its deadline",
                              attempt=advice.attempt, suffix=key)  # fmt: skip
            self.s.outcome = "action_failed"
            return "action_failed"
        await self._audit("action", f"release (fail-open): {res.outcome} ({res.detail})",
                          attempt=advice.attempt, data=res.model_dump(mode="json",
                          exclude={"observation"}), suffix=key)  # fmt: skip
        self._next_attempt(advice.attempt + 1)
        return None

    async def _verify(self, advice: Advice, all_satisfied: bool) -> Reconciliation:
        self._set_phase("verifying")
        rec: Reconciliation = await self._on_cluster(
            "verify_advice",
            VerifyRequest(job=self.inp.job, advice=advice, timeout_seconds=60.0),
            result_type=Reconciliation,
            start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=timedelta(seconds=15),
            retry_policy=RetryPolicy(maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
            summary=f"verify g{advice.generation}",
        )
        reason = rec.reason
        if rec.status == "converged" and all_satisfied:
            reason = "already_satisfied"
        obs = rec.observation
        await self._audit(
            "reconciliation",
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

    # ---- audit and UI ----------------------------------------------------------------------
    def _event(
        self, type_: str, summary: str, attempt: int | None, data: dict[str, object],
        suffix: str = "",
    ) -> AuditEvent:  # fmt: skip
        job = self.inp.job
        ident = f"{self.wfid}:{type_}:a{attempt if attempt is not None else '-'}"
        ident += f":g{self.s.generation}" + (f":{suffix}" if suffix else "")
        return AuditEvent(
            event_id=ident[:255],
            cluster=job.cluster,
            job_id=job.job_id,
            workflow_id=self.wfid,
            attempt=attempt,
            type=type_,
            producer="workflow",
            at=workflow.now(),
            summary=summary[:2000],
            data=data,
        )

    async def _audit(
        self, type_: str, summary: str, *, attempt: int | None = None,
        data: dict[str, object] | None = None, suffix: str = "",
    ) -> None:  # fmt: skip
        await self._audit_many([self._event(type_, summary, attempt, data or {}, suffix)])

    async def _audit_many(self, events: list[AuditEvent]) -> None:
        await workflow.execute_activity(
            "record_audit",
            events,
            # The worker running this workflow also serves the audit activity.
            task_queue=workflow.info().task_queue,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=AUDIT_RETRY,
            summary="audit: " + ", ".join(e.type for e in events),
        )

    def _set_phase(self, phase: str) -> None:
        if phase == self.s.phase and workflow.info().typed_search_attributes.get(sa.STATE) == phase:
            return
        self.s.phase = phase
        workflow.upsert_search_attributes([sa.STATE.value_set(phase)])
        self._details()

    def _publish(self) -> None:
        workflow.upsert_search_attributes(
            [
                sa.STATE.value_set(self.s.phase),
                sa.MODE.value_set(self.s.mode.value),
                sa.ATTEMPT.value_set(self.s.attempt),
            ]
        )
        self._details()

    def _details(self) -> None:
        last = self.s.advice_log[-1] if self.s.advice_log else None
        lines = [
            f"**{self.inp.job.label()}** `{self.inp.job_name}` — {self.s.mode.value} mode",
            f"- phase: **{self.s.phase}**, attempt {self.s.attempt}",
            f"- last category: {self.s.last_category or '-'}",
            f"- excluded nodes: {', '.join(self.s.excluded_nodes) or '-'}",
        ]
        pending = self._pending_advice()
        if pending:
            lines.append(f"- **awaiting approval** of g{pending.generation}: "
                         f"{policy.describe_advice(pending)} (update `decide_advice`)")  # fmt: skip
        if last:
            lines.append(f"- last advice g{last.generation}: {policy.describe_advice(last)} — "
                         f"{last.reason}")  # fmt: skip
        workflow.set_current_details("\n".join(lines))

    async def _finish(self, outcome: str) -> RecoveryOutcome:
        self.s.outcome = outcome
        self._set_phase(outcome)
        if workflow.patched(PATCH_ENDED_EVENT):
            await self._audit(
                "monitoring_ended",
                f"monitoring ended: {outcome} after {self.s.attempt + 1} attempt(s)",
                data={"outcome": outcome, "attempts": self.s.attempt + 1,
                      "excluded_nodes": self.s.excluded_nodes},
            )  # fmt: skip
        return RecoveryOutcome(
            job=self.inp.job, outcome=outcome, attempts=self.s.attempt + 1,
            advice=self.s.advice_log,
        )  # fmt: skip
