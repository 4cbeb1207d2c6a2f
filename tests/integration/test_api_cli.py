"""The operator commands (`resurgo jobs|job|advice|approve|reject|mode|audit --api|api-token`)
against a live API (uvicorn on loopback) over the real Temporal dev server and a real SQLite
audit store. `--json` output is parsed and checked; tables are checked for the essentials."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from resurgo.api.app import create_app
from resurgo.api.server import free_port
from resurgo.audit.store import AuditStore
from resurgo.cli.exits import ExitCode
from resurgo.cli.main import app as cli
from resurgo.contracts import Directive, Mode
from resurgo.tokens import hash_token
from tests.integration.test_api import APPROVAL, api_config, eventually, make_tokens
from tests.integration.test_api_support import (
    JobStarter,
    ScriptedCluster,
    recovery_workers,
    serve_in_loop,
    terminate_running,
)

pytestmark = pytest.mark.timeout(120)


@dataclass
class Live:
    url: str
    audit_url: str
    tokens: dict[str, str]
    jobs: JobStarter
    scripted: ScriptedCluster
    tmp: Path

    @property
    def cluster(self) -> str:
        return self.jobs.cluster

    async def run(self, *args: str, role: str | None = "operator", **env: str) -> Result:
        base = {"RESURGO_API_URL": self.url, "RESURGO_CONFIG": "", "COLUMNS": "200"}
        if role:
            base["RESURGO_API_TOKEN"] = self.tokens[role]
        runner = CliRunner()
        return await asyncio.to_thread(runner.invoke, cli, list(args), env={**base, **env})

    async def json(self, *args: str, role: str = "operator") -> Any:
        result = await self.run(*args, "--json", role=role)
        assert result.exit_code == 0, result.output + result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
async def live(
    temporal_env: WorkflowEnvironment,
    temporal_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Live]:
    tmp = tmp_path_factory.mktemp("cli")
    url = f"sqlite:///{tmp / 'audit.db'}"
    store = AuditStore(url)
    tokens, entries = make_tokens()
    app = create_app(api_config(temporal_address, url, entries), client=temporal_env.client,
                     store=store)  # fmt: skip
    async with (
        recovery_workers(temporal_env.client, store) as (jobs, scripted),
        serve_in_loop(app) as base,
    ):
        yield Live(base, url, tokens, jobs, scripted, tmp)
        await terminate_running(temporal_env.client, jobs.cluster)
    store.close()


async def pending_in_cli(live: Live, job: int) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        page = await live.json("advice", "--pending", "--cluster", live.cluster, role="viewer")
        return next((i for i in page["items"] if i["job"]["job_id"] == job), None)

    return await eventually(probe)


async def test_read_commands(live: Live) -> None:
    await live.jobs.start(1, APPROVAL)
    live.scripted.push(1, "crash")
    item = await pending_in_cli(live, 1)
    assert item["pending"] and item["advice"]["generation"] == 1

    listed = await live.json("jobs", "--cluster", live.cluster, role="viewer")
    mine = next(j for j in listed["items"] if j["job_id"] == 1)
    assert mine["state"] == "awaiting_approval" and mine["needs_approval"]
    recent = await live.json("jobs", "--cluster", live.cluster, "--since", "1h30m", role="viewer")
    assert any(j["job_id"] == 1 for j in recent["items"])
    table = await live.run("jobs", "--cluster", live.cluster, role="viewer")
    assert table.exit_code == 0 and "awaiting_approval" in table.stdout
    assert "PENDING" in table.stdout

    detail = await live.json("job", live.cluster, "1", role="viewer")
    assert detail["pending_approval"]["kind"] == "requeue_excluding" and detail["live"]
    shown = await live.run("job", live.cluster, "1", role="viewer")
    assert shown.exit_code == 0, shown.output
    assert "AWAITING APPROVAL" in shown.stdout and "hardware_gpu node2" in shown.stdout

    advice_table = await live.run("advice", "--pending", role="viewer")
    assert advice_table.exit_code == 0 and "requeue_excluding node2" in advice_table.stdout

    events = await live.json("audit", "1", "--cluster", live.cluster, "--api", role="viewer")
    assert [e["type"] for e in events][:2] == ["monitoring_started", "attempt_started"]
    direct = await live.run("audit", "1", "--cluster", live.cluster, "--url", live.audit_url,
                            "--json", role=None)  # fmt: skip
    assert direct.exit_code == 0, direct.output
    assert [e["id"] for e in json.loads(direct.stdout)] == [e["id"] for e in events]


async def test_approve_reject_and_mode(live: Live) -> None:
    await live.jobs.start(2, APPROVAL)
    live.scripted.push(2, "crash")
    await pending_in_cli(live, 2)
    await live.jobs.start(3, APPROVAL)
    live.scripted.push(3, "crash")
    await pending_in_cli(live, 3)

    viewer = await live.run("approve", live.cluster, "2", "1", role="viewer")
    assert viewer.exit_code == ExitCode.DENIED and "not allowed (403)" in viewer.stderr
    missing_reason = await live.run("reject", live.cluster, "3", "1")
    assert missing_reason.exit_code == ExitCode.USAGE
    unknown = await live.run("approve", live.cluster, "2", "5")
    assert unknown.exit_code == ExitCode.NOT_FOUND and "not found (404)" in unknown.stderr

    live.scripted.push(2, "complete")
    approved = await live.json("approve", live.cluster, "2", "1", "--reason", "go")
    assert approved["ack"]["accepted"] and approved["decision"]["actor"] == "otto"
    rejected = await live.json("reject", live.cluster, "3", "1", "--reason", "not now")
    assert rejected["ack"]["message"] == "rejected" and rejected["decision"]["reason"] == "not now"
    again = await live.run("reject", live.cluster, "3", "1", "--reason", "twice")
    assert again.exit_code == ExitCode.FAILURE and "refused (409)" in again.stderr
    assert "no advice is waiting" in again.stderr
    await eventually(lambda: _finished(live, 2))
    assert live.scripted.steps[2] == ["requeue_hold", "exclude_nodes", "release"]
    assert live.scripted.steps[3] == []

    await live.jobs.start(4, Directive(mode=Mode.OBSERVE))
    await eventually(lambda: _listed(live, 4))
    bad = await live.run("mode", live.cluster, "4", "sideways")
    assert bad.exit_code == ExitCode.USAGE
    switched = await live.json("mode", live.cluster, "4", "action", "--reason", "trusted")
    assert switched["status"]["mode"] == "action" and switched["change"]["actor"] == "otto"
    plain = await live.run("mode", live.cluster, "4", "observe")
    assert plain.exit_code == 0 and "observe mode" in plain.stdout
    # `audit --api` without a job lists jobs, at most --limit of them, and says there are more.
    few = await live.run("audit", "--api", "--limit", "2", "--json", role="viewer")
    assert few.exit_code == 0, few.stderr
    page = json.loads(few.stdout)
    assert len(page["items"]) == 2 and page["next_cursor"]


async def _finished(live: Live, job: int) -> bool:
    detail = await live.json("job", live.cluster, str(job), role="viewer")
    return not detail["live"]


async def _listed(live: Live, job: int) -> bool:
    page = await live.json("jobs", "--cluster", live.cluster, role="viewer")
    return any(j["job_id"] == job for j in page["items"])


async def test_clear_errors_and_where_the_target_comes_from(live: Live) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    down = await live.run("jobs", "--api-url", closed)
    assert down.exit_code == ExitCode.UNAVAILABLE and "cannot reach the Resurgo API" in down.stderr
    wrong = await live.run("jobs", "--token", "rsg_wrong")
    assert wrong.exit_code == ExitCode.DENIED and "not authenticated (401)" in wrong.stderr
    none = await live.run("jobs", role=None)
    assert none.exit_code == ExitCode.DENIED and "no bearer token" in none.stderr

    # From the config file: [api] url and token_file.
    token_file = live.tmp / "token"
    token_file.write_text(live.tokens["viewer"] + "\n")
    config = live.tmp / "resurgo.toml"
    config.write_text(f'[api]\nurl = "{live.url}"\ntoken_file = "{token_file}"\n')
    result = await live.run("jobs", "--json", "--config", str(config), role=None,
                            RESURGO_API_URL="")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "items" in json.loads(result.stdout)


async def test_api_token_prints_a_token_and_its_config_entry(live: Live) -> None:
    result = await live.run("api-token", "carol", "--role", "operator", role=None)
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert token.startswith("rsg_") and len(token) > 40
    assert "[tokens.carol]" in result.stderr and 'role = "operator"' in result.stderr
    assert hash_token(token) in result.stderr
