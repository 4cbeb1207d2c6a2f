"""ArrayCoordinatorWorkflow: one small durable workflow per opted-in job array.

Each task of the array has its own JobRecoveryWorkflow (its own attempts, budget, exclusions
and audit trail). When a task fails, its workflow signals the failure here (fingerprint, nodes)
and waits briefly for the answer: whether that fingerprint is systematic across the array (then
the task stops retrying it). The decision is the pure `resurgo.policy.arrays.assess`; this
workflow records one array-level finding per systematic fingerprint or implicated node and,
when the array's mode, policy and the cluster's gates allow, holds the array's still-pending
tasks or excludes a node for them. Otherwise (observe mode) it records what it would do, and
never touches Slurm.

It polls the array now and then (tasks by state, for the array-level view) and ends once the
array has no task left to run.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from resurgo.activities.arrays import ArrayActivities
    from resurgo.activities.audit import AuditActivities
    from resurgo.activities.calls import NON_RETRYABLE, RECORD_AUDIT
    from resurgo.array_models import (
        ArrayActionRequest,
        ArrayActionResult,
        ArrayAssessment,
        ArrayInput,
        ArrayState,
        ArrayStatus,
        ArrayStep,
        ArrayView,
        TaskFailure,
    )
    from resurgo.contracts import (
        AuditEvent,
        AuditEventType,
        Mode,
        ModeChange,
        controller_task_queue,
    )
    from resurgo.policy import arrays as policy
    from resurgo.policy.gates import action_blocker

# Task workflows signal this name; the answer goes back as their `array_verdict` signal.
REPORT_SIGNAL = "report_failure"
VERDICT_SIGNAL = "array_verdict"
HISTORY_ROLLOVER_EVENTS = 5000
# The array must look finished this many polls in a row (a requeued task passes through states
# a single look could miss).
FINISHED_POLLS = 2


@workflow.defn(name="ArrayCoordinatorWorkflow")
class ArrayCoordinatorWorkflow:
    @workflow.init
    def __init__(self, inp: ArrayInput) -> None:
        self.inp = inp
        self.s = inp.state or ArrayState()
        self.wfid = inp.array.workflow_id()
        self.queue = controller_task_queue(inp.array.cluster)
        self.inbox: list[TaskFailure] = []
        # Set by `set_mode`: the findings so far are looked at again (advice may now be acted on).
        self.reconsider = False

    @property
    def mode(self) -> Mode:
        return self.s.mode or self.inp.mode

    @workflow.signal(name=REPORT_SIGNAL)
    def report_failure(self, failure: TaskFailure) -> None:
        self.inbox.append(failure)

    @workflow.query(description="The array: tasks by state, failures by fingerprint, nodes")
    def status(self) -> ArrayStatus:
        by_fp: dict[str, set[int]] = {}
        for failure in self.s.failures:
            by_fp.setdefault(failure.fingerprint, set()).add(failure.task_id)
        assessment = self._assess()
        fps = frozenset(s.fingerprint for s in assessment.systematic)
        return ArrayStatus(
            array=self.inp.array,
            mode=self.mode,
            tasks_by_state=self.s.view.tasks_by_state if self.s.view else {},
            failures_by_fingerprint={fp: sorted(t) for fp, t in sorted(by_fp.items())},
            nodes_implicated=policy.nodes_by_tasks(self.s.failures, fps),
            systematic=assessment.systematic,
            held=self.s.held,
            excluded_nodes=self.s.excluded_nodes,
        )

    @workflow.update(description="Switch the array between observe and action mode")
    async def set_mode(self, change: ModeChange) -> ArrayStatus:
        previous = self.mode
        self.s.mode = change.mode
        self.reconsider = True
        await self._audit(
            AuditEventType.MODE_CHANGED,
            f"array {previous.value} -> {change.mode.value} by {change.actor}"
            + (f": {change.reason}" if change.reason else ""),
            data=change.model_dump(mode="json"),
            suffix=str(workflow.info().get_current_history_length()),
        )
        return self.status()

    @workflow.run
    async def run(self, inp: ArrayInput) -> str:
        if inp.state is None:
            await self._audit(
                AuditEventType.MONITORING_STARTED,
                f"coordinating array {inp.array.label()} in {inp.mode.value} mode: "
                f"{inp.policy.arrays.systematic_failures} tasks failing alike are systematic, a "
                f"node failing {inp.policy.arrays.node_failures} tasks is excluded",
                data={"policy": inp.policy.name, "mode": inp.mode.value, "user": inp.user},
            )
        while True:
            if not self.inbox and self._should_roll_over():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(inp.model_copy(update={"state": self.s}))
            try:
                await workflow.wait_condition(
                    lambda: bool(self.inbox) or self.reconsider,
                    timeout=timedelta(seconds=inp.poll_seconds),
                    timeout_summary="array-poll",
                )
            except TimeoutError:
                if await self._array_finished():
                    await self._audit(
                        AuditEventType.MONITORING_ENDED,
                        f"array {inp.array.label()} has no task left to run: "
                        f"{len(self.s.failures)} task failure(s) reported",
                        data={"tasks_by_state": self.s.view.tasks_by_state if self.s.view else {},
                              "held": self.s.held, "excluded_nodes": self.s.excluded_nodes},
                    )  # fmt: skip
                    return "finished"
                continue
            while self.inbox:
                await self._handle(self.inbox.pop(0))
            if self.reconsider:
                self.reconsider = False
                await self._findings(self._assess(), again=True)

    def _should_roll_over(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > HISTORY_ROLLOVER_EVENTS
        )

    def _assess(self) -> ArrayAssessment:
        return policy.assess(self.s.failures, self.inp.policy, self.s.excluded_nodes)

    async def _array_finished(self) -> bool:
        try:
            view: ArrayView = await workflow.execute_activity_method(
                ArrayActivities.array_view,
                self.inp.array.array_job_id,
                task_queue=self.queue,
                schedule_to_start_timeout=timedelta(seconds=self.inp.controller_timeout_seconds),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=3,
                                         non_retryable_error_types=NON_RETRYABLE),
                summary="array view",
            )  # fmt: skip
        except ActivityError:
            # No controller, or Slurm unreadable: not a reason to stop coordinating.
            return False
        self.s.view = view
        self.s.finished_polls = self.s.finished_polls + 1 if view.finished else 0
        return self.s.finished_polls >= FINISHED_POLLS

    async def _handle(self, failure: TaskFailure) -> None:
        self.s.failures = policy.record_failure(self.s.failures, failure)
        assessment = self._assess()
        answer = policy.verdict(assessment, failure)
        if failure.workflow_id:
            try:
                await workflow.get_external_workflow_handle(failure.workflow_id).signal(
                    VERDICT_SIGNAL, answer
                )
            except FailureError:
                workflow.logger.warning("task workflow %s is gone", failure.workflow_id)
        await self._findings(assessment)

    async def _findings(self, assessment: ArrayAssessment, again: bool = False) -> None:
        """Record each new finding once, and act on what the findings call for. `again`: the
        mode changed, so advice given before may be carried out now."""
        for finding in assessment.systematic:
            mark = f"fp:{finding.fingerprint}"
            if mark in self.s.recorded:
                continue
            self.s.recorded = [*self.s.recorded, mark]
            hold = "; the pending tasks are to be held" if assessment.hold_pending else ""
            await self._audit(
                AuditEventType.ARRAY_FINDING,
                f"systematic failure: {finding.fingerprint} ({finding.category.value}) failed "
                f"{len(finding.tasks)} tasks ({_tasks(finding.tasks)}) on "
                f"{','.join(finding.nodes) or 'unknown nodes'}: not retried{hold}. "
                f"{finding.summary}",
                data={"finding": "systematic", **finding.model_dump(mode="json")},
                suffix=mark,
            )
        if assessment.hold_pending and not self.s.held:
            fingerprints = ", ".join(s.fingerprint for s in assessment.systematic)
            await self._act(ArrayStep.HOLD_PENDING, [], f"systematic failure: {fingerprints}")
        new_nodes: list[str] = []
        for node in assessment.exclude:
            mark = f"node:{node.node}"
            if mark in self.s.recorded:
                continue
            self.s.recorded = [*self.s.recorded, mark]
            new_nodes.append(node.node)
            await self._audit(
                AuditEventType.ARRAY_FINDING,
                f"node {node.node} implicated in failures of {len(node.tasks)} different tasks "
                f"({_tasks(node.tasks)}): excluded for the array's pending tasks",
                data={"finding": "node", "node": node.node, "tasks": node.tasks},
                suffix=mark,
            )
        for node in assessment.over_cap:
            mark = f"cap:{node.node}"
            if mark in self.s.recorded:
                continue
            self.s.recorded = [*self.s.recorded, mark]
            await self._audit(
                AuditEventType.ARRAY_FINDING,
                f"node {node.node} implicated in failures of {len(node.tasks)} tasks, not "
                f"excluded: the array already excludes {self.inp.policy.max_nodes_excluded_per_job}"
                " node(s) (max_nodes_excluded_per_job)",
                data={"finding": "node_over_cap", "node": node.node, "tasks": node.tasks},
                suffix=mark,
            )
        wanted = sorted(set(self.s.excluded_nodes) | {n.node for n in assessment.exclude})
        if (new_nodes or again) and wanted != self.s.excluded_nodes:
            await self._act(ArrayStep.EXCLUDE_PENDING, wanted, f"nodes {','.join(new_nodes)} "
                            "failed several tasks")  # fmt: skip

    def _blocker(self) -> str | None:
        return action_blocker(self.mode, self.inp.gates, self.inp.partition, "array")

    async def _act(self, step: ArrayStep, nodes: list[str], reason: str) -> None:
        what = (
            "hold the array's pending tasks"
            if step == ArrayStep.HOLD_PENDING
            else f"exclude {','.join(nodes)} for the array's pending tasks"
        )
        key = f"{self.wfid}:{step.value}:{','.join(nodes)}"
        blocked = self._blocker()
        if blocked:
            # Advice only, given once; Slurm is not touched.
            mark = f"advice:{key}"
            if mark not in self.s.recorded:
                self.s.recorded = [*self.s.recorded, mark]
                await self._audit(
                    AuditEventType.WOULD_ACT, f"would {what} ({reason}) but {blocked}",
                    data={"step": step.value, "nodes": nodes, "blocked_by": blocked}, suffix=key,
                )  # fmt: skip
            return
        if key in self.s.completed_actions:
            return
        try:
            res: ArrayActionResult = await workflow.execute_activity_method(
                ArrayActivities.array_action,
                ArrayActionRequest(array=self.inp.array, step=step, idempotency_key=key,
                                   nodes=nodes, reason=reason),
                task_queue=self.queue,
                schedule_to_start_timeout=timedelta(seconds=self.inp.controller_timeout_seconds),
                start_to_close_timeout=timedelta(seconds=60),
                schedule_to_close_timeout=timedelta(minutes=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10),
                                         non_retryable_error_types=NON_RETRYABLE),
                activity_id=key,
                summary=f"{step.value} {','.join(nodes)}".strip(),
            )  # fmt: skip
        except ActivityError as err:
            await self._audit(
                AuditEventType.ACTION, f"{step.value} failed: {err.cause or err}",
                data={"step": step.value, "nodes": nodes, "status": "failed"}, suffix=key,
            )  # fmt: skip
            return
        self.s.completed_actions = {**self.s.completed_actions, key: res.outcome}
        if step == ArrayStep.HOLD_PENDING:
            self.s.held = True
        else:
            self.s.excluded_nodes = nodes
        await self._audit(
            AuditEventType.ACTION, f"{step.value}: {res.outcome} ({res.detail})",
            data=res.model_dump(mode="json"), suffix=key,
        )  # fmt: skip

    async def _audit(
        self, type_: AuditEventType, summary: str, *, data: dict[str, object], suffix: str = ""
    ) -> None:
        array = self.inp.array
        event = AuditEvent(
            event_id=f"{self.wfid}:{type_}" + (f":{suffix}" if suffix else ""),
            cluster=array.cluster,
            job_id=array.array_job_id,
            workflow_id=self.wfid,
            type=type_,
            producer="array_coordinator",
            at=workflow.now(),
            summary=summary[:2000],
            data=data,
        )
        event = event.model_copy(update={"event_id": event.event_id[:255]})
        await workflow.execute_activity_method(
            AuditActivities.record_audit,
            [event],
            task_queue=workflow.info().task_queue,
            **RECORD_AUDIT.kwargs(),
            summary=f"audit: {type_}",
        )


def _tasks(tasks: list[int], limit: int = 10) -> str:
    shown = ",".join(str(t) for t in tasks[:limit])
    return shown + (f",... ({len(tasks)} in all)" if len(tasks) > limit else "")
