"""Hangs the job's own code or launch caused are `hang application` (stop); a hang with no such
evidence stays unknown (requeue).

Lines in the formats PyTorch's ProcessGroupNCCL watchdog (ProcessGroupNCCL.cpp), vLLM's Ray
executor (vllm/executor/ray_utils.py, as quoted in vllm-project/vllm issues) and py-spy print.
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu21", "gpu22"]
CLEAN = "(no kernel messages in the job window)\n"


def _run(job: str, node_logs: dict[str, str] | None = None, scheduler: str = "") -> Attribution:
    logs = {n: _lines(t, f"dmesg_{n}.txt") for n, t in (node_logs or {}).items()}
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], NODES, node_logs=logs,
        scheduler_lines=_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip


def _watchdog(rank: int, op: str, numel_in: int, numel_out: int, seq: int = 21) -> str:
    return (
        f"[rank{rank}]:[E1203 16:17:41.002118222 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
        f"NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)=600000) ran for 600010 "
        "milliseconds before timing out.\n"
    )


ABORT = "srun: error: gpu21: task 1: Aborted (core dumped)\n"


def test_ranks_timed_out_in_different_collectives_are_the_jobs_deadlock() -> None:
    job = "".join(
        _watchdog(r, "BROADCAST", 1, 1) if r in (1, 6) else _watchdog(r, "ALLGATHER", 1, 8)
        for r in range(8)
    )
    a = _run(job + ABORT, {n: CLEAN for n in NODES})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert a.culprit_ranks == [1, 6]
    assert default_advice(a).kind == AdviceKind.STOP


def test_one_all_reduce_of_different_sizes_at_one_sequence_number_is_a_mismatch() -> None:
    # Rank 0 evaluates alone and all-reduces one element while its peers enter the gradient
    # all-reduce (DDP) at the same sequence number.
    job = "".join(
        _watchdog(r, "ALLREDUCE", 1 if r == 0 else 25557032, 1 if r == 0 else 25557032, 6004)
        for r in range(8)
    )
    a = _run(job + ABORT, {n: CLEAN for n in NODES})
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert a.culprit_ranks == [0]


def test_every_rank_in_the_same_collective_is_a_hang_of_no_known_cause() -> None:
    job = "".join(_watchdog(r, "ALLREDUCE", 1048576, 1048576) for r in range(8) if r != 5)
    a = _run(job + ABORT, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION
    assert default_advice(a).kind != AdviceKind.STOP


def test_all_to_all_sizes_differ_by_rank_by_design() -> None:
    job = "".join(_watchdog(r, "ALLTOALL_BASE", 1000 + r, 1000 + r) for r in range(8) if r != 5)
    a = _run(job + ABORT, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION


RAY_SHORT = "WARNING 02-02 19:54:20 ray_utils.py:315] The number of required GPUs exceeds the total number of available GPUs in the placement group.\n"


def _pg_wait(seconds: int) -> str:
    specs = ", ".join(["{'GPU': 1.0, 'node:172.31.42.4': 0.001}"] + ["{'GPU': 1.0}"] * 15)
    return (
        f"INFO 02-02 19:54:30 ray_utils.py:212] Waiting for creating a placement group of specs "
        f"for {seconds} seconds. specs=[{specs}]. Check `ray status` to see if you have enough "
        "resources.\n"
    )


TIMEOUT = (
    "JobId=771902 JobName=vllm-405b\n   JobState=TIMEOUT Reason=TimeLimit\n"
    "   StartTime=2026-09-14T11:02:59 EndTime=2026-09-14T13:03:02\n   NodeList=gpu[21-22]\n"
)
KILLED = "slurmstepd: error: *** JOB 771902 ON gpu21 CANCELLED AT 2026-09-14T13:03:02 DUE TO TIME LIMIT ***\n"


def test_vllm_waiting_for_more_gpus_than_its_ray_cluster_has_is_the_launch() -> None:
    job = (
        "2026-09-14 11:03:02,411\tINFO worker.py:1888 -- Started a local Ray instance.\n"
        + RAY_SHORT
        + "".join(_pg_wait(s) for s in (10, 170, 490, 1090, 2290, 4690))
    )
    a = _run(job + KILLED, scheduler=TIMEOUT)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_placement_group_granted_after_the_warning_is_not_this() -> None:
    job = (
        RAY_SHORT + _pg_wait(10) + _pg_wait(30)
        + "INFO 02-02 19:55:40 api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8000\n"
    )  # fmt: skip
    a = _run(job + KILLED, scheduler=TIMEOUT)
    assert a.category != Category.APPLICATION


DUMP = """\
# py-spy on gpu22, one of 4 processes:
# Thread 688514 (idle): "MainThread"
#     wait (threading.py:306)
#     get (queue.py:179)
#     _try_get_data (torch/utils/data/dataloader.py:1011)
#     _get_data (torch/utils/data/dataloader.py:1163)
#     _next_data (torch/utils/data/dataloader.py:1207)
#     __next__ (torch/utils/data/dataloader.py:530)
#     evaluate (train.py:201)
# the other processes: broadcast (torch/distributed/distributed_c10d.py:1191) inside evaluate
slurmstepd: error: *** JOB 1528763 ON gpu21 CANCELLED AT 2022-05-01T06:10:44 ***
"""


def test_one_rank_waiting_on_its_dataloader_while_peers_wait_in_a_collective() -> None:
    a = _run(DUMP, {n: CLEAN for n in NODES})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_dataloader_stuck_behind_a_lustre_outage_is_not_the_code() -> None:
    lustre = "[Sun May  1 02:10:11 2022] LustreError: 11-0: scratch-OST0004-osc-ffff9a1c: operation ost_read to node 10.0.0.14@o2ib failed: rc = -107\n"
    a = _run(DUMP, {"gpu21": CLEAN, "gpu22": lustre})
    assert a.category != Category.APPLICATION


def _py_spy(pid: int, frames: list[str]) -> str:
    body = "".join(f"    {f}\n" for f in frames)
    return (
        f"Process {pid}: python train_cls.py --cfg cfg/vit_l.yaml\n"
        "Python v3.11.9 (/opt/conda/bin/python3.11)\n\n"
        f'Thread {pid} (idle): "MainThread"\n{body}'
    )


BARRIER = [
    "barrier (torch/distributed/distributed_c10d.py:4159)",
    "wrapper (torch/distributed/c10d_logger.py:83)",
    "save_best (train_cls.py:311)",
    "main (train_cls.py:402)",
]
ALL_REDUCE = [
    "all_reduce (torch/distributed/distributed_c10d.py:2501)",
    "wrapper (torch/distributed/c10d_logger.py:83)",
    "reduce_metrics (train_cls.py:264)",
    "main (train_cls.py:399)",
]
CANCEL = "slurmstepd: error: *** JOB 3310982 ON gpu21 CANCELLED AT 2026-12-01T05:52:03 ***\n"


def test_dumps_blocked_in_different_collectives_of_the_jobs_code_are_its_deadlock() -> None:
    job = _py_spy(88410, BARRIER) + _py_spy(40219, ALL_REDUCE) + CANCEL
    a = _run(job, {n: CLEAN for n in NODES})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_dumps_all_in_one_collective_at_one_place_are_not_a_mismatch() -> None:
    job = _py_spy(88410, ALL_REDUCE) + _py_spy(40219, ALL_REDUCE) + CANCEL
    a = _run(job, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION


def test_collectives_of_a_parallel_frameworks_groups_are_not_read_as_a_mismatch() -> None:
    # Megatron's tensor- and data-parallel groups: ranks wait in different groups' collectives
    # behind one lost rank.
    tp = ["all_reduce (torch/distributed/distributed_c10d.py:2501)",
          "_reduce (megatron/core/tensor_parallel/mappings.py:38)",
          "forward_step (pretrain_gpt.py:180)"]  # fmt: skip
    dp = ["reduce_scatter_tensor (torch/distributed/distributed_c10d.py:3377)",
          "start_grad_sync (megatron/core/distributed/param_and_grad_buffer.py:301)",
          "main (pretrain_gpt.py:240)"]  # fmt: skip
    a = _run(_py_spy(1, tp) + _py_spy(2, dp) + CANCEL, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION


# A main thread py-spy finds idle (off the CPU) in the job's own frame waits below Python on
# what that line calls: `with self._lock:` held by the job's own uploader thread, which waits
# on a full queue (a lock-order deadlock); the other ranks wait in all_reduce for it.
OWN_LOCK = ["flush (dit/utils/metrics_logger.py:141)", "log_step (dit/utils/metrics_logger.py:97)",
            "train_one_epoch (train.py:402)", "main (train.py:588)"]  # fmt: skip
RANK0 = ["_wait_for_work (torch/distributed/distributed_c10d.py:2288)",
         "all_reduce (torch/distributed/distributed_c10d.py:2288)",
         "_sync_grads (train.py:355)", "train_one_epoch (train.py:398)"]  # fmt: skip
LIMIT = "slurmstepd: error: *** JOB 3007281 ON gpu21 CANCELLED AT 2024-01-20T09:00:04 DUE TO TIME LIMIT ***\n"


def test_a_rank_idle_in_its_own_code_while_the_others_wait_in_a_collective_is_a_deadlock() -> None:
    job = _py_spy(77120, OWN_LOCK) + _py_spy(70012, RANK0) + LIMIT
    a = _run(job, {n: CLEAN for n in NODES})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert "metrics_logger.py:flush" in a.summary
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_rank_busy_on_the_cpu_in_its_own_code_is_not_read_as_waiting() -> None:
    # (`active`: computing, say a slow evaluation; the time limit found it still working)
    busy = _py_spy(77120, OWN_LOCK).replace("(idle)", "(active)")
    a = _run(busy + _py_spy(70012, RANK0) + LIMIT, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION


def test_one_sequence_number_in_two_process_groups_is_no_mismatch() -> None:
    # Sequence numbers count per process group (the watchdog's `PG ID n` names it).
    def pg_line(rank: int, pg: int, op: str) -> str:
        return (
            f"[rank{rank}]:[E1203 16:17:41.002118222 ProcessGroupNCCL.cpp:1642] [PG ID {pg} PG "
            f"GUID {pg} Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL("
            f"SeqNum=21, OpType={op}, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for "
            "600010 milliseconds before timing out.\n"
        )

    job = "".join(
        pg_line(r, 1 if r < 4 else 2, "ALLREDUCE" if r < 4 else "BROADCAST") for r in range(8)
    )
    a = _run(job + ABORT, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION
