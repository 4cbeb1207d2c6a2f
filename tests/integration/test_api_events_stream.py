"""`GET /v1/jobs/{cluster}/{job}/events` (server-sent events) and `resurgo audit --follow --api`
against a live API (uvicorn on loopback) over the real Temporal dev server, real workflows and a
real SQLite audit store: events arrive live and in order, a reconnect resumes without
duplicates, a viewer without the user's right reads withheld lines, `end` follows the end of
monitoring, refusals have the API's error shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from resurgo.api.app import create_app
from resurgo.audit.store import AuditStore
from resurgo.cli.audit import event_line
from resurgo.cli.main import app as cli
from resurgo.contracts import Directive, Mode
from tests.integration.test_api import api_config, make_tokens
from tests.integration.test_api_support import (
    JobStarter,
    ScriptedCluster,
    recovery_workers,
    serve_in_loop,
    terminate_running,
)

pytestmark = pytest.mark.timeout(120)

ECC_TEXT = "uncorrectable ECC error encountered"


@dataclass
class Live:
    url: str
    store: AuditStore
    tokens: dict[str, str]
    jobs: JobStarter
    scripted: ScriptedCluster

    def path(self, job: int | str) -> str:
        return f"{self.url}/v1/jobs/{self.jobs.cluster}/{job}/events"

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


@dataclass
class Received:
    events: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    end: dict[str, Any] | None = None
    comments: int = 0


@pytest.fixture(scope="module")
async def live(
    temporal_env: WorkflowEnvironment,
    temporal_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Live]:
    tmp = tmp_path_factory.mktemp("events")
    url = f"sqlite:///{tmp / 'audit.db'}"
    store = AuditStore(url)
    tokens, entries = make_tokens()
    app = create_app(api_config(temporal_address, url, entries), client=temporal_env.client,
                     store=store)  # fmt: skip
    async with (
        recovery_workers(temporal_env.client, store) as (jobs, scripted),
        serve_in_loop(app) as base,
    ):
        yield Live(base, store, tokens, jobs, scripted)
        await terminate_running(temporal_env.client, jobs.cluster)
    store.close()


async def read_stream(
    url: str, headers: dict[str, str], into: Received, params: dict[str, Any] | None = None
) -> None:
    """Read server-sent events into `into` until `end` (or the server closes)."""
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(10, read=60)) as http,
        http.stream("GET", url, headers=headers, params=params) as resp,
    ):
        assert resp.status_code == 200, await resp.aread()
        assert resp.headers["content-type"].startswith("text/event-stream")
        kind, data, ident = "message", "", None
        async for line in resp.aiter_lines():
            if line.startswith(":"):
                into.comments += 1
            elif line.startswith("event:"):
                kind = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data = line.partition(":")[2].strip()
            elif line.startswith("id:"):
                ident = line.partition(":")[2].strip()
            elif not line and data:
                if kind == "end":
                    into.end = json.loads(data)
                else:
                    assert kind == "audit" and ident is not None
                    into.events.append(json.loads(data))
                    into.ids.append(int(ident))
                kind, data, ident = "message", "", None


async def until(probe: Any, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not probe():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_events_arrive_live_in_order_then_end(live: Live) -> None:
    handle = await live.jobs.start(21, Directive(mode=Mode.OBSERVE))
    viewer, operator = Received(), Received()
    readers = [
        asyncio.create_task(read_stream(live.path(21), live.auth("viewer"), viewer)),
        asyncio.create_task(read_stream(live.path(21), live.auth("operator"), operator)),
    ]
    await until(lambda: len(operator.events) >= 2 and len(viewer.events) >= 2)
    assert [e["type"] for e in operator.events][:2] == ["monitoring_started", "attempt_started"]
    before = len(operator.events)
    assert not any(ECC_TEXT in json.dumps(e) for e in operator.events)

    # Recorded after both streams opened: they must deliver it without being asked again.
    live.scripted.push(21, "crash")
    await until(lambda: any(ECC_TEXT in json.dumps(e) for e in operator.events))
    assert len(operator.events) > before
    assert all(r.end is None for r in (viewer, operator))
    live.scripted.push(21, "complete")
    await asyncio.wait_for(asyncio.gather(*readers), timeout=60)
    await asyncio.wait_for(handle.result(), timeout=30)

    stored = [e.id for e in live.store.iter_all(workflow_id=handle.id)]
    for got in (viewer, operator):
        assert got.ids == stored  # every event, once, in id order, ...
        assert [e["id"] for e in got.events] == got.ids
        assert got.end is not None  # ... then `end`, once monitoring ended
        assert got.events[-1]["type"] in {"monitoring_ended", "completed"}
    # The viewer token has no `users`: the job's output lines are withheld, verdicts are not.
    shown = json.dumps(viewer.events)
    assert ECC_TEXT not in shown and "withheld" in shown
    assert [e["type"] for e in viewer.events] == [e["type"] for e in operator.events]
    # Same lines as the timeline route shows that viewer.
    async with httpx.AsyncClient(base_url=live.url, headers=live.auth("viewer")) as http:
        reply = await http.get(f"/v1/jobs/{live.jobs.cluster}/21/timeline", params={"limit": 1000})
    timeline = reply.json()
    assert [e["id"] for e in timeline["events"]] == viewer.ids
    assert json.dumps(timeline["events"], sort_keys=True) == json.dumps(viewer.events,
                                                                      sort_keys=True)  # fmt: skip


async def test_reconnect_resumes_after_last_event_id(live: Live) -> None:
    handle = await live.jobs.start(22, Directive(mode=Mode.OBSERVE))
    first = Received()
    reader = asyncio.create_task(read_stream(live.path(22), live.auth("operator"), first))
    await until(lambda: len(first.events) >= 2)
    reader.cancel()  # the client drops the connection mid-stream
    with pytest.raises(asyncio.CancelledError):
        await reader
    seen = list(first.ids)
    live.scripted.push(22, "complete")
    await asyncio.wait_for(handle.result(), timeout=30)

    resumed = Received()
    headers = live.auth("operator") | {"Last-Event-ID": str(seen[-1])}
    await asyncio.wait_for(read_stream(live.path(22), headers, resumed), timeout=30)
    stored = [e.id for e in live.store.iter_all(workflow_id=handle.id)]
    assert resumed.ids and not set(resumed.ids) & set(seen)
    assert seen + resumed.ids == stored and resumed.end is not None

    # `?after=` does the same for clients that cannot set headers.
    by_query = Received()
    await asyncio.wait_for(read_stream(live.path(22), live.auth("viewer"), by_query,
                                       {"after": seen[0]}), timeout=30)  # fmt: skip
    assert by_query.ids == stored[1:]
    # Reconnecting after the last event (dropped before `end`): `end` at once, nothing again.
    past = Received()
    headers = live.auth("viewer") | {"Last-Event-ID": str(stored[-1])}
    await asyncio.wait_for(read_stream(live.path(22), headers, past), timeout=10)
    assert past.ids == [] and past.end is not None


async def test_refusals_have_the_error_shape(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url, timeout=10) as http:
        path = f"/v1/jobs/{live.jobs.cluster}/23/events"
        anonymous = await http.get(path)
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] and anonymous.json()["error"]["message"]
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        bad_token = await http.get(path, headers={"Authorization": "Bearer nope"})
        assert bad_token.status_code == 401 and "error" in bad_token.json()

        auth = live.auth("viewer")
        unknown = await http.get(path, headers=auth)  # job 23 was never started
        assert unknown.status_code == 404 and "no job 23" in unknown.json()["error"]["message"]
        task = await http.get(f"/v1/jobs/{live.jobs.cluster}/500_1/events", headers=auth)
        assert task.status_code == 404 and "500_1" in task.json()["error"]["message"]
        for junk in ("5x", "500_", "1_2_3", "99999999999999999999"):
            bad = await http.get(f"/v1/jobs/{live.jobs.cluster}/{junk}/events", headers=auth)
            assert bad.status_code == 422, (junk, bad.text)
            assert "error" in bad.json()
        not_an_id = await http.get(path, headers=auth | {"Last-Event-ID": "1; DROP"})
        assert not_an_id.status_code == 422 and "error" in not_an_id.json()


async def test_cli_follow_api_prints_events_live_until_monitoring_ends(live: Live) -> None:
    handle = await live.jobs.start(24, Directive(mode=Mode.OBSERVE))
    env = {"RESURGO_API_URL": live.url, "RESURGO_CONFIG": "", "COLUMNS": "200",
           "RESURGO_API_TOKEN": live.tokens["operator"]}  # fmt: skip

    def follow(*extra: str) -> Any:
        args = ["audit", "24", "--api", "--follow", *extra]
        return CliRunner().invoke(cli, args, env=env)

    # No --cluster: the CLI finds it from the job's events, so wait for the first one.
    await until(lambda: bool(live.store.query(workflow_id=handle.id, limit=1)))
    # One CLI run at a time: CliRunner swaps the process's sys.stdout while it runs.
    tsv = asyncio.create_task(asyncio.to_thread(follow))
    await asyncio.sleep(2)
    assert not tsv.done()  # still following a live job
    live.scripted.push(24, "crash")
    await asyncio.sleep(1)
    live.scripted.push(24, "complete")
    text = await asyncio.wait_for(tsv, timeout=60)
    # After the end: everything at once, then the command ends by itself.
    dumped = await asyncio.wait_for(
        asyncio.to_thread(follow, "--json", "--cluster", live.jobs.cluster), timeout=30
    )

    stored = list(live.store.iter_all(workflow_id=handle.id))
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines() == [event_line(e) for e in stored]
    assert "\tanomaly\t" in text.stdout  # the crash pushed while it followed
    assert dumped.exit_code == 0, dumped.output
    assert ECC_TEXT in dumped.stdout  # the operator reads the job's output lines
    assert [json.loads(line)["id"] for line in dumped.stdout.splitlines()] == [e.id for e in stored]


async def test_cli_follow_api_refused_without_a_token(live: Live, tmp_path: Path) -> None:
    await live.jobs.start(25, Directive(mode=Mode.OBSERVE))
    env = {"RESURGO_API_URL": live.url, "RESURGO_CONFIG": "", "RESURGO_API_TOKEN": ""}
    args = ["audit", "25", "--api", "--follow", "--cluster", live.jobs.cluster]
    result = await asyncio.to_thread(CliRunner().invoke, cli, args, env=env)
    assert result.exit_code != 0 and "401" in result.stderr
