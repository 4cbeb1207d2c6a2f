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


NODE_FAIL_JOB = (
    "[1,0]<stdout>:step 20 loss 2.31\n"
    "srun: error: Node failure on srv-4g-11\n"
    "slurmstepd: error: *** JOB 7712 ON srv-4g-11 CANCELLED AT 2018-03-06T13:58:40 DUE TO NODE "
    "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
)
SEL = (
    "$ ipmitool sel elist | tail -3\n"
    "  1f0 | 03/06/2018 | 13:58:02 | Current #0x94 | Upper Critical going high | Asserted\n"
    "  1f1 | 03/06/2018 | 13:58:02 | Power Supply #0x51 | Power Supply over-current (OCP) fault "
    "| Asserted\n"
)


def test_a_node_failure_with_its_bmc_logging_a_current_past_critical_is_the_host() -> None:
    """ipmitool's `sel elist`: a threshold sensor (IPMI 2.0 type 03h, Current) asserting its
    upper critical as the node dropped out: the chassis power, hardware_host."""
    logs = {"srv-4g-11": _lines(SEL, "sel_srv-4g-11.txt")}
    a = attribute(
        Registry.default(), None, _lines(NODE_FAIL_JOB, "job.log"), None, [], ["srv-4g-11"],
        node_logs=logs,
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["srv-4g-11"])
    cleared = {"srv-4g-11": _lines(SEL.replace("Asserted", "Deasserted"), "sel_srv-4g-11.txt")}
    b = attribute(
        Registry.default(), None, _lines(NODE_FAIL_JOB, "job.log"), None, [], ["srv-4g-11"],
        node_logs=cleared,
    )  # fmt: skip
    assert b.category == Category.SCHEDULER


def test_a_segfault_on_a_node_whose_memory_test_fails_is_the_hosts_ram() -> None:
    """stressapptest's verdict lines (google/stressapptest) in the node's own file."""
    job = (
        "1: Fatal Python error: Segmentation fault\n"
        "srun: error: ws-02: task 1: Segmentation fault (core dumped)\n"
    )
    sat = (
        "2026/01/15-10:20:45(KST) Stats: Found 1 hardware incidents\n"
        "2026/01/15-10:20:45(KST) Status: FAIL - test discovered HW problems\n"
    )
    nodes = ["ws-01", "ws-02"]
    a = attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], nodes,
        node_logs={"ws-02": _lines(sat, "node_ws-02.txt")},
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["ws-02"])
    passed = "2026/01/15-10:20:45(KST) Status: PASS - please verify no corrected errors\n"
    b = attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], nodes,
        node_logs={"ws-02": _lines(passed, "node_ws-02.txt")},
    )  # fmt: skip
    assert b.category != Category.HARDWARE_HOST
