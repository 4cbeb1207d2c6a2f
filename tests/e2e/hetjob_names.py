"""A heterogeneous job asked for by a component's own job id (`86` for `85+1`), the way users
reach it: the API's gateway (job detail, timeline, /v1/audit) over the real Temporal server and
the deployment's audit store, `resurgo audit` straight from the store, and `resurgo job` /
`resurgo audit --api` through a `resurgo api` process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
from typer.testing import CliRunner

from resurgo.api.core import TemporalConnection
from resurgo.api.models import AuditPage, JobDetail, TimelinePage
from resurgo.api.server import free_port
from resurgo.api.service import Gateway
from resurgo.cli.main import app as cli
from resurgo.config import TemporalSettings
from resurgo.devstack.localstack import REPO, wait_for
from tests.e2e.conftest import Deployment


def gateway_reads(
    dep: Deployment, temporal_address: str, job: int
) -> tuple[JobDetail, TimelinePage, AuditPage]:
    """What the API answers for `job` on the deployment's cluster."""

    async def read() -> tuple[JobDetail, TimelinePage, AuditPage]:
        gateway = Gateway(
            TemporalConnection(TemporalSettings(address=temporal_address)), dep.store,
            cursor_key=b"e2e-hetjob-names",
        )  # fmt: skip
        detail = await gateway.job_detail(dep.name, str(job), None)
        timeline = await gateway.timeline(dep.name, str(job), None, None, None, 100)
        audit = await gateway.audit(cluster=dep.name, job_id=job, limit=1000)
        return detail, timeline, audit

    return asyncio.run(read())


def cli_audit(dep: Deployment, job: int) -> tuple[int, list[dict[str, Any]], str]:
    """`resurgo audit JOB --cluster .. --url .. --json`: exit code, events, stderr."""
    url = dep.store.url
    result = CliRunner().invoke(
        cli, ["audit", str(job), "--cluster", dep.name, "--url", url, "--json"],
        env={"RESURGO_CONFIG": "", "COLUMNS": "200"},
    )  # fmt: skip
    events = json.loads(result.stdout) if result.exit_code == 0 else []
    return result.exit_code, events, result.stderr


@contextlib.contextmanager
def api_process(dep: Deployment) -> Iterator[str]:
    """`resurgo api --insecure` on loopback over the deployment's config; its base URL."""
    port = free_port()
    log = open(dep.workdir / "logs" / "api.log", "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "resurgo.cli.main", "api", "--config", str(dep.stack.config),
         "--insecure", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        return False

    try:
        wait_for(up, 60, what="resurgo api")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def cli_via_api(url: str, *args: str) -> tuple[int, str, str]:
    """A `resurgo` command against the API at `url`: exit code, stdout, stderr."""
    result = CliRunner().invoke(
        cli, list(args), env={"RESURGO_API_URL": url, "RESURGO_CONFIG": "", "COLUMNS": "200"}
    )
    return result.exit_code, result.stdout, result.stderr
