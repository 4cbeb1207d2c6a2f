"""NodeHealthWorkflow: one durable workflow per lemon node, from drain advice to a validated
return to service.

advise → (observe mode: stop there) → approval if required → drain (controller: gates, breaker)
→ wait for a repair mark (operator `mark_repaired`, Slurm's own Reason change, or the configured
time) → health check on the node → resume if it passed, else keep it drained with the failed
check in its Reason and wait for the next repair mark.

Every step is an audit event (job id 0, the node in `data["node"]`). The workflow's history is
the dedup: a completed drain or check is never repeated on replay, and each check round has its
own job name, so a retried activity finds its job instead of submitting another.
Deterministic workflow code only: no I/O, no clock but `workflow.now()`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from resurgo.activities.audit import AuditActivities
    from resurgo.activities.calls import NON_RETRYABLE
    from resurgo.activities.node_health import NodeActivities
    from resurgo.contracts import (
        ApprovalAck,
        ApprovalDecision,
        AuditEvent,
        AuditEventType,
        Mode,
        controller_task_queue,
    )
    from resurgo.nodes import health_check as hc
    from resurgo.nodes.models import (
        HealthCheckRequest,
        HealthCheckResult,
        NodeDrainRequest,
        NodeHealthInput,
        NodeHealthState,
        NodeHealthStatus,
        NodeLook,
        NodeStepResult,
        RepairMark,
        ReturnRequest,
    )

STEP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)  # fmt: skip
AUDIT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1),
                          maximum_interval=timedelta(seconds=15))  # fmt: skip
HISTORY_ROLLOVER_EVENTS = 5000


@workflow.defn(name="NodeHealthWorkflow")
class NodeHealthWorkflow:
    @workflow.init
    def __init__(self, inp: NodeHealthInput) -> None:
        self.inp = inp
        self.s = inp.state or NodeHealthState()
        self.wfid = inp.workflow_id()
        self.queue = controller_task_queue(inp.cluster)
        # Event ids: one run per advice (its last failure's time tells runs apart).
        self.run_tag = f"{self.wfid}:{int(inp.advice.last_at.timestamp())}"

    # ---- read side and operator messages ------------------------------------------------------
    @workflow.query(description="Phase, validations and the last check of the node")
    def status(self) -> NodeHealthStatus:
        return NodeHealthStatus(
            cluster=self.inp.cluster, node=self.inp.node, phase=self.s.phase,
            validations=self.s.validations, outcome=self.s.outcome,
            last_check=self.s.last_check, reason=self.inp.advice.reason,
        )  # fmt: skip

    @workflow.update(description="Mark the drained node repaired: validation starts")
    async def mark_repaired(self, mark: RepairMark) -> NodeHealthStatus:
        self.s.repair = mark
        return self.status()

    @mark_repaired.validator
    def _validate_repair(self, mark: RepairMark) -> None:
        if self.s.phase != "drained":
            raise ValueError(f"node {self.inp.node} is {self.s.phase}, not waiting for repair")

    @workflow.update(description="Approve or reject draining the node")
    async def decide_drain(self, decision: ApprovalDecision) -> ApprovalAck:
        self.s.decision = decision
        return ApprovalAck(generation=0, accepted=True,
                           message="approved" if decision.approve else "rejected")  # fmt: skip

    @decide_drain.validator
    def _validate_decision(self, decision: ApprovalDecision) -> None:
        if self.s.phase != "awaiting_approval" or self.s.decision is not None:
            raise ValueError(f"no drain of {self.inp.node} is waiting for approval")

    # ---- main -------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: NodeHealthInput) -> str:
        if self.s.phase == "advised":
            done = await self._advise_and_drain()
            if done is not None:
                return done
        if inp.check is None:
            return await self._finish("drained_awaiting_human")
        while True:
            if not await self._wait_for_repair():
                return self.s.outcome or "ended"
            if await self._validate():
                return await self._finish("resumed")

    async def _advise_and_drain(self) -> str | None:
        adv = self.inp.advice
        if self.inp.adopt:
            return await self._adopt()
        observe = self.inp.mode == Mode.OBSERVE
        await self._audit(
            AuditEventType.NODE_DRAIN_ADVISED, f"drain {self.inp.node} advised: {adv.reason}",
            {"jobs": adv.jobs, "failures": adv.failures, "categories": adv.categories,
             "evidence": adv.evidence, "mode": self.inp.mode.value, "reason": adv.reason},
        )  # fmt: skip
        if observe:
            await self._audit(AuditEventType.WOULD_ACT,
                              f"would drain {self.inp.node} but observe mode (lemon_mode)",
                              {"steps": ["drain_node"], "blocked_by": "observe mode"})  # fmt: skip
            return await self._finish("advised")
        if self.inp.require_approval and not await self._approved():
            return await self._finish("not_approved")
        self._phase("draining")
        try:
            res: NodeStepResult = await self._on_cluster(
                NodeActivities.node_drain,
                NodeDrainRequest(node=self.inp.node, key=self.wfid,
                                 reason=hc.drain_reason(self.wfid, adv.reason)),
                timedelta(seconds=60), summary=f"drain {self.inp.node}",
            )  # fmt: skip
        except ActivityError as err:
            why = str(err.cause or err)
            await self._audit(AuditEventType.WOULD_ACT,
                              f"would drain {self.inp.node} but {why}",
                              {"steps": ["drain_node"], "blocked_by": why[:1000]})  # fmt: skip
            return await self._finish("drain_refused")
        self.s.drained_at = workflow.now()
        await self._audit(
            AuditEventType.NODE_DRAINED, f"drained {self.inp.node}: {res.outcome} ({res.detail})",
            {"jobs": adv.jobs, "outcome": res.outcome, "reason": hc.drain_reason(self.wfid,
             adv.reason), "state": res.look.state if res.look else ""},
        )  # fmt: skip
        self._phase("drained")
        return None

    async def _adopt(self) -> str | None:
        """A drain a job's recovery made: take it over (retag its Reason) for validation."""
        reason = hc.adopt_reason(self.wfid, self.inp.advice.reason)
        try:
            res: NodeStepResult = await self._on_cluster(
                NodeActivities.node_drain,
                NodeDrainRequest(node=self.inp.node, key=self.wfid, reason=reason, adopt=True),
                timedelta(seconds=60), summary=f"adopt the drain of {self.inp.node}",
            )  # fmt: skip
        except ActivityError as err:
            why = str(err.cause or err)
            await self._audit(AuditEventType.WOULD_ACT,
                              f"would validate {self.inp.node} but {why}",
                              {"steps": ["validate"], "blocked_by": why[:1000]})  # fmt: skip
            return await self._finish("adopt_refused")
        self.s.drained_at = workflow.now()
        await self._audit(
            AuditEventType.NODE_DRAINED,
            f"{self.inp.node} kept drained until validated ({res.detail})",
            {"adopted": True, "jobs": self.inp.advice.jobs, "reason": reason},
        )  # fmt: skip
        self._phase("drained")
        return None

    async def _approved(self) -> bool:
        self._phase("awaiting_approval")
        timeout = self.inp.approval_timeout_seconds
        await self._audit(AuditEventType.APPROVAL_REQUESTED,
                          f"drain of {self.inp.node} waits for an operator ({timeout:.0f}s)",
                          {"timeout_seconds": timeout})  # fmt: skip
        try:
            await workflow.wait_condition(lambda: self.s.decision is not None, timeout=timeout)
        except TimeoutError:
            await self._audit(
                AuditEventType.APPROVAL_EXPIRED,
                f"drain of {self.inp.node} not approved in {timeout:.0f}s",
                {},
            )
            return False
        decision = self.s.decision
        assert decision is not None
        await self._audit(
            AuditEventType.APPROVAL_APPROVED if decision.approve
            else AuditEventType.APPROVAL_REJECTED,
            f"drain of {self.inp.node} {'approved' if decision.approve else 'rejected'} by "
            f"{decision.actor}" + (f": {decision.reason}" if decision.reason else ""),
            decision.model_dump(mode="json"),
        )  # fmt: skip
        return decision.approve

    async def _wait_for_repair(self) -> bool:
        """Until marked repaired (True), or the node left our hands (False, finished)."""
        self._phase("drained")
        while self.s.repair is None:
            if self._should_roll_over():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self.inp.model_copy(update={"state": self.s}))
            wait = self.inp.poll_seconds
            after = self.inp.validate_after_seconds
            if after > 0 and self.s.drained_at is not None:
                due = self.s.drained_at + timedelta(seconds=after) - workflow.now()
                if due.total_seconds() <= 0:
                    self.s.repair = RepairMark(
                        actor="resurgo", note=f"validate_after {after:.0f}s elapsed"
                    )
                    break
                wait = min(wait, max(due.total_seconds(), 1.0))
            try:
                await workflow.wait_condition(lambda: self.s.repair is not None, timeout=wait)
                break
            except TimeoutError:
                pass
            look: NodeLook = await self._on_cluster(
                NodeActivities.node_look, self.inp.node, timedelta(seconds=30),
                summary=f"look at {self.inp.node}",
            )  # fmt: skip
            if look.exists and "DRAIN" not in look.state and "RESERVED" not in look.state:
                await self._audit(
                    AuditEventType.NODE_RESUMED,
                    f"{self.inp.node} was resumed outside Resurgo ({look.state}), without "
                    "validation", {"external": True, "state": look.state},
                )  # fmt: skip
                await self._finish("resumed_externally")
                return False
            seen = hc.repaired_in_slurm(look.state, look.reason, self.wfid)
            if seen:
                self.s.repair = RepairMark(actor="slurm", note=seen)
        mark = self.s.repair
        assert mark is not None
        await self._audit(
            AuditEventType.NODE_VALIDATION,
            f"{self.inp.node} marked repaired by {mark.actor}"
            + (f": {mark.note}" if mark.note else "") + "; validation starts",
            {"phase": "started", **mark.model_dump(mode="json")},
            suffix=f"start:r{self.s.validations + 1}",
        )  # fmt: skip
        return True

    async def _validate(self) -> bool:
        self._phase("validating")
        self.s.validations += 1
        n = self.s.validations
        check = self.inp.check
        assert check is not None
        try:
            result: HealthCheckResult = await self._on_cluster(
                NodeActivities.node_health_check,
                HealthCheckRequest(node=self.inp.node, key=self.wfid, round=n, spec=check),
                timedelta(seconds=check.timeout_seconds + 600), heartbeat=timedelta(seconds=30),
                summary=f"health check {n} of {self.inp.node}",
            )  # fmt: skip
        except ActivityError as err:
            why = f"check could not run: {err.cause or err}"[:1000]
            result = HealthCheckResult(job_id=0, passed=False, state="NOT_RUN", summary=why)
        self.s.last_check = result
        await self._audit(
            AuditEventType.NODE_VALIDATION,
            f"validation {n} of {self.inp.node}: {'passed' if result.passed else 'failed'}: "
            f"{result.summary}",
            {"phase": "finished", "round": n, **result.model_dump(mode="json")},
            suffix=f"r{n}",
        )  # fmt: skip
        reason = "" if result.passed else hc.failed_reason(self.wfid, result.summary)
        ret: NodeStepResult = await self._on_cluster(
            NodeActivities.node_return,
            ReturnRequest(node=self.inp.node, key=self.wfid, passed=result.passed, reason=reason),
            timedelta(seconds=60), summary=f"end validation {n} of {self.inp.node}",
        )  # fmt: skip
        if result.passed:
            await self._audit(AuditEventType.NODE_RESUMED,
                              f"{self.inp.node} back in service after validation {n} "
                              f"({ret.detail})", {"round": n, "job_id": result.job_id},
                              suffix=f"r{n}")  # fmt: skip
            return True
        await self._audit(AuditEventType.NODE_DRAINED,
                          f"{self.inp.node} kept drained: {reason} ({ret.detail})",
                          {"kept": True, "round": n, "reason": reason}, suffix=f"r{n}")  # fmt: skip
        self.s.repair = None
        return False

    # ---- plumbing -----------------------------------------------------------------------------
    def _phase(self, phase: str) -> None:
        self.s.phase = phase
        workflow.set_current_details(f"node {self.inp.cluster}/{self.inp.node}: {phase}")

    def _should_roll_over(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > HISTORY_ROLLOVER_EVENTS
        )

    async def _finish(self, outcome: str) -> str:
        self.s.outcome = outcome
        self._phase(outcome)
        return outcome

    async def _on_cluster(
        self, activity: Any, arg: object, start_to_close: timedelta, **extra: Any
    ) -> Any:
        """A controller activity on the cluster's queue; a missing controller is waited for
        (the step is never skipped), with growing schedule-to-start timeouts."""
        wait = self.inp.controller_timeout_seconds
        heartbeat = extra.pop("heartbeat", None)
        while True:
            try:
                return await workflow.execute_activity_method(
                    activity, arg, task_queue=self.queue, retry_policy=STEP_RETRY,
                    start_to_close_timeout=start_to_close,
                    schedule_to_start_timeout=timedelta(seconds=wait),
                    heartbeat_timeout=heartbeat, **extra,
                )  # fmt: skip
            except ActivityError as err:
                cause = err.cause
                if not (isinstance(cause, TemporalTimeoutError)
                        and cause.type == TimeoutType.SCHEDULE_TO_START):  # fmt: skip
                    raise
            # No controller picked it up: wait again, longer (history grows slowly).
            wait = min(wait * 2, 3600.0)

    async def _audit(
        self, type_: AuditEventType, summary: str, data: dict[str, object], suffix: str = ""
    ) -> None:
        ident = f"{self.run_tag}:{type_}" + (f":{suffix}" if suffix else "")
        event = AuditEvent(
            event_id=ident[:255], cluster=self.inp.cluster, job_id=0, workflow_id=self.wfid,
            type=type_, producer="node_health", at=workflow.now(), summary=summary[:2000],
            data={"node": self.inp.node, **data},
        )  # fmt: skip
        await workflow.execute_activity_method(
            AuditActivities.record_audit, [event], task_queue=workflow.info().task_queue,
            start_to_close_timeout=timedelta(seconds=30), retry_policy=AUDIT_RETRY,
            summary=f"audit: {type_}",
        )  # fmt: skip
