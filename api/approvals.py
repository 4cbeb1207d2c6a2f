"""Advice and operator decisions: the advice awaiting (or given without) approval, and the
approve/reject and mode changes, sent to the job's workflow as updates.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import (
    WorkflowExecution,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from resurgo.api.auth import Principal
from resurgo.api.core import ApiProblem, GatewayCore, JobHandle, Located, attrs_of, ref_of
from resurgo.api.history import fold_events
from resurgo.api.listing import JobFilter, jobs_query
from resurgo.api.models import AdviceItem, AdvicePage, DecisionResponse, ModeResponse
from resurgo.contracts import ApprovalDecision, Mode, ModeChange
from resurgo.workflows.job_recovery import JobRecoveryWorkflow

UPDATE_TIMEOUT = timedelta(seconds=20)


class Approvals(GatewayCore):
    """`list_advice`, `decide` and `set_mode`."""

    # ---- advice ---------------------------------------------------------------------------------
    async def list_advice(
        self, pending: bool, cluster: str | None, cursor: str | None, limit: int
    ) -> AdvicePage:
        token: bytes | None = None
        if cursor:
            raw = self.cursors.decode(cursor).get("t")
            try:
                token = base64.b64decode(raw) if isinstance(raw, str) else None
            except binascii.Error as exc:
                raise ApiProblem(400, "invalid cursor") from exc
            if token is None:
                raise ApiProblem(400, "invalid cursor")
        query = jobs_query(JobFilter(cluster=cluster), running=True)
        if pending:
            query += " AND ResurgoNeedsApproval = true"
        page, next_token = await self._visibility_page(query, limit, token)
        results = await asyncio.gather(*(self._advice_of(e, pending) for e in page))
        items = [item for item, _ in results if item is not None]
        warnings = [w for _, w in results if w]
        return AdvicePage(
            items=items,
            next_cursor=self.cursors.encode({"t": base64.b64encode(next_token).decode()})
            if next_token
            else None,
            warnings=warnings,
        )

    async def _advice_of(
        self, e: WorkflowExecution, pending_only: bool
    ) -> tuple[AdviceItem | None, str | None]:
        ref = ref_of(e)
        if ref is None:
            return None, None
        status, problem = await self._status(e.id)
        folded = fold_events(await self._events(e.id))
        attrs = attrs_of(e)
        if status is not None:
            advice = status.pending_approval or (status.advice[-1] if status.advice else None)
            is_pending = status.pending_approval is not None
            phase, mode = status.phase, status.mode.value
        else:
            gen = folded.pending_generation if attrs["needs_approval"] else None
            view = folded.advice.get(gen) if gen is not None else None
            if view is None and folded.advice:
                view = folded.advice[max(folded.advice)]
            advice = view.advice if view else None
            is_pending = gen is not None and view is not None
            phase, mode = attrs["state"], attrs["mode"]
        if advice is None or (pending_only and not is_pending):
            return None, problem
        return (
            AdviceItem(
                job=ref,
                advice=advice,
                pending=is_pending,
                state=phase,
                mode=mode,
                requested_at=folded.requested_at.get(advice.generation),
                expires_at=folded.approval_deadline(advice.generation) if is_pending else None,
            ),
            problem,
        )

    # ---- operator decisions -------------------------------------------------------------------
    async def _live(self, cluster: str, job_id: int | str) -> tuple[Located, JobHandle]:
        loc = await self.locate(cluster, job_id)
        if not loc.live:
            raise ApiProblem(
                409, f"monitoring of {cluster}/{job_id} has ended: there is nothing to change"
            )
        return loc, await self._handle(loc.ref.workflow_id)

    async def decide(
        self,
        cluster: str,
        job_id: int | str,
        generation: int,
        *,
        approve: bool,
        reason: str,
        principal: Principal,
        request_id: str | None,
    ) -> DecisionResponse:
        loc, handle = await self._live(cluster, job_id)
        status, _ = await self._status(loc.ref.workflow_id)
        label = f"{cluster}/{job_id}"
        if status is not None:
            newest = max((a.generation for a in status.advice), default=0)
            if generation < 1 or generation > newest:
                pending = status.pending_approval
                raise ApiProblem(
                    404,
                    f"there is no advice g{generation} for {label}"
                    + (f" (g{pending.generation} is waiting for approval)" if pending else ""),
                )
        decision = ApprovalDecision(
            generation=generation, approve=approve, actor=principal.name, reason=reason
        )
        ack = await self._update(
            handle,
            JobRecoveryWorkflow.decide_advice,
            decision,
            request_id,
            refused=lambda msg: ApiProblem(409, f"{label}: {msg}"),
        )
        return DecisionResponse(job=loc.ref, decision=decision, ack=ack)

    async def set_mode(
        self, cluster: str, job_id: int | str, mode: Mode, reason: str, principal: Principal,
        request_id: str | None,
    ) -> ModeResponse:  # fmt: skip
        loc, handle = await self._live(cluster, job_id)
        change = ModeChange(mode=mode, actor=principal.name, reason=reason)
        status = await self._update(
            handle,
            JobRecoveryWorkflow.set_mode,
            change,
            request_id,
            refused=lambda msg: ApiProblem(409, f"{cluster}/{job_id}: {msg}"),
        )
        return ModeResponse(job=loc.ref, change=change, status=status)

    async def _update(
        self, handle: JobHandle, update: Any, arg: Any, request_id: str | None,
        refused: Any,
    ) -> Any:  # fmt: skip
        # A fresh update id per request unless the client supplied an idempotency key: update
        # ids dedupe within a run, so reusing one would replay an earlier answer.
        update_id = f"api-{request_id or uuid.uuid4().hex}"
        try:
            return await handle.execute_update(
                update, arg, id=update_id, rpc_timeout=UPDATE_TIMEOUT
            )
        except WorkflowUpdateFailedError as exc:
            raise refused(str(exc.cause)) from exc
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            raise ApiProblem(
                504, "no worker took the update in time: is `resurgo worker` running?"
            ) from exc
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise refused("monitoring has ended") from exc
            raise


__all__ = ["Approvals"]
