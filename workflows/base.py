"""What every part of JobRecoveryWorkflow shares: its state, the audit trail, the UI's view of
it, and running an activity on the cluster's controller queue.

Deterministic workflow code only: no I/O, no clock but `workflow.now()`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from resurgo.activities import calls
    from resurgo.contracts import (
        Advice,
        AttemptRecord,
        AuditEvent,
        AuditEventType,
        Directive,
        RecoveryInput,
        RecoveryState,
    )
    from resurgo.policy import decide as policy
    from resurgo.workflows import search_attributes as sa


class RecoveryBase:
    inp: RecoveryInput
    directive: Directive
    s: RecoveryState
    wfid: str
    queue: str

    def _pending_advice(self) -> Advice | None:
        gen = self.s.pending_approval
        return next((a for a in self.s.advice_log if a.generation == gen), None)

    async def _on_cluster(
        self, activity: Any, arg: object, options: calls.ActivityOptions, **extra: Any
    ) -> Any:
        """Run a controller activity (passed by reference) on the cluster's queue. If no
        controller picks it up in time (all controllers dead or partitioned), say so once and
        keep waiting: the work is never skipped or marked done."""
        name = activity.__name__
        reported = False
        while True:
            try:
                return await workflow.execute_activity_method(
                    activity,
                    arg,
                    task_queue=self.queue,
                    schedule_to_start_timeout=timedelta(
                        seconds=self.inp.controller_timeout_seconds
                    ),
                    **options.kwargs(),
                    **extra,
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
                    AuditEventType.CONTROLLER_UNREACHABLE,
                    f"no controller for cluster {self.inp.job.cluster} picked up {name} in "
                    f"{self.inp.controller_timeout_seconds:.0f}s (queue {self.queue}); waiting",
                    attempt=self.s.attempt,
                    data={"activity": name, "task_queue": self.queue},
                    suffix=f"{workflow.info().get_current_history_length()}",
                )
            await workflow.sleep(timedelta(seconds=5), summary="controller-retry")

    def _next_attempt(self, attempt: int) -> None:
        self.s.attempt = attempt
        self.s.attempts = [*self.s.attempts, AttemptRecord(attempt=attempt)][-50:]
        self.s.phase = "watching"
        workflow.upsert_search_attributes([sa.ATTEMPT.value_set(attempt)])

    def _event(
        self, type_: AuditEventType, summary: str, attempt: int | None, data: dict[str, object],
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
        self, type_: AuditEventType, summary: str, *, attempt: int | None = None,
        data: dict[str, object] | None = None, suffix: str = "",
    ) -> None:  # fmt: skip
        await self._audit_many([self._event(type_, summary, attempt, data or {}, suffix)])

    async def _audit_many(self, events: list[AuditEvent]) -> None:
        await workflow.execute_activity_method(
            calls.record_audit,
            events,
            # The worker running this workflow also serves the audit activity.
            task_queue=workflow.info().task_queue,
            **calls.RECORD_AUDIT.kwargs(),
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
