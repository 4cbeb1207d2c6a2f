"""What the HTTP gateway does, independent of HTTP: reads from Temporal and the audit store,
operator decisions as workflow updates.

Live jobs are read from Temporal (visibility for listings, the `status` query for details);
finished ones from the audit store, enriched with their closed workflow's search attributes while
Temporal still keeps them. Every workflow handle is run-less, so it follows continue-as-new.

`Gateway` puts the parts together: the shared reads (`resurgo.api.core`), job listings
(`resurgo.api.listing`), one job's detail and timeline (`resurgo.api.detail`), advice and operator
decisions (`resurgo.api.approvals`); its own concern is readiness.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from temporalio.service import RPCError

from resurgo.api.approvals import Approvals
from resurgo.api.core import ApiProblem
from resurgo.api.detail import JobDetails
from resurgo.api.listing import JobListing
from resurgo.api.models import Readiness, ReadinessCheck
from resurgo.audit.store import AuditStoreUnavailable

log = logging.getLogger("resurgo.api")

READY_TIMEOUT = 3.0


class Gateway(JobListing, JobDetails, Approvals):
    """The gateway the HTTP app serves: every part, plus readiness."""

    # ---- health ---------------------------------------------------------------------------------
    async def readiness(self) -> Readiness:
        temporal, audit = await asyncio.gather(self._temporal_ready(), self._store_ready())
        # Ready while the store answers: with Temporal down, reads still come from the store.
        return Readiness(
            ready=audit.ok, degraded=not temporal.ok, checks={"temporal": temporal, "audit": audit}
        )

    async def _temporal_ready(self) -> ReadinessCheck:
        try:
            client = await self.temporal.get()
            ok = await asyncio.wait_for(
                client.service_client.check_health(timeout=timedelta(seconds=READY_TIMEOUT)),
                READY_TIMEOUT + 1,
            )
        except (ApiProblem, RPCError, TimeoutError, RuntimeError) as exc:
            return ReadinessCheck(ok=False, detail=str(exc) or type(exc).__name__)
        return ReadinessCheck(
            ok=bool(ok), detail=self.temporal.settings.address if ok else "not serving"
        )

    async def _store_ready(self) -> ReadinessCheck:
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self.store.query, limit=1), timeout=READY_TIMEOUT
            )
        except AuditStoreUnavailable as exc:
            return ReadinessCheck(ok=False, detail=str(exc))
        except TimeoutError:
            return ReadinessCheck(ok=False, detail=f"{self.store.url} did not answer in time")
        return ReadinessCheck(ok=True, detail=self.store.url)


__all__ = ["Gateway"]
