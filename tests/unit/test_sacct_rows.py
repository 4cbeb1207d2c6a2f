"""sacct's rows as operators paste them, and the job's nodes they give (sacct(1): `--format`,
fixed-width output unless `-P`; heterogeneous jobs list one row per component, `ID+N`)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle
from resurgo.attribute.scheduler import parse_scheduler
from tests.log_lines import log_lines as _lines

MID_ROW = """\
$ sacct -j 4419021 --format=JobID,JobName,Partition,NodeList,Start,End,State,ExitCode
JobID          JobName       Partition NodeList                             Start                 End          State ExitCode
-------------- ------------ ---------- ---------------------- ------------------- ------------------- -------------- --------
4419021        ctseg-hvd           gpu lx-gpu-[21-24]         2015-11-26T14:02:11 2015-11-26T18:41:22         FAILED    134:0
"""
HETJOB = """\
$ sacct -j 9911220 --format=JobID,JobName,State,ExitCode,NodeList
JobID           JobName      State ExitCode        NodeList
------------ ---------- ---------- -------- ---------------
9911220+0      trainers     FAILED      1:0    gpu-h[01-02]
9911220+1      data-svc     FAILED      0:7         cpu-h03
"""


def test_a_node_list_column_left_of_state_is_read_from_its_column() -> None:
    facts = parse_scheduler(_lines(MID_ROW, "scheduler.txt"), 4419021, None)
    assert facts.job is not None
    assert facts.job.node_list == ["lx-gpu-21", "lx-gpu-22", "lx-gpu-23", "lx-gpu-24"]
    assert (facts.job.state, facts.job.exit_code) == ("FAILED", 134)


def test_a_heterogeneous_jobs_nodes_are_all_of_its_components() -> None:
    facts = parse_scheduler(_lines(HETJOB, "scheduler.txt"), 9911220, None)
    assert facts.job is not None
    assert facts.job.node_list == ["gpu-h01", "gpu-h02", "cpu-h03"]


def test_a_fault_on_a_node_outside_the_allocation_excludes_no_node(tmp_path: Path) -> None:
    """A storage head node's NIC failing (bnx2x, kernel drivers/net) while every job node
    loses the file system: nothing the next attempt could exclude."""
    (tmp_path / "scheduler.txt").write_text(MID_ROW)
    (tmp_path / "job.log").write_text(
        "[1,0]<stdout>:Epoch 30/80 - 556s - loss: 0.2300 - dice: 0.7900 - val_dice: 0.7600\n"
        "[1,0]<stderr>:OSError: [Errno 5] Input/output error: '/gpfs/proj/ctseg/npy/case_03118.npy'\n"
        "[1,5]<stderr>:OSError: [Errno 116] Stale file handle: '/gpfs/proj/ctseg/npy/case_00912.npy'\n"
        "mpirun noticed that process rank 0 with PID 48211 on node lx-gpu-21 exited on signal 6 (Aborted).\n"
    )
    (tmp_path / "syslog_hn01.txt").write_text(
        "Nov 26 18:39:52 hn01 kernel: bnx2x 0000:41:00.0 em3: NIC Link is Down\n"
        "Nov 26 18:40:31 hn01 kernel: bnx2x 0000:41:00.0 em3: NIC Link is Up, 10000 Mbps full duplex, Flow control: none\n"
    )
    v = analyse_bundle(tmp_path).as_json()
    assert v["culprit_nodes"] == []
    assert v["action"] != "requeue_excluding_nodes"


def test_a_job_name_with_a_blank_shifts_no_word_into_the_node_list() -> None:
    shifted = MID_ROW.replace("ctseg-hvd          ", "ct seg hvd         ")
    facts = parse_scheduler(_lines(shifted, "scheduler.txt"), 4419021, None)
    # (the row's last hostlist still names the job's nodes; never a word the blank shifted in)
    assert facts.job is not None
    assert all(any(ch.isdigit() for ch in node) for node in facts.job.node_list)


# `sacct -n` (or a paste that lost the header): the command's --format names the columns.
NO_HEADER = """\
$ sacct -n -j 993071 --format=JobID,State,ExitCode%10,Elapsed,NodeList%20
993071        NODE_FAIL      0:0   00:03:12 gpu-8x-05
993071.batch  CANCELLED     0:15   00:03:12 gpu-8x-05
"""


def test_rows_without_a_header_take_their_columns_from_the_commands_format() -> None:
    facts = parse_scheduler(_lines(NO_HEADER, "scheduler.txt"), 993071, None)
    assert facts.job is not None
    assert (facts.job.state, facts.job.node_list) == ("NODE_FAIL", ["gpu-8x-05"])
    # (`-o` spells the same option)
    short = NO_HEADER.replace("--format=", "-o ")
    facts = parse_scheduler(_lines(short, "scheduler.txt"), 993071, None)
    assert facts.job is not None and facts.job.state == "NODE_FAIL"


def test_a_sacct_command_without_a_format_gives_no_columns() -> None:
    text = NO_HEADER.replace(" --format=JobID,State,ExitCode%10,Elapsed,NodeList%20", "")
    assert parse_scheduler(_lines(text, "scheduler.txt"), 993071, None).job is None
