"""End-to-end recovery with the controller in SSH mode (`mode = "ssh"`), through a real sshd.

The controller runs with no Slurm on its PATH and a bogus SLURM_CONF: every Slurm command and
every read of a job's output goes over SSH to the "login node" (this host, via tests/sshd.py),
which gets TZ and SLURM_CONF from the command itself.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resurgo.audit.store import AuditStore
from resurgo.devstack.localstack import LocalStack
from tests.e2e.conftest import Deployment
from tests.e2e.test_recovery import HAPPY_PATH, in_order
from tests.sshd import SshServer, running_sshd

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(420)]

NO_LOCAL_SLURM = {"PATH": "/nonexistent", "SLURM_CONF": "/nonexistent/slurm.conf"}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def ssh_deploy(
    tmp_path: Path, temporal_address: str, slurm_conf: str, sshd: SshServer
) -> Iterator[Callable[[], Deployment]]:
    made: list[Deployment] = []

    def make() -> Deployment:
        name = "s" + uuid.uuid4().hex[:8]
        url = f"sqlite:///{tmp_path / f'{name}-audit.db'}"
        config = tmp_path / f"{name}.toml"
        config.write_text(
            "\n".join(
                [
                    "[temporal]",
                    f"address = {json.dumps(temporal_address)}",
                    "[audit]",
                    f"url = {json.dumps(url)}",
                    f"[clusters.{name}]",
                    'mode = "ssh"',
                    f"slurm_conf = {json.dumps(slurm_conf)}",
                    "acknowledge_scheduler_actions = true",
                    f"environment = {json.dumps(name)}",
                    "discovery_interval = 0.5",
                    f"[clusters.{name}.ssh]",
                    sshd.toml(),
                ]
            )
        )
        workdir = tmp_path / name
        workdir.mkdir()
        stack = LocalStack(config=config, logdir=workdir / "logs", cluster=name)
        stack.start("worker")
        stack.start("controller", NO_LOCAL_SLURM)
        dep = Deployment(name, name, stack, AuditStore(url), slurm_conf, workdir)
        made.append(dep)
        return dep

    yield make
    for dep in made:
        dep.stack.stop_all()
        dep.store.close()


def test_ssh_mode_hardware_fault_requeues_excluding_the_node(
    ssh_deploy: Callable[[], Deployment], sshd: SshServer
) -> None:
    dep = ssh_deploy()
    before = sshd.log_text()
    job_id = dep.submit(mode="action", fault="ecc", fault_rank="1")
    dep.wait_event(job_id, "completed", timeout=300)

    events = dep.events(job_id)
    types = [e.type for e in events]
    assert in_order(types, HAPPY_PATH), types
    attribution = next(e for e in events if e.type == "attribution")
    culprit = attribution.data["culprit_nodes"]
    assert attribution.data["category"] == "hardware_gpu" and len(culprit) == 1
    steps = [e.data["step"] for e in events if e.type == "action"]
    assert steps == ["requeue_hold", "exclude_nodes", "release"]
    assert next(e for e in events if e.type == "reconciliation").data["status"] == "converged"
    job = dep.job(job_id)
    assert job.state == "COMPLETED" and job.restarts == 1
    assert culprit[0] in job.exc_node_list and culprit[0] not in job.node_list
    # It all went through the login node, over few connections (reused, not one per command).
    log = sshd.log_text()[len(before) :]
    assert log.count("Starting session") > 20 and log.count("Accepted publickey") <= 3


def test_ssh_mode_hostile_job_name_and_comment_run_nothing(
    ssh_deploy: Callable[[], Deployment],
) -> None:
    tag = uuid.uuid4().hex[:8]
    pwned = [Path(f"/tmp/pwned-{tag}-{i}") for i in range(4)]
    dep = ssh_deploy()
    name = f"x;touch {pwned[0]}"
    note = f"$(touch {pwned[1]})`touch {pwned[2]}`'; touch {pwned[3]}; ' AdminComment=x"
    job_id = dep.submit(
        mode="action", fault="sigkill", fault_rank="1", fault_at=8, iters=20, name=name,
        extra_directive={"note": note},
    )  # fmt: skip
    started = dep.wait_event(job_id, "monitoring_started", timeout=120)
    assert any("unknown fields ignored: note" in p for p in started.data["problems"])
    dep.wait_event(job_id, "completed", timeout=300)
    steps = [e.data["step"] for e in dep.events(job_id) if e.type == "action"]
    assert steps[0] == "requeue_hold" and steps[-1] == "release"
    job = dep.job(job_id)
    assert job.state == "COMPLETED" and job.restarts == 1 and job.name == name
    assert not [p for p in pwned if p.exists()]
