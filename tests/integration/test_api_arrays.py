"""Job arrays through the API on the real Temporal dev server and a real SQLite audit store:
an array task by its `<array>_<task>` name (live and from the store), the array-level view from
the coordinator's `status` query and folded from the audit trail, and the operator's mode switch.

The cluster side is the scripted array of test_array_coordination (three tasks failing with the
same application bug); workflows are started with the search attributes discovery gives them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio import activity
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from resurgo.api.app import create_app
from resurgo.array_models import ArrayInput
from resurgo.audit.store import AuditStore
from resurgo.cli.exits import ExitCode
from resurgo.cli.main import app as cli
from resurgo.contracts import (
    AuditEvent,
    Category,
    Directive,
    JobKey,
    Mode,
    RecoveryInput,
)
from resurgo.contracts import ClusterGates as Gates
from resurgo.workflows import search_attributes as sa
from resurgo.workflows.array_coordinator import ArrayCoordinatorWorkflow
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from tests.integration.test_api import api_config, eventually, make_tokens
from tests.integration.test_api_support import serve_in_loop
from tests.integration.test_array_coordination import (
    ARRAY,
    BUG,
    NOW,
    RETRY_BUGS,
    Failure,
    Harness,
    ScriptedArray,
)

pytestmark = pytest.mark.timeout(180)

HOSTILE = [
    "500_",
    "_1",
    "500_1_2",
    "500__1",
    "500-1",
    "500_1;rm",
    "5e3",
    "1" * 20,
    "500_" + "9" * 11,
]


@dataclass
class StoredArray(ScriptedArray):
    """The scripted array whose audit events also land in the real store the API reads."""

    store: AuditStore | None = None

    @activity.defn(name="record_audit")
    async def record_audit(self, events: list[AuditEvent]) -> int:
        self.audit.extend(events)
        assert self.store is not None
        return self.store.append(events)


@dataclass
class Setup:
    h: Harness
    http: httpx.AsyncClient
    tokens: dict[str, str]
    url: str
    entries: Any
    store: AuditStore
    app: Any

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    async def get(self, path: str, role: str = "viewer") -> httpx.Response:
        return await self.http.get(path, headers=self.auth(role))


def _attrs(cluster: str, ref: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([
        SearchAttributePair(sa.CLUSTER, cluster), SearchAttributePair(sa.SLURM_JOB_ID, ref),
        SearchAttributePair(sa.USER, "alice"), SearchAttributePair(sa.MODE, "observe"),
    ])  # fmt: skip


@pytest.fixture
async def setup(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Setup]:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore(url)
    store.create_schema()
    scripted = StoredArray({t: Failure(BUG, Category.APPLICATION, f"node{t % 2 + 1}")
                            for t in range(3)}, pending=2, store=store)  # fmt: skip
    h = Harness(temporal_env.client, scripted)
    h.name = "arr" + uuid.uuid4().hex[:8]
    h.queue = f"test-{h.name}"
    core, controller = h.workers()
    tokens, entries = make_tokens()
    app = create_app(api_config("127.0.0.1:1", url, entries), client=temporal_env.client,
                     store=store)  # fmt: skip
    async with (
        core,
        controller,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r") as http,
    ):
        inp = ArrayInput(array=h.array_key(), policy=RETRY_BUGS, mode=Mode.OBSERVE,
                         poll_seconds=1.0, gates=Gates(acknowledge_scheduler_actions=True),
                         user="alice")  # fmt: skip
        coordinator = await h.client.start_workflow(
            ArrayCoordinatorWorkflow.run, inp, id=inp.array.workflow_id(), task_queue=h.queue,
            search_attributes=_attrs(h.name, str(ARRAY)),
        )  # fmt: skip
        for task in range(3):
            key = JobKey(cluster=h.name, job_id=ARRAY + 1 + task, submit_time=NOW,
                         array_job_id=ARRAY, array_task_id=task)  # fmt: skip
            rec = RecoveryInput(job=key, directive=Directive(mode=Mode.OBSERVE), policy=RETRY_BUGS,
                                gates=Gates(acknowledge_scheduler_actions=True))  # fmt: skip
            handle = await h.client.start_workflow(
                JobRecoveryWorkflow.run, rec, id=key.workflow_id(), task_queue=h.queue,
                search_attributes=_attrs(h.name, key.slurm_ref()),
            )  # fmt: skip
            await handle.result()
        try:
            yield Setup(h, http, tokens, url, entries, store, app)
        finally:
            await coordinator.terminate("test over")
            store.close()


async def test_array_view_task_names_and_mode_switch(setup: Setup) -> None:
    c = setup.h.name
    # A live array task by its `<array>_<task>` name: Slurm's own id kept, the array named.
    resp = await setup.get(f"/v1/jobs/{c}/{ARRAY}_1")
    assert resp.status_code == 200, resp.text
    job = resp.json()
    assert (job["name"], job["job_id"], job["array_job_id"], job["array_task_id"]) == (
        f"{ARRAY}_1", ARRAY + 2, ARRAY, 1,
    )  # fmt: skip
    assert job["workflow_id"].startswith(f"resurgo:{c}:{ARRAY}_1:")
    timeline = (await setup.get(f"/v1/jobs/{c}/{ARRAY}_1/timeline")).json()
    assert timeline["events"] and {e["workflow_id"] for e in timeline["events"]} == {
        job["workflow_id"]
    }
    # Slurm's per-task id finds the same task; a task that never ran is a 404.
    by_id = (await setup.get(f"/v1/jobs/{c}/{ARRAY + 3}")).json()
    assert by_id["name"] == f"{ARRAY}_2"
    assert (await setup.get(f"/v1/jobs/{c}/{ARRAY}_7")).status_code == 404
    for bad in HOSTILE:
        resp = await setup.get(f"/v1/jobs/{c}/{bad}")
        assert resp.status_code == 422, (bad, resp.text)
        assert set(resp.json()) == {"error"} and resp.json()["error"]["message"]
    # The listing names array tasks.
    listed = (await setup.get(f"/v1/jobs?cluster={c}")).json()["items"]
    assert sorted(i["name"] for i in listed) == [f"{ARRAY}_{t}" for t in range(3)]

    async def polled() -> dict[str, Any] | None:
        view = (await setup.get(f"/v1/arrays/{c}/{ARRAY}")).json()
        return view if view.get("tasks_by_state", {}).get("PENDING") == 2 else None

    view = await eventually(polled)
    assert view["live"] and view["source"] == "temporal" and view["mode"] == "observe"
    assert view["failures_by_fingerprint"] == {BUG: [0, 1, 2]}
    assert [(f["finding"], f["fingerprint"], f["tasks"]) for f in view["findings"]] == [
        ("systematic", BUG, [0, 1, 2])
    ]
    assert [(t["name"], t["job_id"]) for t in view["tasks"]] == [
        (f"{ARRAY}_{t}", ARRAY + 1 + t) for t in range(3)
    ]
    assert not view["held"] and setup.h.cluster.array_steps == []

    # Switching the array to action: a viewer may not; an operator's switch carries out the
    # hold the coordinator advised in observe mode.
    path = f"/v1/arrays/{c}/{ARRAY}/mode"
    body = {"mode": "action", "reason": "bug confirmed"}
    refused = await setup.http.post(path, json=body, headers=setup.auth("viewer"))
    assert refused.status_code == 403 and setup.h.cluster.array_steps == []
    resp = await setup.http.post(path, json=body, headers=setup.auth("operator"))
    assert resp.status_code == 200, resp.text
    assert resp.json()["array"]["mode"] == "action" and resp.json()["change"]["actor"] == "otto"

    async def held() -> dict[str, Any] | None:
        view = (await setup.get(f"/v1/arrays/{c}/{ARRAY}")).json()
        return view if view["held"] else None

    assert (await eventually(held))["mode"] == "action"
    assert [s.step.value for s in setup.h.cluster.array_steps] == ["hold_pending"]
    gone = await setup.http.post(f"/v1/arrays/{c}/{ARRAY + 99}/mode", json=body,
                                 headers=setup.auth("operator"))  # fmt: skip
    assert gone.status_code == 409 and "not coordinated" in gone.json()["error"]["message"]
    assert (await setup.get(f"/v1/arrays/{c}/{ARRAY + 99}")).status_code == 404
    for bad in ["1_2", "1" * 20, "-1", "1e3"]:
        assert (await setup.get(f"/v1/arrays/{c}/{bad}")).status_code == 422, bad

    # Temporal unreachable: the same array folded from the audit store alone.
    down = create_app(api_config("127.0.0.1:1", setup.url, setup.entries), store=setup.store)
    transport = httpx.ASGITransport(app=down)
    async with httpx.AsyncClient(transport=transport, base_url="http://r") as http:
        resp = await http.get(f"/v1/arrays/{c}/{ARRAY}", headers=setup.auth("viewer"),
                              timeout=timedelta(seconds=30).total_seconds())  # fmt: skip
        assert resp.status_code == 200, resp.text
        folded = resp.json()
        assert folded["degraded"] and folded["source"] == "audit" and not folded["live"]
        assert folded["mode"] == "action" and folded["held"]
        assert folded["failures_by_fingerprint"] == {BUG: [0, 1, 2]}
        assert [f["fingerprint"] for f in folded["findings"]] == [BUG]
        task = (await http.get(f"/v1/jobs/{c}/{ARRAY}_1", headers=setup.auth("viewer"))).json()
        assert (task["name"], task["job_id"], task["source"]) == (f"{ARRAY}_1", ARRAY + 2, "audit")


async def test_cli_array_commands_and_array_task_jobs(setup: Setup) -> None:
    c = setup.h.name
    async with serve_in_loop(setup.app) as url:

        async def run(*args: str, role: str = "viewer") -> Result:
            env = {"RESURGO_API_URL": url, "RESURGO_CONFIG": "", "COLUMNS": "200",
                   "RESURGO_API_TOKEN": setup.tokens[role]}  # fmt: skip
            return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)

        async def findings() -> Result | None:
            result = await run("array", c, str(ARRAY))
            return result if "systematic" in result.stdout else None

        # Piped: every table is tab-separated values.
        shown = (await eventually(findings)).stdout
        assert f"{c}/{ARRAY}_*\tlive\tobserve" in shown
        assert f"{BUG}\t0,1,2" in shown
        assert f"{ARRAY}_1\t{ARRAY + 2}\t" in shown
        as_json = await run("array", c, str(ARRAY), "--json")
        assert json.loads(as_json.stdout)["failures_by_fingerprint"] == {BUG: [0, 1, 2]}
        job = await run("job", c, f"{ARRAY}_2", "--json")
        assert job.exit_code == 0, job.output
        assert json.loads(job.stdout)["job_id"] == ARRAY + 3
        assert f"{c}/{ARRAY}_2" in (await run("job", c, f"{ARRAY}_2")).stdout
        listed = await run("jobs", "--cluster", c)
        assert all(f"{c}\t{ARRAY}_{t}\t" in listed.stdout for t in range(3)), listed.stdout
        # Refusals: bad names never reach the API, unknown ones are NOT_FOUND, viewers DENIED.
        assert (await run("job", c, "500_1/../x")).exit_code == ExitCode.USAGE
        assert (await run("array", c, "500_1")).exit_code == ExitCode.USAGE
        assert (await run("array", c, str(ARRAY + 99))).exit_code == ExitCode.NOT_FOUND
        denied = await run("array-mode", c, str(ARRAY), "action")
        assert denied.exit_code == ExitCode.DENIED and setup.h.cluster.array_steps == []
        switched = await run("array-mode", c, str(ARRAY), "action", "--reason", "bug",
                             role="operator")  # fmt: skip
        assert switched.exit_code == 0, switched.output
        assert f"array {c}/{ARRAY}_* is now in action mode (by otto)" in switched.stdout
