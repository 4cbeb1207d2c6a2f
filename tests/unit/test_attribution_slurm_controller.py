"""Slurm failing to serve the job: its controller unreachable when srun confirms the allocation,
or an allocation that never came within salloc's --immediate window. No node and no code to
blame: the scheduler's, resubmitted. Lines as srun and salloc print them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_lines import bundle_verdict


@pytest.mark.parametrize(
    "ending",
    [
        "srun: error: Unable to confirm allocation for job 60564: Unable to contact slurm controller (connect failure)\n"
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 60564\n",
        "[2026-08-20T14:53:15.902Z] srun: error: Unable to confirm allocation for job 1905624: Socket timed out on send/recv operation\n"
        "[2026-08-20T14:53:15.903Z] srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 1905624\n",
    ],
)
def test_srun_unable_to_reach_the_controller_is_the_schedulers(tmp_path: Path, ending: str) -> None:
    job = "Job Started at Thu Nov 18 13:21:07 EST 2021\n" + ending
    assert bundle_verdict(tmp_path, job) == ("crash", "scheduler", [], "requeue")


def test_an_allocation_that_never_came_is_resubmitted(tmp_path: Path) -> None:
    job = (
        "salloc: Pending job allocation 1690675\n"
        "salloc: job 1690675 queued and waiting for resources\n"
        "salloc: error: Unable to allocate resources: Connection timed out\n"
    )
    sacct = "JobID|JobName|State|ExitCode|Start\n1690675|nixl-ci|CANCELLED|0:0|Unknown\n"
    assert bundle_verdict(tmp_path, job, sacct) == ("crash", "scheduler", [], "requeue")


def test_an_invalid_request_is_no_controller_outage(tmp_path: Path) -> None:
    job = (
        "srun: error: Unable to allocate resources: Requested node configuration is not available\n"
    )
    assert bundle_verdict(tmp_path, job)[1:] != ("scheduler", [], "requeue")
