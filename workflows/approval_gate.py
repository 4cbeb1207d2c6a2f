"""The approval gate of JobRecoveryWorkflow: whether advice may be carried out at all (mode,
acknowledgement, partition allowlist), and waiting for an operator's decision, failing open on
timeout (no scheduler action)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from resurgo.contracts import Advice, Attribution, AuditEventType
    from resurgo.policy import decide as policy
    from resurgo.policy.gates import action_blocker
    from resurgo.workflows import patches
    from resurgo.workflows import search_attributes as sa
    from resurgo.workflows.base import RecoveryBase


class ApprovalGate(RecoveryBase):
    def _approval_required(self) -> bool:
        return self.directive.approval == "required" or self.inp.policy.require_approval

    async def _approved(self, advice: Advice, attribution: Attribution) -> bool:
        """Wait for an operator; on timeout fail open: no scheduler action at all."""
        gen = advice.generation
        cause = f"{advice.attempt}:{attribution.fingerprint}"
        if cause in self.s.declined and workflow.patched(patches.NO_REASK):
            # The same failure of the same attempt, seen again (e.g. the job died after a hang
            # was reported): the operator already said no.
            await self._audit(
                AuditEventType.WOULD_ACT,
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
            AuditEventType.APPROVAL_REQUESTED,
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
                AuditEventType.APPROVAL_EXPIRED,
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
        return action_blocker(self.s.mode, self.inp.gates, self.inp.partition, "job")
