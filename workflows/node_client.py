"""Operator messages to a node health workflow, for the API and the CLI (kept out of the
workflow module: its imports run inside the workflow sandbox)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import Client

from resurgo.nodes.models import NodeHealthStatus, RepairMark, node_workflow_id
from resurgo.workflows.node_health import NodeHealthWorkflow

__all__ = ["mark_repaired"]


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
