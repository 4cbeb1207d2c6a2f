"""End-to-end: the controller's circuit breaker / per-node cap refuses a second exclusion on the
real local Slurm cluster, and the job still completes (the workflow fails open)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.conftest import Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(480)]


def test_second_exclusion_is_refused_and_the_job_fails_open(
    deploy: Callable[..., Deployment],
) -> None:
    """A tiny breaker (share 0.01 of 4 nodes: 1 node per window) and a cap of one remediation
    per node: whichever node the second job blames, excluding it is refused, by the breaker (a
    second node) or the per-node cap (the same node). Only this deployment's tags count, so
    other tests on the shared cluster do not interfere."""
    dep = deploy()
    dep.stack.stop("controller")
    # The cluster table is the last one in the file; replace any breaker settings already set.
    tiny = {"max_excluded_share": "0.01", "max_remediations_per_node": "1"}
    lines = [
        ln
        for ln in dep.stack.config.read_text().splitlines()
        if ln.split("=")[0].strip() not in tiny
    ]
    dep.stack.config.write_text(
        "\n".join([*lines, *(f"{k} = {v}" for k, v in tiny.items())]) + "\n"
    )
    dep.stack.start("controller")

    first = dep.submit(mode="action", fault="ecc", fault_rank="1")
    dep.wait_event(first, "completed", timeout=300)
    culprit = next(e for e in dep.events(first) if e.type == "attribution").data["culprit_nodes"]
    assert culprit and culprit[0] in dep.job(first).exc_node_list
    steps = [e.data["step"] for e in dep.events(first) if e.type == "action"]
    assert steps == ["requeue_hold", "exclude_nodes", "release"]

    second = dep.submit(mode="action", fault="ecc", fault_rank="1")
    dep.wait_event(second, "completed", timeout=300)
    events = dep.events(second)
    abandoned = next(e for e in events if e.type == "reconciliation")
    assert abandoned.data["status"] == "abandoned" and abandoned.data["step"] == "exclude_nodes"
    assert "circuit breaker" in abandoned.summary or "per-node cap" in abandoned.summary, (
        abandoned.summary
    )
    assert any("fail-open" in e.summary for e in events if e.type == "action")
    job = dep.job(second)
    assert job.state == "COMPLETED" and job.restarts == 1 and not job.held
    assert job.exc_node_list == []
