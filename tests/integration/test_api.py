"""The HTTP API against the real Temporal dev server and real audit stores (SQLite and MariaDB).

Job workflows are the real JobRecoveryWorkflow with the real audit activity; only the cluster
side is scripted (tests/integration/test_api_support.py). Requests go through the real ASGI app
in-process (httpx's ASGI transport), so the app shares the test's event loop and Temporal client.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from resurgo.api.app import create_app
from resurgo.api.core import Cursors
from resurgo.audit.store import AuditStore
from resurgo.config import ApiSettings, ApiToken, AuditSettings, ResurgoConfig, TemporalSettings
from resurgo.contracts import AuditEvent, Directive, Mode
from resurgo.tokens import hash_token, new_token
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from tests.integration.test_api_support import (
    JobStarter,
    ScriptedCluster,
    recovery_workers,
    terminate_running,
)
from tests.mariadb import ensure_mariadb, fresh_database

pytestmark = pytest.mark.timeout(120)

APPROVAL = Directive(mode=Mode.ACTION, approval="required", approval_timeout=600)
PRINCIPALS = {"viewer": "vera", "operator": "otto", "admin": "ada"}
T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float = 20) -> T:
    """Poll until `probe` returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s")
        await asyncio.sleep(0.1)


def make_tokens() -> tuple[dict[str, str], dict[str, ApiToken]]:
    tokens = {role: new_token() for role in PRINCIPALS}
    entries = {
        PRINCIPALS[role]: ApiToken(role=role, sha256=hash_token(tok))  # type: ignore[arg-type]
        for role, tok in tokens.items()
    }
    return tokens, entries


def api_config(
    temporal_address: str, audit_url: str, entries: dict[str, ApiToken]
) -> ResurgoConfig:
    return ResurgoConfig(
        temporal=TemporalSettings(address=temporal_address),
        audit=AuditSettings(url=audit_url),
        api=ApiSettings(tokens=entries),
    )


@dataclass
class Stack:
    cluster: str
    store: AuditStore
    client: Client
    app: FastAPI
    http: httpx.AsyncClient
    jobs: JobStarter
    scripted: ScriptedCluster
    tokens: dict[str, str]
    _next_job: list[int] = field(default_factory=lambda: [100])

    def job_id(self) -> int:
        self._next_job[0] += 1
        return self._next_job[0]

    def auth(self, role: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}

    async def get(self, path: str, role: str | None = "viewer", **params: Any) -> httpx.Response:
        clean = {k: v for k, v in params.items() if v is not None}
        return await self.http.get(path, params=clean, headers=self.auth(role))

    async def ok(self, path: str, role: str = "viewer", **params: Any) -> Any:
        resp = await self.get(path, role, **params)
        assert resp.status_code == 200, resp.text
        return resp.json()

    async def post(
        self, path: str, body: dict[str, Any] | None = None, role: str | None = "operator"
    ) -> httpx.Response:
        return await self.http.post(path, json=body, headers=self.auth(role))

    def events(self, job_id: int) -> list[Any]:
        return list(self.store.iter_all(cluster=self.cluster, job_id=job_id))

    async def pending(self, job_id: int) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            page = await self.ok("/v1/advice", pending="true", cluster=self.cluster)
            return next((i for i in page["items"] if i["job"]["job_id"] == job_id), None)

        return await eventually(probe)

    async def crash_awaiting_approval(self, job_id: int) -> dict[str, Any]:
        await self.jobs.start(job_id, APPROVAL)
        self.scripted.push(job_id, "crash")
        return await self.pending(job_id)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mysql)])
async def stack(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    temporal_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Stack]:
    drop: Callable[[], None] | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'audit.db'}"
    else:
        url, drop = fresh_database(ensure_mariadb())
    store = AuditStore(url)
    store.create_schema()
    tokens, entries = make_tokens()
    app = create_app(
        api_config(temporal_address, url, entries), client=temporal_env.client, store=store
    )
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            recovery_workers(temporal_env.client, store) as (starter, scripted),
            httpx.AsyncClient(transport=transport, base_url="http://resurgo") as http,
        ):
            yield Stack(starter.cluster, store, temporal_env.client, app, http, starter,
                        scripted, tokens)  # fmt: skip
            await terminate_running(temporal_env.client, starter.cluster)
    finally:
        store.close()
        if drop:
            drop()


def detail_keys(detail: dict[str, Any]) -> set[str]:
    return set(detail)


# ------------------------------------------------------------------------------------ scenarios


async def test_approval_through_the_api_is_carried_out(stack: Stack) -> None:
    job = stack.job_id()
    handle = await stack.jobs.start(job, APPROVAL)
    stack.scripted.push(job, "crash")
    item = await stack.pending(job)
    assert item["pending"] and item["advice"]["generation"] == 1
    assert item["advice"]["kind"] == "requeue_excluding" and item["advice"]["nodes"] == ["node2"]
    assert item["state"] == "awaiting_approval" and item["mode"] == "action"
    requested = datetime.fromisoformat(item["requested_at"])
    assert datetime.fromisoformat(item["expires_at"]) == requested + timedelta(seconds=600)

    live = await stack.ok(f"/v1/jobs/{stack.cluster}/{job}")
    assert live["live"] and live["source"] == "temporal" and live["phase"] == "awaiting_approval"
    assert live["needs_approval"] and live["pending_approval"]["generation"] == 1
    assert [a["state"] for a in live["advice"]] == ["pending_approval"]
    assert live["anomalies"][0]["kind"] == "crash"
    assert live["attributions"][0]["category"] == "hardware_gpu"
    assert live["attempts"][0]["nodes"] == ["node1", "node2"]
    assert live["user"] == "alice" and live["partition"] == "gpu" and not live["warnings"]
    listed = await eventually(lambda: _listed(stack, job, state="awaiting_approval"))
    assert listed["needs_approval"] and listed["live"]
    assert stack.scripted.steps[job] == []

    stack.scripted.push(job, "complete")  # what the next attempt will do once requeued
    resp = await stack.post(f"/v1/jobs/{stack.cluster}/{job}/advice/1/approve",
                            {"reason": "node2 is known bad"})  # fmt: skip
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["ack"]["accepted"] and body["decision"]["actor"] == PRINCIPALS["operator"]
    assert (await handle.result()).outcome == "completed"
    assert stack.scripted.steps[job] == ["requeue_hold", "exclude_nodes", "release"]
    approved = next(e for e in stack.events(job) if e.type == "approval_approved")
    assert approved.data["actor"] == "otto" and approved.data["reason"] == "node2 is known bad"

    done = await stack.ok(f"/v1/jobs/{stack.cluster}/{job}")
    assert detail_keys(done) == detail_keys(live)  # one shape, live or finished
    assert not done["live"] and done["outcome"] == "completed" and done["pending_approval"] is None
    assert done["advice"][0]["state"] == "acted"
    assert done["advice"][0]["decision"]["actor"] == "otto"
    assert done["advice"][0]["reconciliation"]["status"] == "converged"
    assert [a["attempt"] for a in done["attempts"]] == [0, 1]
    assert done["attempts"][1]["resumed_from"] == 10

    timeline = await stack.ok(f"/v1/jobs/{stack.cluster}/{job}/timeline")
    types = [e["type"] for e in timeline["events"]]
    for earlier, later in [
        ("advice", "approval_requested"),
        ("approval_requested", "approval_approved"),
        ("approval_approved", "action"),
        ("action", "reconciliation"),
        ("reconciliation", "completed"),
    ]:
        assert types.index(earlier) < types.index(later), types  # fmt: skip
    assert timeline["job"]["workflow_id"] == handle.id


async def _listed(stack: Stack, job: int, **filters: Any) -> dict[str, Any] | None:
    page = await stack.ok("/v1/jobs", cluster=stack.cluster, limit=200, **filters)
    return next((i for i in page["items"] if i["job_id"] == job), None)


async def test_reject_does_nothing_and_stale_or_repeated_decisions_are_refused(
    stack: Stack,
) -> None:
    job = stack.job_id()
    handle = await stack.jobs.start(job, APPROVAL)
    stack.scripted.push(job, "crash")
    await stack.pending(job)
    base = f"/v1/jobs/{stack.cluster}/{job}/advice"
    assert (await stack.post(f"{base}/1/reject")).status_code == 422  # a reason is required
    assert (await stack.post(f"{base}/1/reject", {"reason": ""})).status_code == 422
    resp = await stack.post(f"{base}/1/reject", {"reason": "maintenance window"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["ack"]["message"] == "rejected"

    again = await stack.post(f"{base}/1/approve")
    assert again.status_code == 409 and "no advice is waiting" in again.json()["error"]["message"]
    unknown = await stack.post(f"{base}/7/approve")
    assert unknown.status_code == 404 and "no advice g7" in unknown.json()["error"]["message"]

    # The same failure again in the same attempt: the operator said no, so it is not put to
    # them a second time (no new pending approval), and nothing is done.
    stack.scripted.push(job, "crash")

    async def declined() -> bool:
        return any(
            e.type == "would_act" and e.data.get("blocked_by") == "declined"
            for e in stack.events(job)
        )

    await eventually(declined)
    assert (await stack.ok(f"/v1/jobs/{stack.cluster}/{job}"))["pending_approval"] is None
    await asyncio.sleep(0.5)
    assert stack.scripted.steps[job] == []  # nothing was ever done to the job

    stack.scripted.push(job, "gone")
    assert (await handle.result()).outcome == "not_approved"
    ended = await stack.post(f"{base}/1/approve")
    assert ended.status_code == 409 and "has ended" in ended.json()["error"]["message"]
    rejected = [e for e in stack.events(job) if e.type == "approval_rejected"]
    assert [(e.data["generation"], e.data["actor"]) for e in rejected] == [(1, "otto")]
    detail = await stack.ok(f"/v1/jobs/{stack.cluster}/{job}")
    assert detail["advice"][0]["state"] == "rejected"
    assert detail["outcome"] == "not_approved"


async def test_mode_switch(stack: Stack) -> None:
    job = stack.job_id()
    handle = await stack.jobs.start(job, Directive(mode=Mode.OBSERVE))
    await eventually(lambda: _listed(stack, job, mode="observe"))
    path = f"/v1/jobs/{stack.cluster}/{job}/mode"
    assert (await stack.post(path, {"mode": "action"}, role="viewer")).status_code == 403
    assert (await stack.post(path, {"mode": "sideways"})).status_code == 422
    resp = await stack.post(path, {"mode": "action", "reason": "trusted now"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"]["mode"] == "action"
    assert resp.json()["change"]["actor"] == "otto"
    assert (await eventually(lambda: _listed(stack, job, mode="action")))["mode"] == "action"
    changed = next(e for e in stack.events(job) if e.type == "mode_changed")
    assert changed.data["actor"] == "otto" and changed.data["mode"] == "action"
    assert (await stack.ok(f"/v1/jobs/{stack.cluster}/{job}"))["mode"] == "action"
    stack.scripted.push(job, "complete")
    await handle.result()
    ended = await stack.post(path, {"mode": "observe"})
    assert ended.status_code == 409


async def test_refused_requests_change_nothing(stack: Stack) -> None:
    job = stack.job_id()
    await stack.crash_awaiting_approval(job)
    wrong = {"Authorization": f"Bearer {new_token()}"}
    base = f"/v1/jobs/{stack.cluster}/{job}"
    mutations = [
        (f"{base}/advice/1/approve", {"reason": "x"}),
        (f"{base}/advice/1/reject", {"reason": "x"}),
        (f"{base}/mode", {"mode": "observe"}),
    ]
    for path, body in mutations:
        none = await stack.http.post(path, json=body)
        assert none.status_code == 401 and none.headers["www-authenticate"].startswith("Bearer")
        assert (await stack.http.post(path, json=body, headers=wrong)).status_code == 401
        viewer = await stack.post(path, body, role="viewer")
        assert viewer.status_code == 403 and "viewer" in viewer.json()["error"]["message"]
    for path in ["/v1/jobs", base, f"{base}/timeline", "/v1/advice", "/v1/audit"]:
        assert (await stack.http.get(path)).status_code == 401
        assert (await stack.http.get(path, headers=wrong)).status_code == 401
    handle = stack.client.get_workflow_handle_for(JobRecoveryWorkflow.run, (await stack.ok(base))
                                                  ["workflow_id"])  # fmt: skip
    status = await handle.query(JobRecoveryWorkflow.status)
    assert status.pending_approval is not None and status.mode == Mode.ACTION
    assert not [e for e in stack.events(job) if (e.type.startswith("approval_") and
                e.type != "approval_requested") or e.type == "mode_changed"]  # fmt: skip
    assert stack.scripted.steps[job] == []
    # An admin may do what an operator may.
    resp = await stack.post(f"{base}/advice/1/reject", {"reason": "admin says no"}, role="admin")
    assert resp.status_code == 200 and resp.json()["decision"]["actor"] == "ada"
    stack.scripted.push(job, "gone")
    await handle.result()


def synthetic(cluster: str, job_id: int, n: int, start: datetime, **kw: Any) -> list[AuditEvent]:
    """A finished job's events as the workflow writes them: started, progress..., completed."""
    wid = f"resurgo:{cluster}:{job_id}:{int(start.timestamp())}"
    events = []
    for i in range(n):
        kind = "monitoring_started" if i == 0 else "completed" if i == n - 1 else "progress"
        if i == 1:
            kind = "attempt_started"
        events.append(AuditEvent(
            event_id=f"{wid}:e{i}", cluster=cluster, job_id=job_id, workflow_id=wid,
            attempt=None if i == 0 else 0, type=kind,
            producer="workflow" if i % 3 else "controller", at=start + timedelta(seconds=i),
            summary=f"event {i}",
            data={"directive": {"mode": "observe"}} if i == 0 else {"nodes": ["n1"], **kw},
        ))  # fmt: skip
    return events


async def test_audit_query_with_cursor_pagination(stack: Stack) -> None:
    cluster = "audit" + uuid.uuid4().hex[:6]
    t0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    stack.store.append(synthetic(cluster, 7, 23, t0) + synthetic(cluster, 8, 5, t0))
    everything = stack.store.query(cluster=cluster, job_id=7, limit=1000)
    for order in ("asc", "desc"):
        seen: list[int] = []
        cursor = None
        while True:
            page = await stack.ok("/v1/audit", cluster=cluster, job=7, limit=5, cursor=cursor,
                                  order=order)  # fmt: skip
            assert len(page["events"]) <= 5
            seen += [e["id"] for e in page["events"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        expected = [e.id for e in everything]
        assert seen == (expected if order == "asc" else expected[::-1])
    page = await stack.ok("/v1/audit", cluster=cluster, job=7, type="progress", attempt=0,
                          producer="workflow", since=(t0 + timedelta(seconds=4)).isoformat(),
                          until=(t0 + timedelta(seconds=10)).isoformat())  # fmt: skip
    got = [(e["type"], e["producer"], e["summary"]) for e in page["events"]]
    assert got == [("progress", "workflow", f"event {i}") for i in (4, 5, 7, 8)]
    both = await stack.ok("/v1/audit", cluster=cluster, type=["monitoring_started", "completed"])
    assert sorted(e["job_id"] for e in both["events"]) == [7, 7, 8, 8]
    assert (await stack.get("/v1/audit", cursor="bm9wZQ")).status_code == 400
    assert (await stack.get("/v1/audit", limit=0)).status_code == 422


async def test_job_listing_spans_live_and_finished_jobs(stack: Stack) -> None:
    """Live jobs from visibility, finished-and-forgotten ones from the audit store, with a cursor
    that crosses from one to the other without losing or repeating a job."""
    t0 = datetime(2025, 6, 1, tzinfo=UTC)
    cluster = stack.cluster
    finished = {900 + i: synthetic(cluster, 900 + i, 4, t0 + timedelta(hours=i)) for i in range(5)}
    stack.store.append([e for events in finished.values() for e in events])
    live = [stack.job_id() for _ in range(3)]
    for job in live:
        await stack.jobs.start(job, Directive(mode=Mode.OBSERVE))

    async def all_pages(**filters: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await stack.ok("/v1/jobs", cluster=cluster, limit=2, cursor=cursor, **filters)
            assert len(page["items"]) <= 2
            items += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return items

    async def probe() -> list[dict[str, Any]] | None:
        items = await all_pages()
        running = {i["job_id"] for i in items if i["live"]}
        return items if set(live) <= running else None

    items = await eventually(probe)
    ids = [(i["job_id"], i["workflow_id"]) for i in items]
    assert len(ids) == len(set(ids)), ids  # nobody twice
    first_finished = next(n for n, i in enumerate(items) if not i["live"])
    assert all(not i["live"] for i in items[first_finished:])  # live first
    audit_only = [i for i in items if i["job_id"] in finished]
    assert [i["job_id"] for i in audit_only] == sorted(finished, reverse=True)  # newest first
    assert {i["source"] for i in audit_only} == {"audit"}
    assert {i["state"] for i in audit_only} == {"completed"}
    assert {i["mode"] for i in audit_only} == {"observe"}

    window = await all_pages(since=(t0 + timedelta(hours=2)).isoformat(),
                             until=(t0 + timedelta(hours=4)).isoformat())  # fmt: skip
    assert {i["job_id"] for i in window if not i["live"]} == {902, 903}
    completed = await all_pages(state="completed")
    assert {902, 904} <= {i["job_id"] for i in completed}
    assert not [i for i in completed if i["live"]]

    old = await stack.ok(f"/v1/jobs/{cluster}/903")
    fresh = await stack.ok(f"/v1/jobs/{cluster}/{live[0]}")
    assert detail_keys(old) == detail_keys(fresh)
    assert not old["live"] and old["source"] == "audit" and old["outcome"] == "completed"
    assert old["attempts"][0]["nodes"] == ["n1"]
    assert fresh["live"] and fresh["mode"] == "observe"
    cursors = stack.app.state.gateway.cursors
    forged = Cursors(b"not the key").encode({"p": "live", "t": "anVuaw=="})
    bad = [cursors.encode({"p": "done", "k": [1, 2, 3, 4]}), cursors.encode({"p": 1}), forged,
           "bm9wZQ", cursors.encode({"p": "done"})[:-2]]  # fmt: skip
    for cursor in bad:
        resp = await stack.get("/v1/jobs", cursor=cursor)
        assert resp.status_code == 400, resp.text
        assert "invalid cursor" in resp.json()["error"]["message"]
    missing = await stack.get(f"/v1/jobs/{cluster}/424242")
    assert missing.status_code == 404 and "424242" in missing.json()["error"]["message"]
    for job in live:
        stack.scripted.push(job, "gone")


# ------------------------------------------------------------------------ single-backend checks


@pytest.fixture(scope="module")
def tokens_and_entries() -> tuple[dict[str, str], dict[str, ApiToken]]:
    return make_tokens()


async def test_readyz_reports_unreachable_dependencies(
    temporal_env: WorkflowEnvironment, temporal_address: str, tmp_path: Path
) -> None:
    _, entries = make_tokens()
    good = f"sqlite:///{tmp_path / 'a.db'}"
    cases = [
        (temporal_address, good, 200, {"temporal": True, "audit": True}),
        (temporal_address, "mysql+pymysql://resurgo@127.0.0.1:9/nope", 503,
         {"temporal": True, "audit": False}),
        # Temporal alone down: still ready (reads come from the store), but degraded.
        ("127.0.0.1:9", good, 200, {"temporal": False, "audit": True}),
    ]  # fmt: skip
    for address, url, status, checks in cases:
        client = temporal_env.client if address == temporal_address else None
        app = create_app(api_config(address, url, entries), client=client)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://resurgo"
        ) as http:
            started = asyncio.get_running_loop().time()
            resp = await http.get("/readyz")
            assert asyncio.get_running_loop().time() - started < 10
            assert resp.status_code == status, resp.text
            assert {k: v["ok"] for k, v in resp.json()["checks"].items()} == checks
            assert resp.json()["degraded"] is not checks["temporal"]
            assert (await http.get("/healthz")).json() == {"status": "ok"}


async def test_unreachable_store_is_a_clear_503(temporal_env: WorkflowEnvironment) -> None:
    tokens, entries = make_tokens()
    app = create_app(
        api_config("unused:1", "mysql+pymysql://resurgo@127.0.0.1:9/nope", entries),
        client=temporal_env.client,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://resurgo"
    ) as http:
        resp = await http.get("/v1/audit", headers={"Authorization": f"Bearer {tokens['viewer']}"})
        assert resp.status_code == 503 and "unavailable" in resp.json()["error"]["message"]
        assert "resurgo@127.0.0.1:9" in resp.json()["error"]["message"]


async def test_openapi_and_metrics(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    tokens, entries = make_tokens()
    app = create_app(api_config("unused:1", f"sqlite:///{tmp_path / 'a.db'}", entries),
                     client=temporal_env.client)  # fmt: skip
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://resurgo"
    ) as http:
        spec = (await http.get("/openapi.json")).json()
        assert spec["openapi"].startswith("3.1")
        assert {
            "/v1/jobs", "/v1/jobs/{cluster}/{job_id}", "/v1/jobs/{cluster}/{job_id}/timeline",
            "/v1/advice", "/v1/jobs/{cluster}/{job_id}/advice/{generation}/approve",
            "/v1/jobs/{cluster}/{job_id}/advice/{generation}/reject",
            "/v1/jobs/{cluster}/{job_id}/mode", "/v1/audit", "/healthz", "/readyz",
        } <= set(spec["paths"])  # fmt: skip
        assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
        await http.get("/v1/audit", headers={"Authorization": f"Bearer {tokens['viewer']}"})
        await http.get("/v1/audit")
        metrics = (await http.get("/metrics")).text
        assert 'resurgo_api_requests_total{method="GET",route="/v1/audit",status="200"} 1.0' in (
            metrics
        )
        assert 'resurgo_api_auth_refusals_total{status="401"} 1.0' in metrics
