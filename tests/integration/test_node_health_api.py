"""`GET /v1/nodes` and `GET /v1/nodes/{cluster}/{node}` read the node ledger from the audit store:
nodes by risk with their history, job output withheld from viewers not allowed to read it, and
the repair mark reserved to operators."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from resurgo.api.app import create_app
from resurgo.audit.store import AuditStore
from resurgo.config import ResurgoConfig
from resurgo.contracts import AuditEvent, AuditEventType
from resurgo.tokens import hash_token, new_token

NOW = datetime.now(UTC)
VIEWER, ALICE_VIEWER, OPERATOR = new_token(), new_token(), new_token()


def events() -> list[AuditEvent]:
    out: list[AuditEvent] = []
    for n, (job, user, nodes) in enumerate(
        [(11, "alice", ["node4"]), (12, "bob", ["node4"]), (13, "alice", ["node4", "node2"])]
    ):
        wf = f"resurgo:c1:{job}:1"
        at = NOW - timedelta(minutes=30 - n)
        base = {"cluster": "c1", "job_id": job, "workflow_id": wf, "producer": "workflow"}
        out.append(AuditEvent(event_id=f"{wf}:m", type=AuditEventType.MONITORING_STARTED,
                              at=at, data={"user": user}, **base))  # fmt: skip
        out.append(AuditEvent(
            event_id=f"{wf}:a", type=AuditEventType.ATTRIBUTION, at=at, **base,
            data={"kind": "crash", "category": "hardware_gpu", "culprit_nodes": nodes,
                  "summary": f"ECC error in job {job}",
                  "evidence": [{"source": "job.log", "line_no": 3,
                                "text": f"secret output of {user}"}]},
        ))  # fmt: skip
    return out


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.append(events())
    config = ResurgoConfig.model_validate({
        "temporal": {"address": "127.0.0.1:9"},
        "api": {"tokens": {
            "vera": {"role": "viewer", "sha256": hash_token(VIEWER)},
            "ann": {"role": "viewer", "sha256": hash_token(ALICE_VIEWER), "users": ["alice"]},
            "otto": {"role": "operator", "sha256": hash_token(OPERATOR)},
        }},
    })  # fmt: skip
    return TestClient(create_app(config, store=store))


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_nodes_are_listed_by_risk_with_their_failures(client: TestClient) -> None:
    assert client.get("/v1/nodes").status_code == 401
    resp = client.get("/v1/nodes", headers=auth(OPERATOR))
    assert resp.status_code == 200, resp.text
    nodes = resp.json()["nodes"]
    assert [(n["node"], n["risk"], n["failing_jobs"]) for n in nodes] == [
        ("node4", 3, [11, 12, 13]),
        ("node2", 1, [13]),
    ]
    history = nodes[0]["history"]
    assert [e["job_id"] for e in history] == [11, 12, 13]
    assert history[1]["summary"] == "ECC error in job 12"
    assert history[1]["evidence"][0]["text"] == "secret output of bob"


def test_one_node_and_its_evidence_per_visibility(client: TestClient) -> None:
    resp = client.get("/v1/nodes/c1/node4", headers=auth(ALICE_VIEWER))
    assert resp.status_code == 200, resp.text
    texts = {e["job_id"]: e["evidence"][0]["text"] for e in resp.json()["history"]}
    assert texts[11] == "secret output of alice"
    assert "secret" not in texts[12] and "withheld" in texts[12]
    assert client.get("/v1/nodes/c1/node9", headers=auth(VIEWER)).status_code == 404
    assert client.get("/v1/nodes/c1/bad;name", headers=auth(VIEWER)).status_code in (404, 422)


def test_only_operators_mark_a_node_repaired(client: TestClient) -> None:
    url = "/v1/nodes/c1/node4/repaired"
    assert client.post(url, json={"note": "x"}, headers=auth(VIEWER)).status_code == 403
    # An operator gets through to Temporal, which is not there in this test.
    resp = client.post(url, json={"note": "new GPU"}, headers=auth(OPERATOR))
    assert resp.status_code in (503, 504), resp.text
