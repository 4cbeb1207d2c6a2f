"""The node health routes: `GET /v1/nodes` (nodes by risk, with their recent history),
`GET /v1/nodes/{cluster}/{node}` (one node's whole history) and
`POST /v1/nodes/{cluster}/{node}/repaired` (operator: start the node's validation) and
`POST /v1/nodes/{cluster}/{node}/drain-decision` (operator: approve or reject a drain).

Reads come from the audit store through `resurgo.nodes.read.node_records` (the console's Nodes
view can call the same function). Evidence lines of a failure are job output: shown per the
usual visibility rules (`resurgo.api.visibility`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, Field
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from resurgo.api.auth import Principal
from resurgo.api.core import ApiProblem
from resurgo.api.errors import documented
from resurgo.api.service import Gateway
from resurgo.api.visibility import shown_to
from resurgo.contracts import ApprovalAck, ApprovalDecision, PolicyConfig
from resurgo.nodes.ledger import NodeRecord
from resurgo.nodes.models import NodeHealthStatus, RepairMark
from resurgo.nodes.read import node_records
from resurgo.workflows.node_client import decide_drain, mark_repaired

__all__ = ["nodes_router"]

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
RECENT_ENTRIES = 50
T = TypeVar("T")
Cluster = Annotated[str, Path(pattern=NAME, description="cluster name")]
Node = Annotated[str, Path(pattern=NAME, description="node name")]


class NodeList(BaseModel):
    nodes: list[NodeRecord]


class RepairBody(BaseModel):
    note: str = Field(default="", max_length=2000)


class DrainDecisionBody(BaseModel):
    approve: bool
    reason: str = Field(default="", max_length=2000)


def _visible(who: Principal, record: NodeRecord, last: int | None = None) -> NodeRecord:
    history = record.history[-last:] if last else record.history
    shown = [shown_to(who, e.user, e) if e.evidence else e for e in history]
    return record.model_copy(update={"history": shown})


def nodes_router(
    gateway: Gateway,
    policy: PolicyConfig,
    viewer: Callable[..., Awaitable[Principal]],
    operator: Callable[..., Awaitable[Principal]],
) -> APIRouter:
    # Every error the node routes answer, in the one error shape (resurgo.api.errors).
    router = APIRouter(tags=["nodes"], responses=documented(400, 401, 403, 404, 409, 503, 504))

    async def records(cluster: str | None, node: str | None = None) -> list[NodeRecord]:
        return await asyncio.to_thread(
            node_records, gateway.store, cluster=cluster, node=node, policy=policy
        )

    @router.get("/v1/nodes")
    async def list_nodes(
        who: Principal = Depends(viewer),  # noqa: B008 - FastAPI's dependency idiom
        cluster: Annotated[str | None, Query(pattern=NAME)] = None,
    ) -> NodeList:
        """Every node Resurgo blamed or acted on, riskiest first (risk: distinct jobs blamed
        within the lemon window), each with its last entries."""
        found = await records(cluster)
        return NodeList(nodes=[_visible(who, r, RECENT_ENTRIES) for r in found])

    @router.get("/v1/nodes/{cluster}/{node}")
    async def get_node(
        cluster: Cluster, node: Node,
        who: Principal = Depends(viewer),  # noqa: B008
    ) -> NodeRecord:  # fmt: skip
        """One node's whole history: failures (job, category, evidence, time), exclusions,
        drains, drain advice, validations and resumes."""
        found = await records(cluster, node)
        if not found:
            raise ApiProblem(404, f"no history for node {node} of cluster {cluster}")
        return _visible(who, found[0])

    @router.post("/v1/nodes/{cluster}/{node}/repaired")
    async def node_repaired(
        cluster: Cluster, node: Node, body: RepairBody,
        who: Principal = Depends(operator),  # noqa: B008
    ) -> NodeHealthStatus:  # fmt: skip
        """Mark a node Resurgo drained as repaired: its health check runs now (409 when the
        node is not waiting for a repair, 404 when no node workflow runs for it)."""
        mark = RepairMark(actor=who.name, note=body.note)
        return await updated(cluster, node, lambda c: mark_repaired(c, cluster, node, mark))

    @router.post("/v1/nodes/{cluster}/{node}/drain-decision")
    async def node_drain_decision(
        cluster: Cluster, node: Node, body: DrainDecisionBody,
        who: Principal = Depends(operator),  # noqa: B008
    ) -> ApprovalAck:  # fmt: skip
        """Approve or reject the drain of a lemon node that waits for an operator (policy
        `require_approval`; 409 when no drain of the node waits)."""
        decision = ApprovalDecision(generation=0, approve=body.approve, actor=who.name,
                                    reason=body.reason)  # fmt: skip
        return await updated(cluster, node, lambda c: decide_drain(c, cluster, node, decision))

    async def updated(cluster: str, node: str, send: Callable[[Any], Awaitable[T]]) -> T:
        client = await gateway.temporal.get()
        try:
            return await send(client)
        except WorkflowUpdateFailedError as exc:
            raise ApiProblem(409, f"{cluster}/{node}: {exc.cause}") from exc
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            raise ApiProblem(504, "no worker took the update in time") from exc
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ApiProblem(404, f"no node health workflow for {cluster}/{node}") from exc
            raise

    return router
