"""JobRecoveryWorkflow as it recorded a heterogeneous job's attempt_started before the
components were recorded (issue 16), for tests/integration/test_hetjob_replay.py: its histories
are what workflows already running at the upgrade carry, and must replay with today's code.

Kept in their own module: the workflow sandbox re-imports the module a workflow is defined in.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from resurgo.contracts import AuditEventType, RecoveryInput, RecoveryOutcome, WatchResult
    from resurgo.workflows.job_recovery import JobRecoveryWorkflow


@workflow.defn(name="JobRecoveryWorkflow")
class BeforeComponents(JobRecoveryWorkflow):
    @workflow.run
    async def run(self, inp: RecoveryInput) -> RecoveryOutcome:
        return await super().run(inp)

    async def _attempt_started(self, result: WatchResult) -> None:
        # The body of commit 2509674 (before the patch), unchanged.
        cur = self.s.attempts[-1]
        cur.started = True
        cur.start_line = result.attempt_start_line
        nodes = result.observation.node_list if result.observation else []
        self._set_phase("running")
        await self._audit(
            AuditEventType.ATTEMPT_STARTED,
            f"attempt {self.s.attempt} running on {','.join(nodes) or '?'}",
            attempt=self.s.attempt,
            data={"nodes": nodes, "excluded": result.observation.exc_node_list
                  if result.observation else []},
        )  # fmt: skip
