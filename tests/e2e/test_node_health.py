"""End-to-end, real Slurm + real Temporal: a node blamed by failures of three different jobs is
drained with a reason naming the jobs (action mode, the cluster allows draining) or only advised
(observe mode); its validation runs a real gloo check on that node through Slurm, keeps it
drained while the check fails and resumes it once the check passes; the breaker bounds drains.

Gentle with the shared cluster: short jobs, pinned to two nodes; every node this test may drain
is resumed and its reservation deleted in a `finally`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from resurgo.audit.store import StoredAuditEvent
from resurgo.contracts import AuditEvent, AuditEventType
from resurgo.devstack.localstack import REPO, wait_for
from resurgo.nodes.health_check import reservation_name
from tests.e2e.conftest import SBATCH, Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(900)]

LEMON = "node4"
PAIR = "node3,node4"
CHECK = [sys.executable, str(REPO / "infra" / "demo" / "node_check.py")]


def slurm(dep: Deployment, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURM_CONF": dep.slurm_conf}
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=60)


def node_state(dep: Deployment, node: str) -> tuple[str, str]:
    out = slurm(dep, "sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").stdout.strip()
    state, _, reason = out.splitlines()[0].partition("|")
    return state, reason


@contextmanager
def restored(dep: Deployment, *nodes: str) -> Iterator[None]:
    """Whatever happens, the nodes go back to service and their reservations go away (the
    controller is stopped first: the test is over)."""
    try:
        yield
    finally:
        # No controller may act on the nodes after this cleanup (a validation mid-way would
        # reserve a node again).
        dep.stack.stop("controller")
        for node in nodes:
            # A reservation "in use" cannot be deleted: end our checks on the node first.
            out = slurm(dep, "squeue", "-h", "-w", node, "-o", "%i|%j").stdout
            checks = [ln.split("|")[0] for ln in out.splitlines() if "|resurgo-check-" in ln]
            if checks:
                slurm(dep, "scancel", *checks)
            for _ in range(20):
                name = f"ReservationName={reservation_name(node)}"
                if "in use" not in slurm(dep, "scontrol", "delete", name).stderr:
                    break
                time.sleep(1)
            state, _ = node_state(dep, node)
            if "drain" in state or "down" in state:
                slurm(dep, "scontrol", "update", f"NodeName={node}", "State=RESUME")


def configure(
    dep: Deployment, cluster_lines: list[str], nodes_policy: dict[str, object],
    policy_lines: tuple[str, ...] = (),
) -> None:  # fmt: skip
    """Restart worker and controller with extra cluster settings and `[policies.default.nodes]`
    (the cluster table is the last one in the generated file)."""
    dep.stack.stop("controller")
    dep.stack.stop("worker")
    policy = [f"{k} = {json.dumps(v)}" for k, v in nodes_policy.items()]
    text = dep.stack.config.read_text().rstrip("\n")
    dep.stack.config.write_text(
        "\n".join(
            [
                text,
                *cluster_lines,
                "[policies.default]",
                *policy_lines,
                "[policies.default.nodes]",
                *policy,
            ]
        )
        + "\n"
    )
    dep.stack.start("worker")
    dep.stack.start("controller")


def submit_on_pair(
    dep: Deployment, fault_node: str, mode: str = "observe", drain: bool = False
) -> int:
    """A short 2-node training job on node3+node4 (its first attempt) whose `fault_node` reports
    an uncorrectable ECC error at iteration 3 (once)."""
    directive = {"resurgo": {"mode": mode, "environment": dep.environment, "drain": drain}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESURGO_FAULT")}
    env.update(SLURM_CONF=dep.slurm_conf, RESURGO_REPO=str(REPO), RESURGO_FAULT="ecc",
               RESURGO_FAULT_NODE=fault_node, RESURGO_FAULT_AT="3",
               RESURGO_FAULT_ONCE="1")  # fmt: skip
    argv = [
        "sbatch", "--parsable", "--nodes=2", f"--nodelist={PAIR}", "--job-name=resurgo-lemon",
        f"--output={dep.workdir / 'job-%j.out'}", "--comment=" + json.dumps(directive),
        str(SBATCH), "--iters", "8", "--sleep-per-iter", "0.05", "--hidden", "64",
        "--batch", "16",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=dep.workdir)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def node_events(dep: Deployment) -> list[StoredAuditEvent]:
    return list(dep.store.iter_all(cluster=dep.name, job_id=0))


def wait_node_event(
    dep: Deployment, type_: str, where: Callable[[StoredAuditEvent], bool] = lambda e: True,
    timeout: float = 240,
) -> StoredAuditEvent:  # fmt: skip
    def found() -> StoredAuditEvent | None:
        return next((e for e in node_events(dep) if e.type == type_ and where(e)), None)

    try:
        return wait_for(found, timeout, what=f"node event {type_}")  # type: ignore[no-any-return]
    except TimeoutError:
        raise AssertionError(
            f"no {type_}; node events: {[(e.type, e.summary) for e in node_events(dep)]}\n"
            f"--- worker ---\n{dep.stack.log_tail('worker')}\n"
            f"--- controller ---\n{dep.stack.log_tail('controller')}"
        ) from None


def three_failures_on(dep: Deployment, node: str) -> list[int]:
    jobs = [submit_on_pair(dep, node) for _ in range(3)]
    try:
        for job in jobs:
            verdict = dep.wait_event(job, "attribution", timeout=300)
            assert verdict.data["culprit_nodes"] == [node], verdict.summary
    finally:
        for job in jobs:
            dep.cancel(job)
    return jobs


def mark_repaired(dep: Deployment, node: str, note: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "resurgo.cli.main", "nodes", "repaired", dep.name, node,
         "--note", note, "--config", str(dep.stack.config)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout


def test_lemon_is_drained_validated_kept_drained_then_resumed(
    deploy: Callable[..., Deployment], tmp_path: Path
) -> None:
    dep = deploy()
    broken = tmp_path / "still-broken"
    broken.write_text("the GPU was not replaced yet")
    configure(dep, ["allow_drain = true"], {
        "lemon_mode": "action", "lemon_failures": 3, "lemon_window_seconds": 3600,
        "health_check": [*CHECK, "--fail-if-exists", str(broken)],
        "health_check_timeout_seconds": 120, "health_check_output_dir": str(dep.workdir),
        "poll_seconds": 2,
    })  # fmt: skip
    with restored(dep, LEMON):
        jobs = three_failures_on(dep, LEMON)
        advised = wait_node_event(dep, "node_drain_advised")
        assert advised.data["node"] == LEMON and advised.data["jobs"] == sorted(jobs)
        drained = wait_node_event(dep, "node_drained")
        state, reason = node_state(dep, LEMON)
        assert "drain" in state, state
        assert reason.startswith("resurgo") and all(str(j) in reason for j in jobs), reason
        assert drained.data["jobs"] == sorted(jobs)

        # Still broken: the check runs on the node and fails; the node stays drained.
        mark_repaired(dep, LEMON, "first try")
        failed = wait_node_event(dep, "node_validation",
                                 lambda e: e.data.get("phase") == "finished")  # fmt: skip
        assert failed.data["passed"] is False and failed.data["job_id"] > 0
        assert any("simulated fault" in line for line in failed.data["report"])
        wait_node_event(dep, "node_drained", lambda e: e.data.get("kept") is True)
        state, reason = node_state(dep, LEMON)
        assert "drain" in state and "validation failed" in reason, (state, reason)
        assert reservation_name(LEMON) not in slurm(dep, "scontrol", "show", "res").stdout

        # Repaired: the same check passes (a real gloo all-reduce on node4) and it is resumed.
        broken.unlink()
        mark_repaired(dep, LEMON, "GPU replaced")
        passed = wait_node_event(
            dep, "node_validation", lambda e: e.data.get("phase") == "finished" and e.data["passed"]
        )
        assert any("gloo all-reduce" in line for line in passed.data["report"])
        check_job = slurm(dep, "scontrol", "show", "-o", "job", str(passed.data["job_id"])).stdout
        assert f"NodeList={LEMON}" in check_job
        wait_node_event(dep, "node_resumed")
        state, _ = node_state(dep, LEMON)
        assert "drain" not in state, state
        assert reservation_name(LEMON) not in slurm(dep, "scontrol", "show", "res").stdout
        ledger = subprocess.run(
            [sys.executable, "-m", "resurgo.cli.main", "nodes", "show", dep.name, LEMON,
             "--json", "--config", str(dep.stack.config)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        record = json.loads(ledger.stdout)
        kinds = [e["kind"] for e in record["history"]]
        assert record["state"] == "in_service" and record["failing_jobs"] == sorted(jobs)
        assert kinds == ["failure"] * 3 + [
            "drain_advised",
            "drain",
            "repaired",
            "validation",
            "kept_drained",
            "repaired",
            "validation",
            "resumed",
        ]


def test_observe_mode_only_advises(deploy: Callable[..., Deployment]) -> None:
    dep = deploy()
    configure(dep, ["allow_drain = true"], {"lemon_mode": "observe", "lemon_failures": 3,
                                            "health_check": CHECK, "poll_seconds": 2})  # fmt: skip
    with restored(dep, LEMON):
        jobs = three_failures_on(dep, LEMON)
        advised = wait_node_event(dep, "node_drain_advised")
        assert advised.data["jobs"] == sorted(jobs) and advised.data["mode"] == "observe"
        assert all(str(j) in advised.summary for j in jobs), advised.summary
        would = wait_node_event(dep, "would_act")
        assert would.data["blocked_by"] == "observe mode"
        state, reason = node_state(dep, LEMON)
        assert "drain" not in state and not reason.startswith("resurgo"), (state, reason)
        assert not [e for e in node_events(dep) if e.type == "node_drained"]


def inject_failures(dep: Deployment, node: str, jobs: list[int]) -> None:
    """Attribution events as job workflows write them (the real ones take a training job each:
    the first test runs those); the sentinel, workflow, controller and Slurm are all real."""
    now = datetime.now(UTC)
    dep.store.append([
        AuditEvent(
            event_id=f"resurgo:{dep.name}:{job}:1:attribution", cluster=dep.name, job_id=job,
            workflow_id=f"resurgo:{dep.name}:{job}:1", type=AuditEventType.ATTRIBUTION,
            producer="workflow", at=now, summary=f"hardware_gpu on {node}",
            data={"kind": "crash", "category": "hardware_gpu", "culprit_nodes": [node],
                  "summary": f"uncorrectable ECC error on {node}", "evidence": []},
        )
        for job in jobs
    ])  # fmt: skip


def test_the_breaker_bounds_lemon_drains(deploy: Callable[..., Deployment]) -> None:
    """A breaker allowing one remediated node per window: of two lemons at once, at most one is
    drained; the other drain is refused by the breaker, recorded, and the node left in service
    (another test's drain on the shared cluster may take the one slot: then both are refused)."""
    dep = deploy()
    loose = ("max_excluded_share", "max_remediations_per_node")
    lines = [
        ln
        for ln in dep.stack.config.read_text().splitlines()
        if ln.split("=")[0].strip() not in loose
    ]
    dep.stack.config.write_text("\n".join(lines) + "\n")
    configure(dep, ["allow_drain = true", "max_excluded_share = 0.01"],
              {"lemon_mode": "action", "lemon_failures": 3})  # fmt: skip
    pair = ("node1", "node2")
    with restored(dep, *pair):
        inject_failures(dep, pair[0], [101, 102, 103])
        inject_failures(dep, pair[1], [201, 202, 203])
        advised = wait_for(
            lambda: {e.data["node"] for e in node_events(dep) if e.type == "node_drain_advised"}
            >= set(pair) or None, 120, what="both lemons advised",
        )  # fmt: skip
        assert advised

        def settled() -> list[StoredAuditEvent] | None:
            ends = [e for e in node_events(dep) if e.type in ("node_drained", "would_act")]
            return ends if len(ends) >= 2 else None

        ends = wait_for(settled, 120, what="both drains decided")
        refused = [e for e in ends if e.type == "would_act"]
        drained = [e for e in ends if e.type == "node_drained"]
        assert len(drained) <= 1 and refused, [(e.type, e.summary) for e in ends]
        assert all("circuit breaker" in e.summary for e in refused), [e.summary for e in refused]
        for event in refused:
            state, _ = node_state(dep, event.data["node"])
            assert "drain" not in state, state


def test_a_controller_killed_mid_validation_neither_resumes_nor_checks_twice(
    deploy: Callable[..., Deployment],
) -> None:
    dep = deploy()
    slow_check = ["bash", "-c", f"sleep 20; exec {' '.join(CHECK)}"]
    configure(dep, ["allow_drain = true"], {
        "lemon_mode": "action", "lemon_failures": 3, "health_check": slow_check,
        "health_check_timeout_seconds": 180, "health_check_output_dir": str(dep.workdir),
        "poll_seconds": 2,
    })  # fmt: skip
    node = "node2"
    with restored(dep, node):
        inject_failures(dep, node, [301, 302, 303])
        wait_node_event(dep, "node_drained")
        mark_repaired(dep, node, "cable reseated")

        def running_check() -> str | None:
            out = slurm(dep, "squeue", "-h", "-w", node, "-t", "RUNNING", "-o", "%i|%j").stdout
            rows = [ln for ln in out.splitlines() if "|resurgo-check-" in ln]
            return rows[0] if rows else None

        job_id, job_name = wait_for(running_check, 120, what="the check running").split("|")
        dep.stack.kill("controller")
        dep.stack.kill("worker")
        # While nobody watches: the node takes no other job (inside the check's reservation).
        shown = slurm(dep, "scontrol", "show", "-o", "reservation", reservation_name(node)).stdout
        assert f"Nodes={node} " in shown and "MAINT" in shown, shown
        out = f"--output={dep.workdir / 'probe-%j.out'}"
        probe = slurm(dep, "sbatch", "--parsable", "-w", node, "-N1", "--time=1", out,
                      "--wrap", "true").stdout.strip()  # fmt: skip
        try:
            time.sleep(3)
            probed = slurm(dep, "squeue", "-h", "-j", probe, "-o", "%T|%r").stdout.strip()
            assert probed.startswith("PENDING"), probed
        finally:
            slurm(dep, "scancel", probe)
        assert not [e for e in node_events(dep) if e.type == "node_resumed"]
        dep.stack.start("worker")
        dep.stack.start("controller")
        passed = wait_node_event(
            dep, "node_validation",
            lambda e: e.data.get("phase") == "finished" and e.data["passed"], timeout=300,
        )  # fmt: skip
        assert str(passed.data["job_id"]) == job_id
        wait_node_event(dep, "node_resumed")
        ran = slurm(dep, "squeue", "-h", "-t", "all", "-n", job_name, "-o", "%i").stdout.split()
        assert ran == [job_id], ran
        state, _ = node_state(dep, node)
        assert "drain" not in state and "reserved" not in state, state


def test_a_drain_made_by_a_jobs_recovery_is_validated_and_resumed(
    deploy: Callable[..., Deployment],
) -> None:
    """A job opted in to draining (`"drain": true`, policy allow_drain) has its culprit drained
    by its own recovery; the sentinel adopts that drain, and the node is validated and resumed
    instead of waiting drained for a human."""
    dep = deploy()
    configure(dep, ["allow_drain = true"], {
        "lemon_mode": "action", "health_check": CHECK, "health_check_timeout_seconds": 120,
        "health_check_output_dir": str(dep.workdir), "poll_seconds": 2,
    }, policy_lines=("allow_drain = true",))  # fmt: skip
    with restored(dep, LEMON):
        job = submit_on_pair(dep, LEMON, mode="action", drain=True)
        try:
            dep.wait_event(job, "action", where=lambda e: e.data.get("step") == "drain_node",
                           timeout=300)  # fmt: skip
            adopted = wait_node_event(dep, "node_drained", lambda e: e.data.get("adopted") is True)
            assert adopted.data["node"] == LEMON and adopted.data["jobs"] == [job]
            state, reason = node_state(dep, LEMON)
            assert "drain" in state and "awaiting validation" in reason, (state, reason)
            mark_repaired(dep, LEMON, "replaced the GPU")
            wait_node_event(dep, "node_resumed")
            state, _ = node_state(dep, LEMON)
            assert "drain" not in state, state
        finally:
            dep.cancel(job)
