"""Launches that never reach training: who is waiting for whom.

torch.distributed's store-based barrier messages as distributed_c10d.py `_store_based_barrier`
prints them (quoted in pytorch/pytorch issues about `Timed out initializing process group in
store based barrier`); srun's exit lines as Slurm prints them.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["v100-g07", "v100-g08"]
PREFIX = "INFO:torch.distributed.distributed_c10d:"


def _run(job: str) -> Attribution:
    return attribute(Registry.default(), None, _lines(job), None, [], NODES)


def _waiting(ranks: range, world: int, count: int) -> str:
    return "".join(
        f"{PREFIX}Waiting in store based barrier to initialize process group for rank: {r}, "
        f"key: store_based_barrier_key:1 (world_size={world}, worker_count={count}, "
        "timeout=0:30:00)\n"
        for r in ranks
    )


def _timed_out(ranks: range, world: int, count: int) -> str:
    return "".join(
        f"RuntimeError: Timed out initializing process group in store based barrier on rank: "
        f"{r}, for key: store_based_barrier_key:1 (world_size={world}, worker_count={count}, "
        "timeout=0:30:00)\n"
        for r in ranks
    )


SRUN_EXITS = (
    "srun: error: v100-g07: tasks 0-7: Exited with exit code 1\n"
    "srun: error: v100-g08: tasks 8-15: Exited with exit code 1\n"
)


def test_every_started_process_waiting_for_a_larger_world_is_the_jobs_launch() -> None:
    # WORLD_SIZE=32 exported by the job script, 16 tasks started: all 16 wait, then time out.
    job = _waiting(range(0, 16, 8), 32, 16) + _timed_out(range(0, 16, 3), 32, 16) + SRUN_EXITS
    a = _run(job)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_launch_on_the_batch_host_only_idles_until_the_time_limit_and_stops() -> None:
    # No srun: only the batch host's 8 workers exist for a world of 16.
    job = "".join(
        f"{PREFIX}Added key: store_based_barrier_key:1 to store for rank: {r}\n" for r in range(8)
    )
    job += _waiting(range(8), 16, 8) * 3
    job += (
        "slurmstepd: error: *** JOB 3340917 ON v100-g07 CANCELLED AT 2024-01-09T12:00:23 DUE "
        "TO TIME LIMIT ***\n"
    )
    a = _run(job)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert default_advice(a).kind == AdviceKind.STOP


def test_workers_still_arriving_or_a_started_process_missing_is_not_the_jobs_count() -> None:
    # The count moved: workers were still joining (a slow node), not a wrong world size.
    arriving = _waiting(range(2), 16, 8) + _waiting(range(2), 16, 12) + SRUN_EXITS
    # 16 tasks started but only 8 reached the barrier: some started processes are missing.
    missing = _waiting(range(0, 8, 4), 16, 8) + _timed_out(range(0, 8, 4), 16, 8) + SRUN_EXITS
    for job in (arriving, missing):
        a = _run(job)
        assert a.category != Category.APPLICATION
        assert default_advice(a).kind != AdviceKind.STOP


# debugpy's own warning when started with frozen modules, then srun's time-limit lines.
DEBUGPY = (
    "+ srun -l python -m debugpy --listen 127.0.0.1:6679 --wait-for-client -m "
    "torch.distributed.run --nnodes 2 --nproc_per_node 8 src/train_long.py\n"
    "0: 0.00s - Debugger warning: It seems that frozen modules are being used, which may\n"
    "1: 0.00s - Debugger warning: It seems that frozen modules are being used, which may\n"
    "slurmstepd: error: *** JOB 66120 ON v100-g07 CANCELLED AT 2024-07-03T19:41:07 DUE TO TIME "
    "LIMIT ***\n"
    "srun: error: v100-g07: task 0: Killed\n"
    "srun: error: v100-g08: task 1: Killed\n"
)


def test_a_job_waiting_for_a_debugger_until_its_time_limit_is_the_jobs_and_stops() -> None:
    a = _run(DEBUGPY)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_debugged_job_that_trained_until_its_time_limit_is_only_cut_short() -> None:
    steps = "".join(
        f"0: [2024-07-03 08:{m:02d}:00] iteration {m * 10} | elapsed time per iteration (ms): "
        "6000.0\n"
        for m in range(10, 60)
    )
    job = DEBUGPY.replace("slurmstepd", steps + "slurmstepd").replace("19:41:07", "09:00:07")
    a = _run(job)
    assert a.category == Category.SCHEDULER
    assert default_advice(a, max_iteration=590).kind == AdviceKind.REQUEUE


def test_a_run_killed_to_be_requeued_and_pending_again_is_the_schedulers_requeue() -> None:
    # slurmstepd's `DUE TO JOB REQUEUE` lines end the output; scontrol shows the job PENDING
    # with Restarts=1 (the new run has printed nothing yet).
    job = "".join(
        f"0: [2024-11-05 11:{m:02d}:00] iteration {m * 10} | elapsed time per iteration (ms): "
        "6000.0\n"
        for m in range(10, 30)
    ) + "".join(
        f"{prefix}slurmstepd: error: *** {what} ON v100-g07 CANCELLED AT 2024-11-05T11:35:00 "
        "DUE TO JOB REQUEUE ***\n"
        for prefix, what in [("", "JOB 7712301"), ("0: ", "STEP 7712301.0")]
    )
    scheduler = _lines(
        "$ scontrol show job 7712301\nJobId=7712301 JobName=llama-z3\n"
        "   JobState=PENDING Reason=BeginTime Dependency=(null)\n"
        "   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
    )
    a = attribute(Registry.default(), None, _lines(job), None, [], NODES, scheduler_lines=scheduler)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)
    assert default_advice(a).kind == AdviceKind.REQUEUE
