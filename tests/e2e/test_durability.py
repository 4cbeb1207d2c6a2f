"""Whatever dies, no job is acted on twice and nothing is lost: Temporal restarts, two clusters
served by one deployment, and a scaled-out deployment losing half of its processes."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resurgo.audit.store import AuditStore
from resurgo.devstack.devserver import port_open, start_dev_server
from resurgo.devstack.localstack import REPO, LocalStack, wait_for, write_config
from resurgo.slurm.parsers import parse_job
from tests.e2e.conftest import Deployment
from tests.e2e.test_chaos import submit as submit_light

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(600)]
LIGHT = REPO / "tests" / "e2e" / "jobs" / "light_ecc.sbatch"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_one_clean_recovery(dep: Deployment, job_id: int) -> None:
    job = dep.job(job_id)
    events = dep.events(job_id)
    assert job.restarts == 1 and job.state == "COMPLETED", (job_id, job.state, job.restarts)
    assert len({e.event_id for e in events}) == len(events)
    steps = Counter(e.data.get("step") for e in events if e.type == "action")
    assert steps == Counter({"requeue_hold": 1, "exclude_nodes": 1, "release": 1}), steps
    assert len({e.workflow_id for e in events}) == 1


def test_temporal_restart_mid_recovery(
    tmp_path: Path, slurm_conf: str, temporal_address: str
) -> None:
    """Kill the Temporal dev server (SQLite file) while a job is held, start it again: the
    recovery finishes with one requeue and every audit event once."""
    port, ui_port = free_port(), free_port()
    db = tmp_path / "temporal.db"
    server = start_dev_server(port=port, ui_port=ui_port, db_file=str(db),
                              log_file=str(tmp_path / "temporal.log"))  # fmt: skip
    assert server is not None
    name = "d" + uuid.uuid4().hex[:8]
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    config = write_config(
        tmp_path / "cfg.toml", temporal_address=f"127.0.0.1:{port}", audit_url=url, cluster=name,
        slurm_conf=slurm_conf, environment=name, discovery_interval=0.5, loose_breaker=True,
    )  # fmt: skip
    marker = tmp_path / "paused"
    stack = LocalStack(config=config, logdir=tmp_path / "logs", cluster=name)
    stack.start("worker")
    stack.start("controller", {"RESURGO_CHAOS_PAUSE_AFTER": "exclude_nodes",
                               "RESURGO_CHAOS_MARKER": str(marker)})  # fmt: skip
    dep = Deployment(name, name, stack, AuditStore(url), slurm_conf, tmp_path)
    try:
        job_id = submit_light(dep)
        wait_for(marker.exists, 240, what="the controller to pause after exclude_nodes")
        assert dep.job(job_id).held
        server.kill()
        server.wait(10)
        stack.kill("controller")
        stack.start("controller")  # without the pause: it must pick the step up again
        server = start_dev_server(port=port, ui_port=ui_port, db_file=str(db),
                                  log_file=str(tmp_path / "temporal.log"))  # fmt: skip
        assert server is not None and port_open(port)
        dep.wait_event(job_id, "completed", timeout=300)
        check_one_clean_recovery(dep, job_id)
    finally:
        stack.stop_all()
        if server is not None:
            server.terminate()


@pytest.fixture
def second_cluster() -> Iterator[str]:
    """A second real Slurm cluster (3 nodes) on other ports, with its own slurmctld."""
    done = subprocess.run(
        ["bash", str(REPO / "infra/slurm/start.sh"), "--cluster", "second", "--nodes", "3",
         "--ctld-port", "6917", "--base-port", "17101"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"second cluster did not start:\n{done.stdout}\n{done.stderr}")
    yield [ln for ln in done.stdout.splitlines() if ln.startswith("SLURM_CONF=")][-1][11:]
    subprocess.run(["bash", str(REPO / "infra/slurm/stop.sh"), "--cluster", "second"],
                   capture_output=True, timeout=120)  # fmt: skip


def test_two_clusters_one_deployment_no_crosstalk(
    tmp_path: Path, slurm_conf: str, second_cluster: str, temporal_address: str
) -> None:
    env_name = "m" + uuid.uuid4().hex[:8]
    first, second = f"{env_name}a", f"{env_name}b"
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    config = write_config(
        tmp_path / "cfg.toml", temporal_address=temporal_address, audit_url=url, cluster=first,
        slurm_conf=slurm_conf, environment=env_name, discovery_interval=0.5, loose_breaker=True,
        extra=(f"[clusters.{second}]\nmode = \"local\"\nslurm_conf = {json.dumps(second_cluster)}\n"
               f"acknowledge_scheduler_actions = true\nenvironment = \"{env_name}\"\n"
               "discovery_interval = 0.5\n"),
    )  # fmt: skip
    stack = LocalStack(config=config, logdir=tmp_path / "logs", cluster=first)
    stack.start("worker")
    stack.start("controller", instance="controller-a", cluster=first)
    stack.start("controller", instance="controller-b", cluster=second)
    store = AuditStore(url)
    try:
        deps = {
            first: Deployment(first, env_name, stack, store, slurm_conf, tmp_path),
            second: Deployment(second, env_name, stack, store, second_cluster, tmp_path),
        }
        jobs = {cluster: submit_light(dep) for cluster, dep in deps.items()}
        for cluster, job_id in jobs.items():
            deps[cluster].wait_event(job_id, "completed", timeout=300)
            check_one_clean_recovery(deps[cluster], job_id)
        # Each cluster's events name only that cluster, and each controller touched only its own.
        for cluster, job_id in jobs.items():
            events = store.query(job_id=job_id, cluster=cluster, limit=1000)
            assert {e.workflow_id.split(":")[1] for e in events} == {cluster}
        log_a = (tmp_path / "logs" / "controller-a.log").read_text()
        assert second not in log_a
    finally:
        stack.stop_all()


def test_two_workers_two_controllers_lose_one_each(deploy: Callable[..., Deployment]) -> None:
    dep = deploy()
    dep.stack.start("worker", instance="worker-2")
    dep.stack.start("controller", instance="controller-2")
    jobs = [submit_light(dep) for _ in range(4)]
    wait_for(
        lambda: all(any(e.type == "anomaly" for e in dep.events(j)) for j in jobs), 240,
        what="anomalies on all jobs",
    )  # fmt: skip
    dep.stack.kill("worker")
    dep.stack.kill("controller")
    for job_id in jobs:
        dep.wait_event(job_id, "completed", timeout=300)
        check_one_clean_recovery(dep, job_id)


def test_exclusion_that_would_strand_the_job_fails_open(
    tmp_path: Path, slurm_conf: str, second_cluster: str, temporal_address: str
) -> None:
    """Excluding 2 of 3 nodes would leave a 2-node job unschedulable: the controller refuses,
    the workflow releases its own hold, and the job runs again as plain Slurm would run it."""
    name = "x" + uuid.uuid4().hex[:8]
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    config = write_config(
        tmp_path / "cfg.toml", temporal_address=temporal_address, audit_url=url, cluster=name,
        slurm_conf=second_cluster, environment=name, discovery_interval=0.5, loose_breaker=True,
    )  # fmt: skip
    stack = LocalStack(config=config, logdir=tmp_path / "logs", cluster=name)
    stack.start_all()
    dep = Deployment(name, name, stack, AuditStore(url), second_cluster, tmp_path)
    try:
        subprocess.run(["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=test"],
                       env={**os.environ, "SLURM_CONF": second_cluster}, check=True)  # fmt: skip
        job_id = submit_light(dep)
        dep.wait_event(job_id, "completed", timeout=300)
        events = dep.events(job_id)
        abandoned = next(e for e in events if e.type == "reconciliation")
        assert abandoned.data["status"] == "abandoned" and "usable node" in abandoned.summary
        assert any("fail-open" in e.summary for e in events if e.type == "action")
        job = dep.job(job_id)
        assert job.restarts == 1 and job.state == "COMPLETED" and not job.held
    finally:
        subprocess.run(["scontrol", "update", "NodeName=node3", "State=RESUME"],
                       env={**os.environ, "SLURM_CONF": second_cluster})  # fmt: skip
        stack.stop_all()


def test_reused_job_id_is_a_new_job() -> None:
    """Identity: Restarts never decrease for one job and SubmitTime changes only with them."""
    from datetime import UTC, datetime

    from resurgo.contracts import JobKey, WatchRequest
    from resurgo.detect.watch_loop import replaced

    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    key = JobKey(cluster="c", job_id=5, submit_time=t0)
    line = (REPO / "tests/fixtures/slurm/scontrol_show_job_running.txt").read_text()
    obs = parse_job(next(ln for ln in line.splitlines() if ln.startswith("JobId=")))
    same = obs.model_copy(update={"restarts": 0, "submit_time": t0})
    other = obs.model_copy(update={"restarts": 0, "submit_time": t0.replace(hour=13)})
    assert not replaced(WatchRequest(job=key, attempt=0), same)
    assert replaced(WatchRequest(job=key, attempt=0), other)
    assert replaced(WatchRequest(job=key, attempt=2), same)  # Restarts went down: another job
    later = obs.model_copy(update={"restarts": 2, "submit_time": t0.replace(hour=14)})
    assert not replaced(WatchRequest(job=key, attempt=2), later)
