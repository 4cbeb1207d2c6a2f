"""Evidence visibility: a job's output lines reach only tokens allowed to read that user's jobs.

Real Temporal, the real workflow and audit activity, real audit stores (SQLite and MariaDB), the
real ASGI app. Each principal asks for the same job's detail, timeline and audit page; what the
job's user wrote (its output lines) is shown or withheld, everything Resurgo concluded is shown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from resurgo.api.app import create_app
from resurgo.audit.store import AuditStore
from resurgo.config import ApiToken
from resurgo.contracts import (
    Anomaly,
    AnomalyKind,
    AuditEvent,
    AuditEventType,
    Directive,
    LogLine,
    Mode,
)
from resurgo.tokens import hash_token, new_token
from tests.integration.test_api import api_config, eventually
from tests.integration.test_api_support import (
    ECC_LINE,
    recovery_workers,
    terminate_running,
)
from tests.mariadb import ensure_mariadb, fresh_database

pytestmark = pytest.mark.timeout(120)

# name -> (role, users)
PRINCIPALS: dict[str, tuple[str, list[str]]] = {
    "all-viewer": ("viewer", ["*"]),
    "alice-viewer": ("viewer", ["alice"]),
    "bob-viewer": ("viewer", ["bob"]),
    "plain-viewer": ("viewer", []),
    "operator": ("operator", []),
}
SECRET = "uncorrectable ECC error encountered <script>"


class Api:
    def __init__(self, http: httpx.AsyncClient, tokens: dict[str, str], cluster: str) -> None:
        self.http, self.tokens, self.cluster = http, tokens, cluster

    async def get(self, who: str, path: str, **params: Any) -> Any:
        resp = await self.http.get(
            path, params=params, headers={"Authorization": f"Bearer {self.tokens[who]}"}
        )
        assert resp.status_code == 200, resp.text
        return resp.json()

    async def views(self, who: str, job: int, cluster: str | None = None) -> list[str]:
        """The three reads of one job, as JSON text."""
        c = cluster or self.cluster
        detail = await self.get(who, f"/v1/jobs/{c}/{job}")
        timeline = await self.get(who, f"/v1/jobs/{c}/{job}/timeline")
        audit = await self.get(who, "/v1/audit", job=job, cluster=c)
        return [repr(detail), repr(timeline), repr(audit)]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mysql)])
async def api(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    temporal_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Api, AuditStore, Any]]:
    drop: Callable[[], None] | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('vis') / 'audit.db'}"
    else:
        url, drop = fresh_database(ensure_mariadb())
    store = AuditStore(url)
    store.create_schema()
    tokens = {name: new_token() for name in PRINCIPALS}
    entries = {
        name: ApiToken(role=role, sha256=hash_token(tokens[name]), users=users)  # type: ignore[arg-type]
        for name, (role, users) in PRINCIPALS.items()
    }
    app = create_app(
        api_config(temporal_address, url, entries), client=temporal_env.client, store=store
    )
    try:
        async with (
            recovery_workers(temporal_env.client, store) as (starter, scripted),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://resurgo"
            ) as http,
        ):
            yield Api(http, tokens, starter.cluster), store, (starter, scripted)
            await terminate_running(temporal_env.client, starter.cluster)
    finally:
        store.close()
        if drop:
            drop()


async def test_output_lines_only_for_tokens_allowed_to_read_the_users_jobs(
    api: tuple[Api, AuditStore, Any],
) -> None:
    client, store, (starter, scripted) = api
    job = 501
    await starter.start(job, Directive(mode=Mode.OBSERVE), user="alice")
    scripted.push(job, "crash")

    async def attributed() -> bool:
        return any(e.type == "attribution" for e in store.iter_all(job_id=job))

    await eventually(attributed)
    for who in ("all-viewer", "alice-viewer", "operator"):
        for view in await client.views(who, job):
            assert SECRET in view, who
    for who in ("bob-viewer", "plain-viewer"):
        detail = await client.get(who, f"/v1/jobs/{client.cluster}/{job}")
        # What Resurgo concluded is still there; the user's words are not.
        assert detail["attributions"][0]["category"] == "hardware_gpu"
        assert detail["attributions"][0]["culprit_nodes"] == ["node2"]
        assert detail["attributions"][0]["evidence"][0]["line_no"] == ECC_LINE.line_no
        assert "withheld" in detail["attributions"][0]["evidence"][0]["text"]
        for view in await client.views(who, job):
            assert SECRET not in view and "alice's job output" in view, who


async def test_a_finished_job_known_only_to_the_store_keeps_its_owner(
    api: tuple[Api, AuditStore, Any],
) -> None:
    """No workflow left in Temporal: the owner comes from the recorded monitoring_started; a
    job whose owner was never recorded is readable only with "*"."""
    client, store, _ = api
    line = LogLine(source="job.log", line_no=7, text="KeyError: " + SECRET)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    anomaly = Anomaly(kind=AnomalyKind.CRASH, attempt=0, detected_at=at, summary="crash",
                      signals=[line])  # fmt: skip
    for job, user in ((601, "bob"), (602, None)):
        wid = f"resurgo:{client.cluster}:{job}:1700000000"
        started: dict[str, Any] = {"directive": Directive().model_dump(mode="json")}
        if user:
            started["user"] = user
        base = {"cluster": client.cluster, "job_id": job, "workflow_id": wid, "producer": "t"}
        store.append(
            [
                AuditEvent(
                    event_id=f"{wid}:s",
                    type=AuditEventType.MONITORING_STARTED,
                    data=started,
                    at=at,
                    **base,
                ),
                AuditEvent(
                    event_id=f"{wid}:a",
                    type=AuditEventType.ANOMALY,
                    attempt=0,
                    data=anomaly.model_dump(mode="json"),
                    at=at,
                    **base,
                ),
            ]
        )
    assert all(SECRET in v for v in await client.views("bob-viewer", 601))
    assert all(SECRET not in v for v in await client.views("alice-viewer", 601))
    assert all(SECRET not in v for v in await client.views("bob-viewer", 602))
    assert all(SECRET in v for v in await client.views("all-viewer", 602))
