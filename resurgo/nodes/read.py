"""Reading the node ledger from the audit store: what `resurgo nodes`, `GET /v1/nodes` and the
console's Nodes view show. Blocking (call from a thread in async code)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resurgo.audit.store import AuditStore
from resurgo.contracts import AuditEventType, PolicyConfig
from resurgo.nodes.ledger import Ledger, NodeRecord

__all__ = ["LEDGER_EVENT_TYPES", "node_records"]

# The event types the ledger folds (everything else is skipped at the query).
LEDGER_EVENT_TYPES = [
    AuditEventType.MONITORING_STARTED,
    AuditEventType.ATTRIBUTION,
    AuditEventType.ADVICE,
    AuditEventType.ACTION,
    AuditEventType.NODE_DRAIN_ADVISED,
    AuditEventType.NODE_DRAINED,
    AuditEventType.NODE_VALIDATION,
    AuditEventType.NODE_RESUMED,
]


def node_records(
    store: AuditStore,
    *,
    cluster: str | None = None,
    node: str | None = None,
    policy: PolicyConfig | None = None,
    now: datetime | None = None,
    since: datetime | None = None,
) -> list[NodeRecord]:
    """Every node in the audit trail (of `cluster`; only `node` if given), riskiest first.
    Risk counts the distinct jobs blamed within the policy's lemon window (PolicyConfig.nodes)."""
    rules = (policy or PolicyConfig()).nodes
    ledger = Ledger()
    for event in store.iter_all(cluster=cluster, types=LEDGER_EVENT_TYPES, since=since):
        ledger.add(event)
    records = ledger.records(
        now=now or datetime.now(UTC), window=timedelta(seconds=rules.lemon_window_seconds)
    )
    return [r for r in records if node is None or r.node == node]
