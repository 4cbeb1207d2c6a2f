"""The API follows its ecosystem's conventions: docs at `/docs`, operation ids a generated client
can use, one error shape for every error (422 included), CORS off unless configured, and with
Temporal down the audit-backed reads still answer (marked degraded) while `/readyz` stays ready."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from resurgo.api.app import create_app
from resurgo.audit.store import AuditStore
from resurgo.config import ApiSettings
from resurgo.contracts import AuditEvent, AuditEventType
from tests.integration.test_api import api_config, make_tokens

TEMPORAL_DOWN = "127.0.0.1:9"  # nothing listens there


def recorded(store: AuditStore, cluster: str, job_id: int) -> None:
    wid = f"resurgo:{cluster}:{job_id}:1700000000"
    store.append([
        AuditEvent(event_id=f"{wid}:{n}", cluster=cluster, job_id=job_id, workflow_id=wid,
                   attempt=0, type=t, producer="workflow", summary=f"step {n}",
                   at=datetime(2026, 11, 2, 8, n, tzinfo=UTC))
        for n, t in enumerate([AuditEventType.MONITORING_STARTED, AuditEventType.ANOMALY])
    ])  # fmt: skip


async def client_for(app: object) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
        base_url="http://resurgo",
    ) as http:
        yield http


@pytest.fixture
async def down(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """An API whose Temporal is unreachable, over a store that knows job c1/42."""
    tokens, entries = make_tokens()
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = AuditStore(url)
    recorded(store, "c1", 42)
    app = create_app(api_config(TEMPORAL_DOWN, url, entries), store=store)
    async for http in client_for(app):
        http.headers["Authorization"] = f"Bearer {tokens['viewer']}"
        yield http, tokens
    store.close()


async def test_with_temporal_down_audit_reads_answer_degraded(
    down: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    http, _ = down
    timeline = await http.get("/v1/jobs/c1/42/timeline")
    assert timeline.status_code == 200, timeline.text
    body = timeline.json()
    assert body["degraded"] and [e["summary"] for e in body["events"]] == ["step 0", "step 1"]
    audit = await http.get("/v1/audit", params={"job": 42})
    assert audit.status_code == 200 and len(audit.json()["events"]) == 2
    detail = await http.get("/v1/jobs/c1/42")
    assert detail.status_code == 200
    assert any("Temporal is unreachable" in w for w in detail.json()["warnings"])
    listed = await http.get("/v1/jobs")
    assert listed.status_code == 200, listed.text
    page = listed.json()
    assert page["degraded"] and [(j["job_id"], j["state"]) for j in page["items"]] == [
        (42, "unknown")  # no final event, and Temporal cannot say whether it still runs
    ]
    ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] and ready.json()["degraded"]
    # A job the store does not know is still an error, with no transport text in it.
    unknown = await http.get("/v1/jobs/c1/7/timeline")
    assert unknown.status_code == 503
    assert unknown.json()["error"]["code"] == "unavailable"
    assert "transport" not in unknown.text.lower()


async def test_one_error_shape_for_every_error(
    down: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    http, _ = down
    answers = {
        401: await http.get("/v1/audit", headers={"Authorization": "Bearer nope"}),
        403: await http.post("/v1/jobs/c1/42/mode", json={"mode": "observe"}),
        404: await http.get("/v1/nothing-here"),
        405: await http.delete("/v1/audit"),
        422: await http.get("/v1/audit", params={"limit": "many"}),
    }
    gate = await http.post("/v1/jobs/c1/42/mode", content=b"{}", headers={"Authorization": ""})
    for status, resp in [*answers.items(), (401, gate)]:
        assert resp.status_code == status, resp.text
        body = resp.json()
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"code", "message", "details"}
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    invalid = answers[422].json()["error"]
    assert invalid["code"] == "invalid_request"
    assert invalid["details"][0]["loc"] == ["query", "limit"]
    assert "limit" in invalid["message"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/audit", {"job": "4_2"}),  # int("4_2") == 42: would read job 42's trail
        ("/v1/audit", {"limit": "1_0"}),
        ("/v1/audit", {"attempt": " 1"}),
        ("/v1/jobs", {"limit": "+5"}),
        ("/v1/jobs/c1/42/events", {"after": "1_0"}),
    ],
)
async def test_integer_parameters_are_plain_digits(
    down: tuple[httpx.AsyncClient, dict[str, str]], path: str, params: dict[str, str]
) -> None:
    http, _ = down
    resp = await http.get(path, params=params)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["details"][0]["loc"] == ["query", *params]
    # The same value written plainly is accepted.
    plain = {k: v.replace("_", "").strip().lstrip("+") for k, v in params.items()}
    if path.endswith("/events"):
        return  # a stream: its plain form is covered by test_api_events_stream
    assert (await http.get(path, params=plain)).status_code == 200


async def test_docs_and_operation_ids(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    _, entries = make_tokens()
    app = create_app(api_config("unused:1", f"sqlite:///{tmp_path / 'a.db'}", entries),
                     client=temporal_env.client)  # fmt: skip
    async for http in client_for(app):
        docs = await http.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        spec = (await http.get("/openapi.json")).json()
        ids = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
        assert {"list_jobs", "job_timeline", "approve", "reject", "set_mode", "audit"} <= ids
        assert not [i for i in ids if "_v1_" in i or i.endswith(("_get", "_post"))]
        invalid = [
            op["responses"]["422"]["content"]["application/json"]["schema"]
            for path in spec["paths"].values()
            for op in path.values()
            if "422" in op["responses"]
        ]
        assert invalid and all(s == {"$ref": "#/components/schemas/ErrorBody"} for s in invalid)
        assert "HTTPValidationError" not in spec["components"]["schemas"]


async def test_cors_is_off_unless_configured(tmp_path: Path) -> None:
    _, entries = make_tokens()
    preflight = {"Origin": "https://console.example", "Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "authorization"}  # fmt: skip
    config = api_config(TEMPORAL_DOWN, f"sqlite:///{tmp_path / 'a.db'}", entries)
    async for http in client_for(create_app(config)):
        resp = await http.options("/v1/audit", headers=preflight)
        assert "access-control-allow-origin" not in resp.headers
    allowed = config.model_copy(update={"api": ApiSettings(
        tokens=entries, cors_origins=["https://console.example"])})  # fmt: skip
    async for http in client_for(create_app(allowed)):
        resp = await http.options("/v1/audit", headers=preflight)
        assert resp.headers["access-control-allow-origin"] == "https://console.example"
        other = await http.options("/v1/audit", headers={**preflight, "Origin": "https://evil"})
        assert "access-control-allow-origin" not in other.headers


def test_the_server_logs_at_the_chosen_level(tmp_path: Path) -> None:
    import logging

    from resurgo.api.server import build

    _, entries = make_tokens()
    config = api_config(TEMPORAL_DOWN, f"sqlite:///{tmp_path / 'a.db'}", entries)
    root = logging.getLogger()
    before = root.level
    try:
        for level in (logging.WARNING, logging.DEBUG):
            root.setLevel(level)
            built = build(config, host="127.0.0.1", insecure=False, tokens_file=None)
            assert built.log_level == logging.getLevelName(level).lower()
    finally:
        root.setLevel(before)
