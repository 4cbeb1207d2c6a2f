"""The array-task side of JobRecoveryWorkflow: a task of a job array reports each failure to
its array's coordinator (ArrayCoordinatorWorkflow) and waits briefly for the verdict, so that a
failure systematic across the array is not retried. No answer in time: the task decides alone,
as a single job would (noted in its audit trail)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from resurgo.array_models import ArrayVerdict, TaskFailure, array_workflow_id
    from resurgo.contracts import Attribution, AuditEventType
    from resurgo.policy import arrays as array_policy
    from resurgo.workflows.array_coordinator import REPORT_SIGNAL
    from resurgo.workflows.base import RecoveryBase

VERDICT_WAIT_SECONDS = 60.0


class ArrayTask(RecoveryBase):
    # The coordinator's answers by "<attempt>:<fingerprint>", as its signals bring them. Not in
    # the state: an answer is read within the same run that asked for it.
    array_verdicts: dict[str, ArrayVerdict]

    def _keep_verdict(self, answer: ArrayVerdict) -> None:
        kept = {**self.array_verdicts, answer.key: answer}
        self.array_verdicts = dict(list(kept.items())[-20:])

    async def _array_verdict(
        self, attribution: Attribution, nodes: list[str]
    ) -> ArrayVerdict | None:
        job = self.inp.job
        if job.array_job_id is None or job.array_task_id is None:
            return None
        if not array_policy.reportable(attribution.category, str(attribution.kind)):
            return None
        failure = TaskFailure(
            task_id=job.array_task_id, job_id=job.job_id, attempt=self.s.attempt,
            fingerprint=attribution.fingerprint, category=attribution.category,
            culprit_nodes=attribution.culprit_nodes, nodes=nodes,
            summary=attribution.summary[:500], workflow_id=self.wfid,
        )  # fmt: skip
        key = failure.key()
        if key not in self.array_verdicts:
            coordinator = array_workflow_id(job.cluster, job.array_job_id)
            try:
                await workflow.get_external_workflow_handle(coordinator).signal(
                    REPORT_SIGNAL, failure
                )
                await workflow.wait_condition(
                    lambda: key in self.array_verdicts,
                    timeout=timedelta(seconds=VERDICT_WAIT_SECONDS),
                    timeout_summary="array-verdict",
                )
            except (FailureError, TimeoutError) as exc:
                why = "is not running" if isinstance(exc, FailureError) else "did not answer"
                note = (
                    f"the array's coordinator ({coordinator}) {why}: this failure is judged "
                    "on this task alone"
                )
                await self._audit(
                    AuditEventType.EVIDENCE_LIMITED, note, attempt=self.s.attempt,
                    data={"note": note},
                    suffix=hashlib.sha256(f"{key}:{why}".encode()).hexdigest()[:16],
                )  # fmt: skip
                return None
        return self.array_verdicts.get(key)
