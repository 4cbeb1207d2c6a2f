"""Crash or hang when a node fault ends the job (attribution-labels.md, kind).

A rank killed by its node's fault (SIGBUS from a DIMM's uncorrected error) while only the other
ranks' collectives time out is a crash; output ending in the exceptions its ranks raised is a
crash; a job still RUNNING with no step since its fault is a hang. Lines as PyTorch, srun and
the kernel print them.
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.rules import attribute
from resurgo.contracts import AnomalyKind, Attribution
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(job: str, nodes: list[str], node_logs: dict[str, str] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], nodes,
        node_logs={n: _lines(t, f"journal_{n}.txt") for n, t in (node_logs or {}).items()},
    )  # fmt: skip


STEPS = "".join(f"0: iter {50 * i} | loss 2.7 | 813 ms/step\n" for i in range(1, 6))


def test_a_rank_killed_by_its_hosts_memory_error_is_a_crash() -> None:
    timeouts = "".join(
        f"{r}: [rank{r}]:[E1203 04:12:55.100000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9012, OpType=ALLREDUCE, NumelIn=16777216, NumelOut=16777216, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"
        for r in range(4)
    )
    # (one task per node under SLURM_JOB_NODELIST: task 4 is n5)
    death = "4: Fatal Python error: Bus error\nsrun: error: n5: task 4: Bus error (core dumped)\n"
    journal = (
        "Dec 03 04:02:18 n5 kernel: mce: [Hardware Error]: Machine check events logged\n"
        "Dec 03 04:02:18 n5 kernel: EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#1_Chan#0_DIMM#1\n"
        "Dec 03 04:02:18 n5 kernel: Memory failure: 0x3f1a22: Sending SIGBUS to python:99120 due to hardware memory corruption\n"
    )
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    a = _run("SLURM_JOB_NODELIST=n[1-5]\n" + STEPS + timeouts + death, nodes, {"n5": journal})
    assert "n5" in a.culprit_nodes
    assert a.kind == AnomalyKind.CRASH


def test_output_ending_in_the_ranks_raised_store_errors_is_a_crash() -> None:
    # pytorch/pytorch#121944: every agent loses the TCPStore when its host's NIC resets.
    ends = "".join(
        f"[tn-00{i}] torch.distributed.DistStoreError: Connection reset by peer (tn-001:29500)\n"
        for i in (2, 3, 4)
    )
    dmesg = "[Wed Dec  2 15:33:02 2026] NETDEV WATCHDOG: eno1 (ixgbe): transmit queue 5 timed out\n[Wed Dec  2 15:33:04 2026] ixgbe 0000:18:00.0 eno1: NIC Link is Down\n"
    a = _run(ends, ["tn-001", "tn-002", "tn-003", "tn-004"], {"tn-001": dmesg})
    assert a.kind == AnomalyKind.CRASH


# A port error NCCL's async thread logs and carries on past (transport/net_ib.cc), then the
# ranks' collectives stall until the watchdog: the job stayed stuck, a hang. (Lightning's bars,
# unprefixed lines, as one node's torchrun output under srun shows them.)
BARS = "".join(
    f"Epoch 0:  {k * 5}%|█| {k * 500}/20000 [00:{k * 4:02d}:57<02:35:22, 1.77it/s, v_num=3, train/loss=1.48]\n"
    for k in range(1, 13)
)
PORT_ERROR = (
    "h800-a2:7726:8352 [5] transport/net_ib.cc:108 NCCL WARN NET/IB : Got async event : port error\n"
    "h800-a2:7725:8349 [4] transport/net_ib.cc:108 NCCL WARN NET/IB : Got async event : port error\n"
)
WATCHDOG = (
    "".join(
        f"[rank{r}]:[E0421 10:11:45.766116217 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48877, OpType=ALLREDUCE, NumelIn=125829120, NumelOut=125829120, Timeout(ms)=600000) ran for 600029 milliseconds before timing out.\n"
        f"[rank{r}]:[E0421 10:11:45.455548565 ProcessGroupNCCL.cpp:630] [Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
        for r in (0, 8)
    )
    + "srun: error: h800-a1: task 0: Aborted (core dumped)\n"
)
NCCL_ERROR = (
    "[rank8]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5\n"
    "srun: error: h800-a2: task 1: Exited with exit code 1\n"
)


def test_a_port_error_the_ranks_then_wait_out_in_their_collectives_is_a_hang() -> None:
    a = _run(BARS + PORT_ERROR + WATCHDOG, ["h800-a1", "h800-a2"])
    assert (a.kind, a.culprit_nodes) == (AnomalyKind.HANG, ["h800-a2"]), a.summary


def test_a_port_error_followed_by_the_nccl_error_that_ended_the_rank_is_a_crash() -> None:
    a = _run(BARS + PORT_ERROR + NCCL_ERROR, ["h800-a1", "h800-a2"])
    assert (a.kind, a.culprit_nodes) == (AnomalyKind.CRASH, ["h800-a2"]), a.summary


# The watchdog's own abort: std::terminate after ProcessGroupNCCL's `what()`, then faulthandler's
# `Fatal Python error: Aborted` (a one-node torchrun job without rank prefixes).
def _watchdog_then_abort(gap: int) -> str:
    return (
        "".join(f"Training Epoch: 1/3, step {k}/1841 completed (loss: 1.44)\n" for k in range(15))
        + "[E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=388923, OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1804615 milliseconds before timing out.\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=388923, OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1804615 milliseconds before timing out.\n"
        + "  <no Python frame>\n"
        * gap
        + "Fatal Python error: Aborted\n"
        "[2023-08-29 10:33:33,904] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) local_rank: 0 (pid: 41187) of binary: /venv/bin/python\n"
        "srun: error: eu-g4-021: task 0: Exited with exit code 1\n"
    )


def test_the_watchdogs_own_abort_after_its_timeout_is_the_hangs_consequence() -> None:
    a = _run(_watchdog_then_abort(1), ["eu-g4-021"])
    assert a.kind == AnomalyKind.HANG, a.summary
