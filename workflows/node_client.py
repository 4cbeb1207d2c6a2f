"""Operator messages to a node health workflow, for the API and the CLI (kept out of the
workflow module: its imports run inside the workflow sandbox)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import Client

from resurgo.contracts import ApprovalAck, ApprovalDecision
from resurgo.nodes.models import NodeHealthStatus, RepairMark, node_workflow_id
from resurgo.workflows.node_health import NodeHealthWorkflow

__all__ = ["decide_drain", "mark_repaired"]


async def mark_repaired(
    client: Client, cluster: str, node: str, mark: RepairMark
) -> NodeHealthStatus:
    """Tell the node's workflow it was repaired (validation starts). Raises Temporal's
    `RPCError` (NOT_FOUND: no workflow for the node) or `WorkflowUpdateFailedError` (the
    validator refused: the node is not waiting for a repair)."""
    handle = client.get_workflow_handle(node_workflow_id(cluster, node))
    update: Any = NodeHealthWorkflow.mark_repaired  # the SDK's generic misses async updates
    status: NodeHealthStatus = await handle.execute_update(
        update, mark, rpc_timeout=timedelta(seconds=30)
    )
    return status


async def decide_drain(
    client: Client, cluster: str, node: str, decision: ApprovalDecision
) -> ApprovalAck:
    """Approve or reject the drain of a lemon node waiting for an operator (same errors as
    `mark_repaired`)."""
    handle = client.get_workflow_handle(node_workflow_id(cluster, node))
    update: Any = NodeHealthWorkflow.decide_drain
    ack: ApprovalAck = await handle.execute_update(
        update, decision, rpc_timeout=timedelta(seconds=30)
    )
    return ack
