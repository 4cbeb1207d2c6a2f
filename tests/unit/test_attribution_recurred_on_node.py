"""A note that earlier failures of this kind all had one of this run's nodes: that node's
hardware, left out. Lines as E3SM/SCREAM and srun print them; notes as sites keep the history."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

NODES = ["nid06215", "nid06216", "nid06217"]
JOB = """\
7436: ERROR: validate: tau/ssa values out of range
7436: MPICH ERROR [Rank 7436] [job id 4410722.0] [nid06217] - Abort(1) (rank 7436 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 7436
srun: error: nid06217: task 7436: Exited with exit code 1
"""
SCHED = "JobId=4410722 JobName=ne1024\n   JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n   NodeList=nid0621[5-7]\n"


@pytest.mark.parametrize(
    "note",
    [
        "# case history: five ne1024 jobs since May failed with 'validate: tau/ssa values out of range'; in each the failing rank was on nid06217\n",
        "# earlier jobs of this case that hit the same class of init errors all had nid06217 or nid008122 in the allocation\n",
    ],
)
def test_failures_that_all_had_one_of_this_runs_nodes_are_its_hardware(note: str) -> None:
    a = attribute_text(note + JOB, NODES, scheduler=SCHED)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["nid06217"]), a.summary
    assert first_action(a) == "requeue_excluding_nodes"


@pytest.mark.parametrize(
    "note",
    [
        # (the failure followed the job to other nodes: not this node's)
        "# all earlier runs failed the same way on different nodes, nid06217 among them\n",
        # (no history of failures, only where the job ran)
        "# all jobs of this case run on nid06217 and its neighbours\n",
        # (two of this run's nodes named: none stands out)
        "# each failing job had nid06216 or nid06217 in the allocation\n",
    ],
)
def test_notes_short_of_one_node_in_every_failure_leave_the_verdict(note: str) -> None:
    a = attribute_text(note + JOB, NODES, scheduler=SCHED)
    assert a.category not in (Category.HARDWARE_HOST, Category.HARDWARE_GPU), a.summary


ONE_GPU = """\
Train Epoch: 1 [1920/60000 (3%)]\tLoss: 2.080935
RuntimeError: CUDA error: an illegal memory access was encountered
srun: error: dl-ws05: task 0: Exited with exit code 1
"""
WORKSTATION = "JobId=3310 JobName=mnist\n   JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n   NodeList=dl-ws05\n"


def test_a_one_node_job_failing_every_attempt_on_this_gpu_and_running_elsewhere_is_its_gpu() -> (
    None
):
    note = "# operator note: the unmodified example fails like this on every attempt on this GPU, at varying points early in epoch 1; the same script runs to completion on other machines.\n"
    a = attribute_text(note + ONE_GPU, ["dl-ws05"], scheduler=WORKSTATION)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["dl-ws05"]), a.summary
    assert first_action(a) == "requeue_excluding_nodes"


@pytest.mark.parametrize(
    "note",
    [
        # (no word that the job ran anywhere else)
        "# operator note: it fails like this on every attempt on this GPU.\n",
        # (it failed elsewhere too: the job's)
        "# operator note: it fails on every attempt on this GPU and on other machines too.\n",
    ],
)
def test_this_gpu_without_the_job_running_elsewhere_names_nothing(note: str) -> None:
    a = attribute_text(note + ONE_GPU, ["dl-ws05"], scheduler=WORKSTATION)
    assert a.category != Category.HARDWARE_GPU, a.summary
