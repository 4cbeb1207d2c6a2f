"""Jobs that waited: for a world larger than they launched, for a node whose step never ran,
for a store whose host's NIC hung; and jobs that only look silent (an operator's note says
when they were last seen running, or that every rank printed what the log abridges).

Real formats: sacct's per-step rows (MaxRSS, AveCPU), c10d's heartbeat warning and watchdog
report (ProcessGroupNCCL.cpp), ixgbe's NETDEV WATCHDOG, Megatron's iteration line, Ray and
vLLM's placement-group wait (vllm/executor/ray_utils.py)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

# --- a world larger than launched, declared in init_process_group's arguments ------------
WORLD_JOB = "".join(
    f"{r}: [rank {r}] init_process_group(backend='nccl', init_method='env://', world_size=32, rank={r}, timeout=3:00:00)\n"
    for r in range(16)
) + (
    "slurmstepd: error: *** JOB 1187733 ON gpu017 CANCELLED AT 2024-10-22T22:00:09 DUE TO TIME LIMIT ***\n"
    "srun: error: gpu017: tasks 0-7: Terminated\n"
    "srun: error: gpu018: tasks 8-15: Terminated\n"
)
WORLD_SACCT = """\
JobID|State|ExitCode|Elapsed|NodeList
1187733|TIMEOUT|0:0|02:00:05|gpu[017-018]
1187733.0|CANCELLED|0:15|02:00:01|gpu[017-018]
"""


def test_every_launched_rank_waiting_for_a_larger_declared_world_is_the_jobs_launch() -> None:
    a = attribute_text(WORLD_JOB, ["gpu017", "gpu018"], scheduler=WORLD_SACCT)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert first_action(a) == "stop"


def test_a_world_the_launch_filled_is_not_short() -> None:
    full = WORLD_JOB.replace("world_size=32", "world_size=16")
    assert (
        attribute_text(full, ["gpu017", "gpu018"], scheduler=WORLD_SACCT).category
        != Category.APPLICATION
    )


# --- a node whose step used nothing, while the others waited until the time limit --------
RAY_JOB = """\
0: 2025-10-08 08:00:23,018	SUCC scripts.py:903 -- Ray runtime started.
1: [2025-10-08 08:00:40,285] SUCC scripts.py:1064 -- Ray runtime started.
2: [2025-10-08 08:00:45,782] SUCC scripts.py:1064 -- Ray runtime started.
(EngineCore_DP0 pid=1184677) INFO 10-08 08:02:51 [ray_utils.py:464] Waiting for creating a placement group of specs for 10 seconds. specs=[{'node:10.3.0.41': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.
slurmstepd: error: *** JOB 9013377 ON gn41 CANCELLED AT 2025-10-08T12:00:22 DUE TO TIME LIMIT ***
"""
RAY_SACCT = """\
JobID|JobName|State|ExitCode|Elapsed|NodeList|MaxRSS|AveCPU
9013377|vllm-405b|TIMEOUT|0:0|04:00:17|gn[41-44]||
9013377.batch|batch|CANCELLED|0:15|04:00:17|gn41|1203344K|00:03:11
9013377.extern|extern|COMPLETED|0:0|04:00:17|gn[41-44]|0|00:00:00
9013377.0|ray|CANCELLED|0:15|03:59:59|gn41|6811232K|00:41:07
9013377.1|ray|CANCELLED|0:15|03:59:44|gn42|4410916K|00:12:55
9013377.2|ray|CANCELLED|0:15|03:59:39|gn43|4398008K|00:12:41
9013377.3|ray|CANCELLED|0:15|03:59:34|gn44|0|00:00:00
"""
NODES = ["gn41", "gn42", "gn43", "gn44"]


def test_a_step_that_used_no_cpu_or_memory_names_its_node_as_never_started() -> None:
    a = attribute_text(RAY_JOB, NODES, scheduler=RAY_SACCT)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.UNKNOWN, ["gn44"])
    assert first_action(a) == "requeue_excluding_nodes"
    assert any("9013377.3" in e.text for e in a.evidence)


def test_fixed_width_sacct_rows_say_the_same() -> None:
    fixed = """\
       JobID    JobName      State ExitCode    Elapsed        NodeList     MaxRSS     AveCPU
------------ ---------- ---------- -------- ---------- --------------- ---------- ----------
9013377.0           ray  CANCELLED     0:15   03:59:59            gn41   6811232K   00:41:07
9013377.1           ray  CANCELLED     0:15   03:59:44            gn42   4410916K   00:12:55
9013377.2           ray  CANCELLED     0:15   03:59:39            gn43   4398008K   00:12:41
9013377.3           ray  CANCELLED     0:15   03:59:34            gn44          0   00:00:00
"""
    assert attribute_text(RAY_JOB, NODES, scheduler=fixed).culprit_nodes == ["gn44"]


def test_every_step_busy_or_every_step_idle_names_no_node() -> None:
    busy = RAY_SACCT.replace("|gn44|0|00:00:00", "|gn44|4401200K|00:12:50")
    assert attribute_text(RAY_JOB, NODES, scheduler=busy).culprit_nodes == []
    idle = "\n".join(
        ln.replace("|6811232K|00:41:07", "|0|00:00:00").replace("|4410916K|00:12:55", "|0|00:00:00")
        .replace("|4398008K|00:12:41", "|0|00:00:00")
        for ln in RAY_SACCT.splitlines()
    )  # fmt: skip
    assert attribute_text(RAY_JOB, NODES, scheduler=idle).culprit_nodes == []


# --- a store warning before the watchdog: the rank was alive, the job hung ---------------
STORE_HOST_JOB = """\
0: {'loss': 0.8128, 'grad_norm': 0.8800, 'learning_rate': 1.5e-05, 'epoch': 0.97}
1: [rank8]:[W1022 14:23:25.619604678 ProcessGroupNCCL.cpp:1437] [PG ID 0 PG GUID 0(default_pg) Rank 8] Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Connection reset by peer
2: [rank16]:[W1022 14:23:29.500386446 ProcessGroupNCCL.cpp:1437] [PG ID 0 PG GUID 0(default_pg) Rank 16] Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Connection reset by peer
1: [rank9]:[E1022 14:32:51.778945140 ProcessGroupNCCL.cpp:632] [Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=61877, OpType=REDUCE_SCATTER, NumelIn=94633984, NumelOut=94633984, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
1: [rank8]:[E1022 14:32:51.778945140 ProcessGroupNCCL.cpp:632] [Rank 8] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=61877, OpType=REDUCE_SCATTER, NumelIn=94633984, NumelOut=94633984, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
2: [rank16]:[E1022 14:32:51.623653554 ProcessGroupNCCL.cpp:632] [Rank 16] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=61877, OpType=REDUCE_SCATTER, NumelIn=94633984, NumelOut=94633984, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.
srun: error: gpu-l40s-2: task 1: Exited with exit code 1
srun: error: gpu-l40s-3: task 2: Exited with exit code 1
srun: error: gpu-l40s-1: task 0: Exited with exit code 1
"""
NIC_HANG = """\
[Wed Oct 22 14:22:06 2025] ixgbe 0000:3b:00.0 eno1: NETDEV WATCHDOG: CPU: 17: transmit queue 3 timed out 5344 ms
[Wed Oct 22 14:22:07 2025] ixgbe 0000:3b:00.0 eno1: NIC Link is Down
"""
L40S = ["gpu-l40s-1", "gpu-l40s-2", "gpu-l40s-3"]


def test_a_store_warning_before_the_ranks_watchdog_timeouts_leaves_the_job_hung() -> None:
    a = attribute_text(STORE_HOST_JOB, L40S, node_files={"dmesg_gpu-l40s-1": NIC_HANG})
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.HANG, Category.HARDWARE_NETWORK, ["gpu-l40s-1"],
    )  # fmt: skip


def test_a_store_error_that_ends_the_rank_keeps_the_crash() -> None:
    died = STORE_HOST_JOB.replace(
        "1: [rank9]:[E1022 14:32:51",
        "1: torch.distributed.DistStoreError: Socket Timeout\n1: [rank9]:[E1022 14:32:51",
    ).replace(
        "Watchdog caught collective operation timeout",
        "Some NCCL operations have failed or timed out",
    )
    a = attribute_text(died, L40S, node_files={"dmesg_gpu-l40s-1": NIC_HANG})
    assert a.kind == AnomalyKind.CRASH


# --- an operator's note of when the job was seen running --------------------------------
def _megatron(minutes: list[int], note: str) -> str:
    lines = [
        f"7:  [2025-06-02 {12 + m // 60:02d}:{m % 60:02d}:35] iteration {i + 1:8d}/  200000 | consumed samples: {512 * (i + 1)} | elapsed time per iteration (ms): 76445.4 | lm loss: 2.593672E+00 |"
        for i, m in enumerate(minutes)
    ]
    return "\n".join([*lines, note]) + "\n"


SQUEUE = """\
             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
           9912047     hgx-c   gpt-40b  dwinters  R    1:30:51      2 hgx-c[33-34]
"""


def test_a_note_of_the_clock_the_job_was_seen_running_at_is_when_it_was_seen() -> None:
    # The run time from the first line overshoots (the job started before it printed): the
    # note says it was seen at 13:05, half a minute before its last step.
    steps = list(range(0, 66, 1))
    a = attribute_text(
        _megatron(steps, "# operator: job still running at 13:05 (squeue R)"),
        ["hgx-c33", "hgx-c34"],
        scheduler=SQUEUE,
    )
    assert a.kind == "none"


def test_without_the_clock_the_overshooting_estimate_still_reads_as_silence() -> None:
    steps = list(range(0, 66, 1))
    a = attribute_text(
        _megatron(steps, "# operator: job still running (squeue R)"),
        ["hgx-c33", "hgx-c34"],
        scheduler=SQUEUE,
    )
    assert a.kind == AnomalyKind.HANG


# --- an abridged log whose note says every rank printed the same ------------------------
def test_every_one_of_the_ranks_printed_it_leaves_no_rank_silent() -> None:
    timeouts = "".join(
        f"{t}: [rank{t * 8}]:[E603 17:48:01.795324695 ProcessGroupNCCL.cpp:632] [Rank {t * 8}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2398459, OpType=ALLREDUCE, NumelIn=8652160, NumelOut=8652160, Timeout(ms)=1800000) ran for 1800036 milliseconds before timing out.\n"
        for t in (0, 3)
    )
    nodes = [f"hgx-h200-{i:02d}" for i in range(1, 7)]
    note = "# operator: every one of the 48 ranks printed the same watchdog timeout for SeqNum=2398459 within 2 s; 46 further ranks elided\n"
    assert attribute_text(timeouts + note, nodes).culprit_nodes == []
    assert attribute_text(timeouts, nodes).culprit_nodes != []
