"""End-to-end recovery of real PyTorch DDP jobs on the real local Slurm cluster.

Real Temporal dev server, real slurmctld/slurmd, real torch.distributed (gloo) training,
real worker and controller processes; the audit store is SQLite or the real MariaDB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from resurgo.devstack.localstack import REPO, wait_for
from resurgo.workflows import search_attributes as sa
from tests.e2e.conftest import Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(420)]

HAPPY_PATH = [
    "monitoring_started",
    "attempt_started",
    "progress",
    "anomaly",
    "attribution",
    "advice",
    "action",
    "reconciliation",
    "attempt_started",
    "progress_recovered",
    "completed",
]


def in_order(types: list[str], expected: list[str]) -> bool:
    it = iter(types)
    return all(any(t == want for t in it) for want in expected)


async def test_action_mode_hardware_fault_requeues_excluding_the_node(
    deploy: Callable[..., Deployment], temporal_env: WorkflowEnvironment
) -> None:
    """ECC error on rank 1's node: one requeue without that node, resume, completion."""
    dep = deploy(mysql=True)
    job_id = dep.submit(mode="action", fault="ecc", fault_rank="1")
    dep.wait_event(job_id, "completed", timeout=300)

    events = dep.events(job_id)
    types = [e.type for e in events]
    assert in_order(types, HAPPY_PATH), types
    attribution = next(e for e in events if e.type == "attribution")
    culprit = attribution.data["culprit_nodes"]
    assert attribution.data["category"] == "hardware_gpu" and len(culprit) == 1
    first_nodes = next(e for e in events if e.type == "attempt_started").data["nodes"]
    assert culprit[0] in first_nodes
    advice = next(e for e in events if e.type == "advice")
    assert advice.data["kind"] == "requeue_excluding" and advice.data["nodes"] == culprit
    steps = [e.data["step"] for e in events if e.type == "action"]
    assert steps == ["requeue_hold", "exclude_nodes", "release"]
    reconciliation = next(e for e in events if e.type == "reconciliation")
    assert reconciliation.data["status"] == "converged"
    recovered = next(e for e in events if e.type == "progress_recovered")
    assert recovered.data["resumed_from"] is not None and recovered.data["resumed_from"] > 0
    assert recovered.attempt == 1

    job = dep.job(job_id)
    assert job.state == "COMPLETED" and job.restarts == 1
    assert culprit[0] in job.exc_node_list and culprit[0] not in job.node_list
    assert "resumed from checkpoint iteration" in dep.job_log(job_id)

    # What the Temporal UI's workflow list filters on.
    listed = [
        wf
        async for wf in temporal_env.client.list_workflows(
            f'ResurgoCluster = "{dep.name}" AND ResurgoSlurmJobId = "{job_id}"'
        )
    ]
    assert len(listed) == 1
    attrs = listed[0].typed_search_attributes
    assert attrs.get(sa.STATE) == "completed" and attrs.get(sa.ATTEMPT) == 1
    assert attrs.get(sa.LAST_CATEGORY) == "hardware_gpu" and attrs.get(sa.MODE) == "action"
    description = await temporal_env.client.get_workflow_handle(listed[0].id).describe()
    assert f"{dep.name}/{job_id}" in (await description.static_summary() or "")


def test_observe_mode_leaves_slurm_untouched(deploy: Callable[..., Deployment]) -> None:
    """Same fault in observe mode: advice and a would-act record, and Slurm's view unchanged."""
    dep = deploy()
    job_id = dep.submit(mode="observe", fault="ecc", fault_rank="1")
    would = dep.wait_event(job_id, "would_act", timeout=240)
    assert "observe mode" in would.summary
    assert would.data["steps"] == ["requeue_hold", "exclude_nodes", "release"]
    time.sleep(3)
    job = dep.job(job_id)
    assert job.state == "FAILED" and job.restarts == 0
    assert job.exc_node_list == [] and job.admin_comment == "" and not job.held
    assert not [e for e in dep.events(job_id) if e.type == "action"]
    # One failure, one report: the fatal line (seen while the job still ran, or with its end)
    # gets one anomaly and one advice; the job's end is not a second failure, and the ended job
    # is followed (someone may requeue it by hand), not reported again at every look.
    time.sleep(5)
    events = dep.events(job_id)
    anomalies = [e.summary for e in events if e.type == "anomaly"]
    advice = [e.summary for e in events if e.type == "advice"]
    assert len(anomalies) == 1 and len(advice) == 1, [e.summary for e in events]
    assert advice[0].startswith("g1 "), advice

    # What-if over this real audit store: a policy with no retry budget would have stopped it.
    strict = dep.workdir / "strict.toml"
    strict.write_text("[policies.strict]\nbudget_per_fingerprint = 0\n")
    out = subprocess.run(
        [sys.executable, "-m", "resurgo.cli.main", "policy", "replay", "--policy", str(strict),
         "--config", str(dep.stack.config), "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["decisions"] == 1 and report["policy"]["name"] == "strict"
    [changed] = report["changed"]
    assert changed["job_id"] == job_id and changed["category"] == "hardware_gpu"
    assert changed["recorded"]["kind"] == "requeue_excluding"
    assert changed["replayed"]["kind"] == "stop"


def test_cluster_without_acknowledgement_only_advises(deploy: Callable[..., Deployment]) -> None:
    """Directive says action, the cluster has not acknowledged: nothing is done."""
    dep = deploy(acknowledge=False)
    job_id = dep.submit(mode="action", fault="sigkill", fault_rank="1")
    would = dep.wait_event(job_id, "would_act", timeout=240)
    assert "acknowledge_scheduler_actions" in would.summary
    assert dep.job(job_id).restarts == 0


def test_application_bug_on_every_rank_stops(deploy: Callable[..., Deployment]) -> None:
    """The same exception on every rank, every attempt: stop with the reason, no restart loop."""
    dep = deploy()
    job_id = dep.submit(mode="action", fault="exception", fault_rank="all", fault_once=False)
    stop = dep.wait_event(job_id, "advice", timeout=300, where=lambda e: e.data["kind"] == "stop")
    assert stop.data["category"] == "application"
    assert "application" in stop.summary
    time.sleep(2)
    job = dep.job(job_id)
    assert job.restarts <= 1 and job.terminal
    requeues = [
        e for e in dep.events(job_id) if e.type == "action" and e.data["step"] == "requeue_hold"
    ]
    assert len(requeues) == job.restarts


def test_killing_worker_and_controller_mid_restart_requeues_once(
    deploy: Callable[..., Deployment], tmp_path: Path
) -> None:
    """SIGKILL both processes after requeue-hold ran but before it was reported: one requeue."""
    marker = tmp_path / "paused"
    dep = deploy(
        controller_env={
            "RESURGO_CHAOS_PAUSE_AFTER": "requeue_hold",
            "RESURGO_CHAOS_MARKER": str(marker),
        }
    )
    job_id = dep.submit(mode="action", fault="ecc", fault_rank="1")
    wait_for(marker.exists, 240, what="the controller to pause after requeue_hold")
    held = dep.job(job_id)
    assert held.restarts == 1 and held.held  # done in Slurm, not yet known to Temporal
    dep.stack.kill("worker")
    dep.stack.kill("controller")
    assert not [e for e in dep.events(job_id) if e.type == "action"]
    dep.stack.start_all()
    dep.wait_event(job_id, "completed", timeout=300)

    job = dep.job(job_id)
    assert job.restarts == 1 and job.state == "COMPLETED"
    events = dep.events(job_id)
    assert len({e.event_id for e in events}) == len(events)
    counts = Counter((e.type, e.data.get("step")) for e in events)
    assert counts[("advice", None)] == 1
    assert counts[("action", "requeue_hold")] == 1 and counts[("action", "release")] == 1
    requeue = next(e for e in events if e.type == "action" and e.data["step"] == "requeue_hold")
    assert requeue.data["outcome"] == "already_satisfied"
    assert len({e.workflow_id for e in events}) == 1


def test_silent_hang_in_action_mode_requeues_the_running_job(
    deploy: Callable[..., Deployment],
) -> None:
    """A RUNNING job that stopped progressing is requeued (through COMPLETING) and recovers."""
    dep = deploy()
    job_id = dep.submit(
        mode="action", fault="hang_silent", fault_rank="all", extra_directive={"hang_timeout": 15}
    )
    dep.wait_event(job_id, "completed", timeout=300)
    events = dep.events(job_id)
    anomaly = next(e for e in events if e.type == "anomaly")
    assert anomaly.data["kind"] == "hang" and anomaly.data["job_state"] == "RUNNING"
    assert [e.data["step"] for e in events if e.type == "action"] == ["requeue_hold", "release"]
    assert next(e for e in events if e.type == "reconciliation").data["status"] == "converged"
    job = dep.job(job_id)
    assert job.restarts == 1 and job.state == "COMPLETED"


def test_malformed_directive_is_reported_and_left_alone(
    deploy: Callable[..., Deployment],
) -> None:
    """A broken directive: a clear audit record, the job runs untouched, nothing crashes."""
    dep = deploy()
    job_id = dep.submit(comment='{"resurgo": {"mode": "action", "environment": ', iters=15)
    bad = dep.wait_event(job_id, "directive_invalid", timeout=120)
    assert "not valid JSON" in bad.summary
    wait_for(lambda: dep.job(job_id).terminal, 120, what="job to finish")
    assert dep.job(job_id).state == "COMPLETED" and dep.job(job_id).restarts == 0
    assert dep.stack.alive("controller") and dep.stack.alive("worker")
