"""A node's own Slurm state that fails every job it starts: the batch script gone from
slurmd's spool directory (slurmstepd's `execve(): <SlurmdSpoolDir>/job<id>/slurm_script: No such
file or directory`, slurmd's `Could not create job spool directory`)."""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

JOB = "slurmstepd: error: execve(): /tmp/slurmd/job00089/slurm_script: No such file or directory\n"
SLURMD = (
    "[2021-09-10T15:02:33.112] [89.batch] error: Could not create job spool directory "
    "/tmp/slurmd/job00089: No such file or directory\n"
    "[2021-09-10T15:02:33.113] [89.batch] error: execve(): /tmp/slurmd/job00089/slurm_script: "
    "No such file or directory\n"
)


def test_the_batch_script_missing_from_the_spool_is_the_nodes_slurm_state() -> None:
    logs = {"gq004": _lines(SLURMD, "slurmd_gq004.txt")}
    a = attribute(
        Registry.default(), None, _lines(JOB, "job.log"), None, [], ["gq004"], node_logs=logs
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gq004"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_without_the_nodes_own_log_the_node_is_not_named() -> None:
    a = attribute(Registry.default(), None, _lines(JOB, "job.log"), None, [], ["gq004"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, [])
