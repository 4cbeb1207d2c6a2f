"""The earliest node fault in time decides, across a node's files (`fault_order`): the BMC's
event log (`ipmitool sel list` rows) against the kernel's time-stamped lines.

Lines as the NVIDIA driver (NVRM Xid 79, Xid catalogue) and ipmitool(1) `sel list` print them.
"""

from __future__ import annotations

from datetime import datetime

from resurgo.attribute.fault_order import sel_time
from resurgo.attribute.rules import attribute
from resurgo.contracts import Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["sg-43", "sg-44"]
JOB = "".join(f"0: iter {i} | loss 2.3 | 812 ms/step\n" for i in range(0, 500, 50)) + (
    "srun: error: sg-44: task 1: Exited with exit code 1\n"
)
XID = "[2026-12-03T05:40:03] NVRM: Xid (PCI:0000:ca:00): 79, pid=0, GPU has fallen off the bus.\n"


def _run(sel: str) -> Attribution:
    # (a bundle joins a node's files into one list, each line keeping its file's name)
    logs = {"sg-44": _lines(XID, "dmesg_sg-44.txt") + _lines(sel, "sel_sg-44.txt")}
    return attribute(
        Registry.default(), None, _lines(JOB, "job.log"), None, [], NODES, node_logs=logs
    )


def _sel(time: str) -> str:
    return (
        f" 1a3 | 12/03/2026 | {time} | Power Supply PS2 | Power Supply AC lost | Asserted\n"
        f" 1a4 | 12/03/2026 | {time} | Power Supply PS2 | Failure detected | Asserted\n"
    )


def test_a_power_supply_lost_before_the_gpu_fell_off_the_bus_is_the_hosts() -> None:
    a = _run(_sel("05:40:01"))
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["sg-44"])


def test_a_power_supply_event_after_the_xid_leaves_the_gpu_the_root() -> None:
    a = _run(_sel("05:52:40"))
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["sg-44"])


def test_sel_rows_carry_their_time() -> None:
    row = " 4a1 | 07/21/2026 | 16:20:44 | Memory #0x87 | Uncorrectable ECC (@DIMM C1) | Asserted"
    assert sel_time(row) == datetime(2026, 7, 21, 16, 20, 44)
    assert sel_time("   3 | 07/21/2026 | 04:20:44 PM | Fan #0x30 | Lower Critical going low") == (
        datetime(2026, 7, 21, 16, 20, 44)
    )
    assert sel_time("[2026-12-03T05:40:03] NVRM: Xid (PCI:0000:ca:00): 79") is None


LOST = ["gx-20", "gx-21", "gx-22", "gx-23"]


def _watchdog(task: int, rank: int) -> str:
    return (
        f"[16:50:05] {task}: [rank{rank}]:[E ProcessGroupNCCL.cpp:1316] [Rank {rank}] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=61620, OpType=_ALLGATHER_BASE, "
        "Timeout(ms)=1800000) ran for 1800012 milliseconds before timing out.\n"
    )


SILENT_NODE = (
    "[16:20:01] 0: iter 7700 | lm loss 2.38 | 1.91 s/it\n"
    "[16:20:03] 1: iter 7700 | lm loss 2.38 | 1.92 s/it\n"
    + _watchdog(0, 0) + _watchdog(1, 4) + _watchdog(3, 12)
    + "[16:50:20] srun: error: Node failure on gx-22\n"
    "[16:50:20] srun: error: gx-20: task 0: Aborted\n"
)  # fmt: skip
SLURMCTLD = (
    "[2026-07-21T16:25:51] error: Nodes gx-22 not responding\n"
    "[2026-07-21T16:50:19] Killing JobId=55120 on failed node gx-22\n"
)
DIMM_UE = " 4a1 | 07/21/2026 | 16:20:44 | Memory #0x87 | Uncorrectable ECC (@DIMM C1) | Asserted\n"
PANIC = "[Tue Jul 21 16:20:50 2026] Kernel panic - not syncing: Fatal machine check\n"


def _lost(node_file: str, text: str) -> Attribution:
    logs = {"gx-22": _lines(text, node_file)} if text else {}
    return attribute(
        Registry.default(), None, _lines(SILENT_NODE, "job.log"), None, [], LOST,
        node_logs=logs, scheduler_lines=_lines(SLURMCTLD, "scheduler.txt"),
    )  # fmt: skip


def test_a_node_its_hardware_left_silent_while_its_peers_waited_is_a_hang() -> None:
    a = _lost("sel_gx-22.txt", DIMM_UE)
    assert (a.kind, a.category, a.culprit_nodes) == ("hang", Category.HARDWARE_HOST, ["gx-22"])


def test_a_lost_node_whose_kernel_panicked_crashed_the_job() -> None:
    a = _lost("console_gx-22.txt", PANIC)
    assert (a.kind, a.category, a.culprit_nodes) == ("crash", Category.HARDWARE_HOST, ["gx-22"])


def test_a_node_failure_only_slurm_reports_is_its_kill_a_crash() -> None:
    a = _lost("", "")
    assert (a.kind, a.category, a.culprit_nodes) == ("crash", Category.SCHEDULER, ["gx-22"])
