"""What every part of JobRecoveryWorkflow shares: its state, the audit trail, the UI's view of
it, and running an activity on the cluster's controller queue.

Deterministic workflow code only: no I/O, no clock but `workflow.now()`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState, TimeoutType
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
    from resurgo.workflows import narrative, patches
    from resurgo.workflows import search_attributes as sa

# A wait for a missing controller doubles its schedule-to-start timeout up to this, so history
# grows by a few events an hour, not a few a minute (plus continue-as-new where that is safe).
MAX_CONTROLLER_WAIT_SECONDS = 3600.0
HISTORY_ROLLOVER_EVENTS = 8000


class RecoveryBase:
    inp: RecoveryInput
    directive: Directive
    s: RecoveryState
    wfid: str
    queue: str
    # While a hold of ours is outstanding, audit writes are bounded (the release must not wait
    # for the store); events the store did not take are kept here and written with the next
    # audit. Not in the state: no continue-as-new happens while a hold is outstanding.
    _holding: bool = False
    _unrecorded: tuple[AuditEvent, ...] = ()

    def _should_roll_over(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > HISTORY_ROLLOVER_EVENTS
        )

    def _pending_advice(self) -> Advice | None:
        gen = self.s.pending_approval
        return next((a for a in self.s.advice_log if a.generation == gen), None)

    async def _on_cluster(
        self,
        activity: Any,
        arg: object,
        options: calls.ActivityOptions,
        *,
        rollover: bool = False,
        **extra: Any,
    ) -> Any:
        """Run a controller activity (passed by reference) on the cluster's queue. If no
        controller picks it up in time (all controllers dead or partitioned), say so once and
        keep waiting: the work is never skipped or marked done. A long wait must not fill the
        history: the schedule-to-start timeout grows, and where the caller can start over
        (`rollover`: the watch, which resumes from the state's cursor) it continues-as-new."""
        name = activity.__name__
        reported = False
        wait = self.inp.controller_timeout_seconds
        while True:
            try:
                return await workflow.execute_activity_method(
                    activity,
                    arg,
                    task_queue=self.queue,
                    schedule_to_start_timeout=timedelta(seconds=wait),
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
            roll = rollover and self._should_roll_over()
            if roll and workflow.patched(patches.LONG_WAIT_ROLLS_OVER):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self.inp.model_copy(update={"state": self.s}))
            if not rollover and workflow.patched(patches.LONG_WAIT_ROLLS_OVER):
                # A wait that cannot start over (mid-action, attribution) grows its timeout.
                wait = min(wait * 2, max(MAX_CONTROLLER_WAIT_SECONDS, wait))
            await workflow.sleep(timedelta(seconds=5), summary="controller-retry")

    def _next_attempt(self, attempt: int) -> None:
        self.s.attempt = attempt
        # Output read so far belongs to earlier attempts: the new one's begins after it (its
        # watch skips further on while it sees the job PENDING).
        start = self.s.cursor.line_no if self.s.cursor is not None else 0
        record = AttemptRecord(attempt=attempt, start_line=start)
        self.s.attempts = [*self.s.attempts, record][-50:]
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
        bounded = self._holding and workflow.patched(patches.BOUNDED_AUDIT_DURING_HOLD)
        batch = [*self._unrecorded, *events]
        options = calls.record_audit_during_hold(self.inp.hold_timeout_seconds) if bounded else (
            calls.RECORD_AUDIT
        )  # fmt: skip
        try:
            await workflow.execute_activity_method(
                calls.record_audit,
                batch,
                # The worker running this workflow also serves the audit activity.
                task_queue=workflow.info().task_queue,
                **options.kwargs(),
                summary="audit: " + ", ".join(e.type for e in batch),
            )
        except ActivityError as err:
            # Out of time: a timeout itself, or the last retry's failure cut off by the bound.
            timed_out = isinstance(err.cause, TemporalTimeoutError) or (
                err.retry_state == RetryState.TIMEOUT
            )
            if not (bounded and timed_out):
                raise
            # The store is down while a hold is outstanding: carry on to the release; these
            # events go out with the next audit write (ids are stable, so never twice).
            self._unrecorded = tuple(batch)[-200:]
            return
        self._unrecorded = ()

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
        workflow.set_current_details(
            narrative.details(
                label=self.inp.job.label(),
                job_name=self.inp.job_name,
                mode=self.s.mode.value,
                phase=self.s.phase,
                attempt=self.s.attempt,
                last_category=self.s.last_category,
                excluded_nodes=self.s.excluded_nodes,
                pending=self._pending_advice(),
                last=self.s.advice_log[-1] if self.s.advice_log else None,
            )
        )
