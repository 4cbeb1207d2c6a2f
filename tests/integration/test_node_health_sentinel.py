"""The lemon sentinel follows the audit store and starts one node workflow per advice: not again
for the same failures, again for new ones, and one adopting a job's drain in action mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.exceptions import WorkflowAlreadyStartedError

from resurgo.audit.store import AuditStore
from resurgo.config import ResurgoConfig
from resurgo.contracts import AuditEvent, AuditEventType
from resurgo.nodes.models import NodeHealthInput
from resurgo.worker.node_sentinel import NodeSentinel

NOW = datetime.now(UTC)


class FakeClient:
    """Records starts; a workflow id already running refuses a second start."""

    def __init__(self) -> None:
        self.started: list[NodeHealthInput] = []
        self.running: set[str] = set()

    async def start_workflow(self, _run: Any, inp: NodeHealthInput, *, id: str, **_: Any) -> None:
        if id in self.running:
            raise WorkflowAlreadyStartedError(id, "NodeHealthWorkflow")
        self.running.add(id)
        self.started.append(inp)


def blame(job: int, node: str, minutes_ago: float = 1) -> AuditEvent:
    wf = f"resurgo:local:{job}:1"
    return AuditEvent(
        event_id=f"{wf}:attribution", cluster="local", job_id=job, workflow_id=wf,
        type=AuditEventType.ATTRIBUTION, producer="workflow",
        at=NOW - timedelta(minutes=minutes_ago),
        data={"kind": "crash", "category": "hardware_gpu", "culprit_nodes": [node]},
    )  # fmt: skip


def sentinel(tmp_path: Path, nodes: dict[str, Any]) -> tuple[NodeSentinel, AuditStore, FakeClient]:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    config = ResurgoConfig.model_validate({"policies": {"default": {"nodes": nodes}}})
    client = FakeClient()
    return NodeSentinel(client, store, config), store, client  # type: ignore[arg-type]


async def test_one_workflow_per_advice(tmp_path: Path) -> None:
    watch, store, client = sentinel(tmp_path, {"lemon_failures": 3})
    store.append([blame(1, "node2"), blame(2, "node2")])
    assert await watch.tick() == []
    store.append([blame(3, "node2"), blame(9, "node3")])
    (advice,) = await watch.tick()
    assert advice.node == "node2" and advice.jobs == [1, 2, 3]
    assert client.started[0].mode.value == "observe" and client.started[0].check is None
    assert await watch.tick() == []  # the same failures: not started again
    client.running.clear()  # that run ended (observe mode: advice recorded)
    store.append([blame(j, "node2") for j in (4, 5, 6)])
    (again,) = await watch.tick()
    assert again.jobs == [1, 2, 3, 4, 5, 6]  # no advice event in this store: all still count


async def test_a_jobs_drain_is_adopted_in_action_mode_with_a_check(tmp_path: Path) -> None:
    rules = {"lemon_mode": "action", "health_check": ["true"]}
    watch, store, client = sentinel(tmp_path, rules)
    wf = "resurgo:local:7:1"
    base = {"cluster": "local", "job_id": 7, "workflow_id": wf, "producer": "workflow", "at": NOW}
    store.append([
        AuditEvent(event_id=f"{wf}:advice", type=AuditEventType.ADVICE, **base,
                   data={"generation": 1, "nodes": ["node4"], "drain_nodes": ["node4"]}),
        AuditEvent(event_id=f"{wf}:drain", type=AuditEventType.ACTION, **base,
                   data={"step": "drain_node", "idempotency_key": f"{wf}:g1:drain_node",
                         "outcome": "applied", "detail": "drained node4"}),
    ])  # fmt: skip
    (adopted,) = await watch.tick()
    assert adopted.node == "node4" and adopted.jobs == [7]
    assert client.started[0].adopt and client.started[0].check is not None
    assert await watch.tick() == []
