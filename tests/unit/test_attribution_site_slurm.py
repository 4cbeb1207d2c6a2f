"""The site's Slurm failing to launch a step: its MPI plugin wiring the step's processes, pyxis's
options unknown to srun, its SPANK plugins not loading. Every attempt goes through the same
configuration: system_software, stop until the site fixes it. Lines as srun and slurmstepd print
them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

NODES = ["node4", "node5"]
SCHED = "JobId=112 JobName=ddp\n   JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n   NodeList=node[4-5]\n"


@pytest.mark.parametrize(
    "error",
    [
        "srun: error: mpi/pmi2: failed to send temp kvs to compute nodes\nsrun: error: node5: tasks 4-7: Killed\nsrun: error: node4: tasks 0-3: Killed\n",
        "slurmstepd: error:  mpi/pmix_v5: _pmix_p2p_send_core: node4 [0]: pmixp_utils.c:408: Can't find address for host node5, check slurm.conf\nsrun: error: node5: tasks 4-7: Killed\n",
        "srun: unrecognized option '--container-image'\nTry \"srun --help\" for more information\n",
        "srun: error: spank: Failed to open /opt/slurm/etc/plugstack.conf.d/sed6Yj8Ga: Permission denied\nsrun: error: Plug-in initialization failed\n",
    ],
    ids=["pmi2", "pmix", "pyxis", "spank"],
)
def test_the_sites_slurm_failing_the_steps_launch_stops(error: str) -> None:
    a = attribute_text(
        "+ srun --mpi=pmix -n8 -N2 python -u train_ddp.py\n" + error, NODES, scheduler=SCHED
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, []), a.summary
    assert first_action(a) == "stop"


def test_srun_not_knowing_another_option_is_no_site_fault() -> None:
    a = attribute_text("srun: unrecognized option '--gpus-per-task'\n", NODES, scheduler=SCHED)
    assert first_action(a) != "stop"


# A step's CPU binding its allocation cannot satisfy (a nested srun inheriting SLURM_CPU_BIND):
# the step's own request, though srun names the node the launch failed on.
CPU_BIND = """\
srun: error: CPU binding outside of job step allocation, allocated CPUs are: 0x0000000F0000000F0000000F0000000F.
srun: error: Task launch for StepId=7993406.0 failed on node pool0-00509: Unable to satisfy cpu bind request
srun: error: Application launch failed: Unable to satisfy cpu bind request
srun: Job step aborted
"""


def test_a_cpu_binding_the_allocation_cannot_satisfy_is_the_steps_own_request() -> None:
    a = attribute_text(CPU_BIND, ["pool0-00509", "pool0-00510"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, []), a.summary
    assert first_action(a) == "stop"


def test_a_task_launch_failing_on_a_node_for_its_own_reason_still_names_it() -> None:
    job = CPU_BIND.replace("Unable to satisfy cpu bind request", "Communication connection failure")
    a = attribute_text(job, ["pool0-00509", "pool0-00510"])
    assert a.culprit_nodes == ["pool0-00509"], a.summary
