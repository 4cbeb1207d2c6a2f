"""Detection on real torch.distributed runs under srun: each failure is seen with the right kind.

Observe mode throughout: these tests are about what the running system concludes, not about
what it does (test_recovery.py covers that).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.conftest import Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("fault", "kind", "trainer_args"),
    [
        ("sigkill", "crash", ()),
        ("segfault", "crash", ()),
        ("hang", "hang", ("--collective-timeout", "8")),
    ],
)
def test_failures_are_detected_with_the_right_kind(
    deploy: Callable[..., Deployment], fault: str, kind: str, trainer_args: tuple[str, ...]
) -> None:
    dep = deploy()
    job_id = dep.submit(mode="observe", fault=fault, fault_rank="1", trainer_args=trainer_args)
    anomaly = dep.wait_event(job_id, "anomaly", timeout=200)
    assert anomaly.data["kind"] == kind, anomaly.summary
    attribution = dep.wait_event(job_id, "attribution")
    first_nodes = next(e for e in dep.events(job_id) if e.type == "attempt_started").data["nodes"]
    # The rank that failed ran on the second node of the allocation (block layout, rank 1).
    if fault in ("sigkill", "segfault"):
        assert attribution.data["culprit_nodes"] == [first_nodes[1]], attribution.summary


def test_silent_hang_is_detected_from_progress_silence_alone(
    deploy: Callable[..., Deployment],
) -> None:
    """Every rank stops printing, no error line at all: the directive's hang_timeout fires."""
    dep = deploy()
    job_id = dep.submit(
        mode="observe", fault="hang_silent", fault_rank="all", extra_directive={"hang_timeout": 15}
    )
    anomaly = dep.wait_event(job_id, "anomaly", timeout=200)
    assert anomaly.data["kind"] == "hang"
    assert anomaly.data["signals"] == [] and "no training progress" in anomaly.summary
    assert dep.job(job_id).state == "RUNNING"
    dep.cancel(job_id)


def test_straggler_names_the_slow_node(deploy: Callable[..., Deployment]) -> None:
    dep = deploy()
    job_id = dep.submit(
        mode="observe",
        fault="slow",
        fault_rank="1",
        fault_at=2,
        iters=200,
        trainer_args=("--per-rank-timing",),
        fault_env={"RESURGO_FAULT_SLOWDOWN": "0.3"},
        extra_directive={"straggler": {"ratio": 2.0, "window": 5}},
    )
    anomaly = dep.wait_event(job_id, "anomaly", timeout=200)
    nodes = next(e for e in dep.events(job_id) if e.type == "attempt_started").data["nodes"]
    assert anomaly.data["kind"] == "straggler"
    assert anomaly.data["suspects"] == [nodes[1]], anomaly.summary
    dep.cancel(job_id)


def test_healthy_noisy_run_raises_nothing(deploy: Callable[..., Deployment]) -> None:
    dep = deploy()
    job_id = dep.submit(mode="observe", iters=25, trainer_args=("--per-rank-timing",))
    dep.wait_event(job_id, "completed", timeout=200)
    types = [e.type for e in dep.events(job_id)]
    assert "anomaly" not in types and "advice" not in types, types
