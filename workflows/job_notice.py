"""JobNoticeWorkflow: records one audit event about a job discovery leaves alone (a
heterogeneous job, an array whose tasks cannot be read), so that an opted-in job is never
skipped silently. Started once per job (its id names the job), it writes the event and ends."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from resurgo.activities.audit import AuditActivities
    from resurgo.activities.calls import RECORD_AUDIT
    from resurgo.contracts import AuditEvent


@workflow.defn(name="JobNoticeWorkflow")
class JobNoticeWorkflow:
    @workflow.run
    async def run(self, event: AuditEvent) -> str:
        await workflow.execute_activity_method(
            AuditActivities.record_audit,
            [event],
            task_queue=workflow.info().task_queue,
            **RECORD_AUDIT.kwargs(),
            summary=f"audit: {event.type}",
        )
        return event.type
