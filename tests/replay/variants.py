"""Workflow variants for tests/integration/test_replay_guard.py.

Kept in their own module: the workflow sandbox re-imports the module a workflow is defined in,
and the test module reads files at import time.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

# Passed through like the workflow's own imports: the sandbox must see the same model classes
# as the activities' annotations (from which results are decoded), never a second copy.
with workflow.unsafe.imports_passed_through():
    from resurgo.contracts import RecoveryInput, RecoveryOutcome
    from resurgo.workflows.job_recovery import JobRecoveryWorkflow


@workflow.defn(name="JobRecoveryWorkflow")
class UnguardedChange(JobRecoveryWorkflow):
    @workflow.run
    async def run(self, inp: RecoveryInput) -> RecoveryOutcome:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(inp)


@workflow.defn(name="JobRecoveryWorkflow")
class GuardedChange(JobRecoveryWorkflow):
    @workflow.run
    async def run(self, inp: RecoveryInput) -> RecoveryOutcome:
        if workflow.patched("test-guarded-extra-timer"):
            await workflow.sleep(timedelta(seconds=1))
        return await super().run(inp)
