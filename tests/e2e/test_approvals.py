"""Operator approvals end to end: real Slurm, real PyTorch DDP jobs, real worker, controller and
`resurgo api` processes, decisions through the HTTP API and the CLI.

Three approval-required jobs with an ECC fault on rank 1: one is approved (the requeue happens),
one is rejected (Slurm is never touched), one is left alone until the approval expires (nothing is
done: fail-open).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from resurgo.api.server import free_port
from resurgo.devstack.localstack import REPO, wait_for
from resurgo.tokens import hash_token, new_token
from tests.e2e.conftest import Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(420)]

APPROVAL = {"approval": "required", "approval_timeout": 30}


@dataclass
class ApiProcess:
    url: str
    tokens: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path

    def call(self, method: str, path: str, role: str = "operator", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=60, **kw)

    def ok(self, path: str, **params: Any) -> Any:
        resp = self.call("GET", path, role="viewer", params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def cli(self, *args: str, role: str = "operator") -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "RESURGO_API_URL": self.url, "RESURGO_API_TOKEN": self.tokens[role]}
        return subprocess.run([sys.executable, "-m", "resurgo.cli.main", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture
def api_for(tmp_path: Path) -> Iterator[Callable[[Deployment], ApiProcess]]:
    started: list[ApiProcess] = []

    def start(dep: Deployment) -> ApiProcess:
        tokens = {"viewer": new_token(), "operator": new_token()}
        tokens_file = tmp_path / f"{dep.name}-tokens.toml"
        tokens_file.write_text("".join(
            f'[tokens.{role}-{dep.name}]\nrole = "{role}"\nsha256 = "{hash_token(tok)}"\n'
            for role, tok in tokens.items()
        ))  # fmt: skip
        port = free_port()
        log = dep.workdir / "logs" / "api.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "resurgo.cli.main", "api", "--config", str(dep.stack.config),
                 "--port", str(port), "--tokens-file", str(tokens_file)],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        api = ApiProcess(f"http://127.0.0.1:{port}", tokens, proc, log)
        started.append(api)

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(api.url + "/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, 60, what="resurgo api to be ready")
        return api

    yield start
    for api in started:
        if api.proc.poll() is None:
            os.killpg(api.proc.pid, signal.SIGTERM)
            try:
                api.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(api.proc.pid, signal.SIGKILL)
                api.proc.wait(timeout=10)


def pending_generation(api: ApiProcess, cluster: str, job_id: int) -> int | None:
    page = api.ok("/v1/advice", pending="true", cluster=cluster)
    for item in page["items"]:
        if item["job"]["job_id"] == job_id:
            assert item["pending"] and item["expires_at"] is not None
            return int(item["advice"]["generation"])
    return None


def test_approve_reject_and_expire_through_the_api(
    deploy: Callable[..., Deployment], api_for: Callable[[Deployment], ApiProcess]
) -> None:
    dep = deploy()
    api = api_for(dep)
    approved = dep.submit(mode="action", fault="ecc", fault_rank="1", extra_directive=APPROVAL)
    rejected = dep.submit(mode="action", fault="ecc", fault_rank="1", extra_directive=APPROVAL)
    expired = dep.submit(mode="action", fault="ecc", fault_rank="1", extra_directive=APPROVAL)
    try:
        # 1. Waits for an operator: audit says so, the API lists it as pending.
        dep.wait_event(approved, "approval_requested", timeout=240)
        gen = wait_for(lambda: pending_generation(api, dep.name, approved), 30,
                       what="the API to list the pending approval")  # fmt: skip
        detail = api.ok(f"/v1/jobs/{dep.name}/{approved}")
        assert detail["needs_approval"] and detail["phase"] == "awaiting_approval"
        assert detail["pending_approval"]["kind"] == "requeue_excluding"
        assert not [e for e in dep.events(approved) if e.type == "action"]
        assert dep.job(approved).restarts == 0

        # ... is approved through the API (here with the CLI) and the requeue happens.
        done = api.cli("approve", dep.name, str(approved), str(gen), "--reason", "e2e", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["decision"]["actor"] == f"operator-{dep.name}"
        rec = dep.wait_event(approved, "reconciliation", timeout=120)
        assert rec.data["status"] == "converged", rec.summary
        steps = [e.data["step"] for e in dep.events(approved) if e.type == "action"]
        assert steps == ["requeue_hold", "exclude_nodes", "release"]
        assert dep.job(approved).restarts == 1
        audit = api.ok("/v1/audit", job=approved, cluster=dep.name, type="approval_approved")
        assert [e["data"]["actor"] for e in audit["events"]] == [f"operator-{dep.name}"]

        # 2. Another is rejected: nothing happens to it.
        dep.wait_event(rejected, "approval_requested", timeout=240)
        gen = wait_for(lambda: pending_generation(api, dep.name, rejected), 30,
                       what="the rejected job's pending approval")  # fmt: skip
        resp = api.call("POST", f"/v1/jobs/{dep.name}/{rejected}/advice/{gen}/reject",
                        json={"reason": "maintenance window"})  # fmt: skip
        assert resp.status_code == 200, resp.text
        dep.wait_event(rejected, "approval_rejected", timeout=30)
        again = api.call("POST", f"/v1/jobs/{dep.name}/{rejected}/advice/{gen}/approve")
        assert again.status_code == 409, again.text

        # 3. The third is left alone: the approval expires and nothing is done (fail-open).
        dep.wait_event(expired, "approval_requested", timeout=240)
        assert pending_generation(api, dep.name, expired) is not None
        gone = dep.wait_event(expired, "approval_expired", timeout=60)
        assert "fail-open" in gone.summary
        detail = api.ok(f"/v1/jobs/{dep.name}/{expired}")
        assert detail["advice"][0]["state"] == "expired"
        assert detail["pending_approval"] is None

        for job in (rejected, expired):
            assert not [e for e in dep.events(job) if e.type == "action"]
            obs = dep.job(job)
            assert obs.restarts == 0 and obs.terminal and not obs.held
            assert obs.exc_node_list == [] and obs.admin_comment == ""
        # A declined cause is not put to the operator again for the same attempt, even when the
        # failure is seen once more (first while the job still ran, then once it FAILED).
        for job in (rejected, expired):
            asks = [e for e in dep.events(job) if e.type == "approval_requested"]
            assert len(asks) == 1, [e.summary for e in asks]
        first = api.ok(f"/v1/jobs/{dep.name}/{rejected}")["advice"][0]
        assert first["state"] == "rejected" and first["advice"]["generation"] == 1
        assert first["decision"]["reason"] == "maintenance window"
    finally:
        for job in (approved, rejected, expired):
            dep.cancel(job)
