"""Temporal activities of the audit store.

The store is injected, so the worker owns one `AuditStore` (and its connection pool) for all
activity executions:

    audit = AuditActivities(AuditStore(store_url_from_env()))
    Worker(..., activities=[audit.record_audit])
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from temporalio import activity

from resurgo.activities.errors import permanent_failures
from resurgo.audit.errors import BadAuditEvent
from resurgo.audit.store import AuditStore
from resurgo.contracts import AuditEvent


class AuditActivities:
    def __init__(
        self, store: AuditStore, on_recorded: Callable[[Sequence[AuditEvent]], None] | None = None
    ) -> None:
        self._store = store
        # Called with each stored batch (resurgo.worker.telemetry.AuditMetrics counts it).
        self._on_recorded = on_recorded

    @activity.defn(name="record_audit")
    async def record_audit(self, events: list[AuditEvent]) -> int:
        """Append events (idempotent by `event_id`); return how many were new.

        `AuditStoreUnavailable` propagates as a retryable failure, so Temporal keeps retrying and
        the events land once the database is back. An event that can never be stored (a field
        over its column limit, non-JSON data) fails non-retryably with type `BadAuditEvent`.
        """
        with permanent_failures():
            try:
                new = await asyncio.to_thread(self._store.append, events)
            except ValueError as exc:
                raise BadAuditEvent(str(exc)) from exc
        if self._on_recorded is not None and new:
            self._on_recorded(events)
        return new
