"""Lifecycle verdicts: stragglers caused by the code vs a node, and Slurm's own events.

Line formats (public sources):
- Megatron-LM `training_log` (megatron/training/training.py) and `Timers` `times across ranks
  (ms):` tables (megatron/core/timers.py, `--timing-log-option all`).
- NVRx straggler report (NVIDIA/nvidia-resiliency-ext): `Rank=12 Node=gpu002 Score=0.55`.
- torch._dynamo (torch/_dynamo/convert_frame.py): `torch._dynamo hit config.cache_size_limit (8)`.
- nvidia-smi -q (NVIDIA nvidia-smi(1)): `Applications Clocks Setting : Active`.
- slurmstepd (SchedMD/slurm src/slurmd/slurmstepd/req.c): `*** JOB 77 ON gpu001 CANCELLED AT
  2025-06-11T14:00:05 DUE TO TIME LIMIT ***`; `*** STEP 77.0 ON ... DUE TO TIME LIMIT ***`.
- sacct (slurm.schedmd.com/sacct.html): `JobID State ExitCode` tables; `-D` prints one row per
  requeued run (PREEMPTED / REQUEUED, then PENDING); the `Suspended` column.
- slurmctld (src/slurmctld/proc_req.c): `_slurm_rpc_suspend(suspend) for 77`; `error: Nodes
  gpu002 not responding, setting DOWN`.
- PyTorch ProcessGroupNCCL watchdog (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).
"""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle

RUNNING = (
    "JobId=77 JobName=pretrain UserId=alice(1000) JobState=RUNNING Reason=None ExitCode=0:0 "
    "RunTime=00:04:00 StartTime=2025-06-11T08:00:00 EndTime=Unknown NodeList=gpu[001-002] "
    "NumNodes=2 NumTasks=16\n"
)


def verdict(tmp_path: Path, job_log: str, scheduler: str, **node_files: str) -> tuple:  # type: ignore[type-arg]
    (tmp_path / "job.log").write_text(job_log)
    (tmp_path / "scheduler.txt").write_text(scheduler)
    for name, text in node_files.items():
        (tmp_path / f"{name}.txt").write_text(text)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]


def steps(first: int, n: int, stamp: str | None = None) -> str:
    return "".join(
        f"{'[' + stamp + f':{i % 60:02d}] ' if stamp else ''} iteration {i:8d}/  100000 | "
        f"elapsed time per iteration (ms): 3112.{i % 10} | lm loss: 5.1E+00 |\n"
        for i in range(first, first + n)
    )


def nvrx(rank: int, node: str, score: float) -> str:
    return (
        "GPU relative performance:\n Worst performing 1/16 ranks:\n"
        f"   Rank={rank} Node={node} Score={score}\n"
    )


class TestStragglers:
    def test_only_rank_0_slow_is_the_application_left_running(self, tmp_path: Path) -> None:
        # Rank 0 shares gpu001 with ranks 1-7 (NVRx prints them): its extra work (logging,
        # evaluation, checkpoint I/O) is the code's, not the node's.
        best = "   Rank=3 Node=gpu001 Score=1.00\n"
        log = "".join(steps(10 * k, 5) + nvrx(0, "gpu001", 0.6) + best for k in range(4))
        assert verdict(tmp_path, log, RUNNING) == ("straggler", "application", [], "none")

    def test_recompilation_on_the_slow_rank_is_the_application(self, tmp_path: Path) -> None:
        dynamo = (
            "[rank12]:W0611 08:02:11.000000 140 torch/_dynamo/convert_frame.py:844] "
            "torch._dynamo hit config.cache_size_limit (8)\n"
        )
        log = "".join(steps(10 * k, 5) + nvrx(12, "gpu002", 0.55) for k in range(4)) + dynamo
        assert verdict(tmp_path, log, RUNNING) == ("straggler", "application", [], "none")

    def test_a_slow_nodes_locked_clocks_are_its_system_software(self, tmp_path: Path) -> None:
        # Fails before node diagnostics were read for stragglers (category unknown).
        log = "".join(steps(10 * k, 5) + nvrx(12, "gpu002", 0.55) for k in range(4))
        smi = (
            "GPU 00000000:18:00.0\n    Clocks Event Reasons\n        Idle      : Not Active\n"
            "        Applications Clocks Setting       : Active\n"
        )
        got = verdict(tmp_path, log, RUNNING, node_gpu002=smi)
        assert got == ("straggler", "system_software", ["gpu002"], "requeue_excluding_nodes")

    def test_a_port_below_its_siblings_rate_is_the_network(self, tmp_path: Path) -> None:
        log = "".join(steps(10 * k, 5) + nvrx(12, "gpu002", 0.55) for k in range(4))
        ibstat = (
            "CA 'mlx5_0'\n\t\tRate: 400\nCA 'mlx5_1'\n\t\tRate: 200\nCA 'mlx5_2'\n\t\tRate: 400\n"
        )
        got = verdict(tmp_path, log, RUNNING, node_gpu002=ibstat)
        assert got[:3] == ("straggler", "hardware_network", ["gpu002"])

    def test_timer_ranks_placed_node_major_from_the_table_width(self, tmp_path: Path) -> None:
        # No task count anywhere: 16 ranks in the table on 4 nodes put ranks 12-15 on gpu004
        # (node index x ranks per node + local rank). Fails without the node-major fallback.
        sched = RUNNING.replace(" NumTasks=16", "").replace(
            "gpu[001-002] NumNodes=2", "gpu[001-004] NumNodes=4"
        )
        rows = "".join(f"     rank {r:2d}: {300.0 if r >= 12 else 2.0:.2f}\n" for r in range(16))
        table = f"times across ranks (ms):\n  batch-generator:\n{rows}"
        log = "".join(steps(10 * k, 5) + table for k in range(4))
        assert verdict(tmp_path, log, sched)[:3] == ("straggler", "unknown", ["gpu004"])


def sacct(*rows: str, header: str = "JobID State ExitCode") -> str:
    return f"$ sacct -j 77\n{header}\n------------ ---------- --------\n" + "".join(
        r + "\n" for r in rows
    )


class TestSchedulerEvents:
    def test_a_node_failure_known_only_from_slurm_is_the_scheduler_and_excluded(
        self, tmp_path: Path
    ) -> None:
        # Fails on HEAD: called hardware_host with no hardware evidence.
        log = steps(1, 20) + (
            "srun: error: Node failure on gpu002\n"
            "slurmstepd: error: *** JOB 77 ON gpu001 CANCELLED AT 2025-06-11T09:10:00 DUE TO "
            "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
        )
        sched = sacct("77 NODE_FAIL 0:0") + (
            "[2025-06-11T09:09:51.005] error: Nodes gpu002 not responding, setting DOWN\n"
        )
        got = verdict(tmp_path, log, sched)
        assert got == ("crash", "scheduler", ["gpu002"], "requeue_excluding_nodes")

    def test_boot_fail_names_no_node_and_requeues(self, tmp_path: Path) -> None:
        log = "# collector: the batch script never started on any node\n"
        got = verdict(tmp_path, log, sacct("77 BOOT_FAIL 1:0"))
        assert got == ("crash", "scheduler", [], "requeue")

    def test_a_preempted_run_followed_by_pending_is_requeued(self, tmp_path: Path) -> None:
        log = steps(1, 20) + "Main process received SIGTERM, exiting\n"
        got = verdict(tmp_path, log, sacct("77 PREEMPTED 0:0", "77 PENDING 0:0"))
        assert got == ("crash", "scheduler", [], "requeue")

    def test_a_job_that_requeued_itself_runs_again(self, tmp_path: Path) -> None:
        # Fails on HEAD (a hang): Lightning's SLURMEnvironment requeues on SIGUSR1 before the
        # time limit (`scontrol requeue`); sacct -D shows REQUEUED runs, then PENDING.
        log = steps(1, 20) + (
            "Handling auto-requeue signal: 10\nRequeued SLURM job: 77\n"
            "slurmstepd: error: *** JOB 77 ON gpu001 CANCELLED AT 2025-06-11T13:58:48 DUE TO "
            "JOB REQUEUE ***\n"
        )
        got = verdict(tmp_path, log, sacct("77 REQUEUED 0:0", "77 REQUEUED 0:0", "77 PENDING 0:0"))
        assert got == ("crash", "scheduler", [], "requeue")

    def test_a_steps_own_time_limit_under_a_completed_job_is_the_scheduler(
        self, tmp_path: Path
    ) -> None:
        # Fails on HEAD (healthy): the batch script went on after srun and exited 0.
        log = steps(1, 20) + (
            "successfully saved checkpoint from iteration 20 to /ckpt\n"
            "slurmstepd: error: *** STEP 77.0 ON gpu001 CANCELLED AT 2025-06-11T12:00:05 DUE TO "
            "TIME LIMIT ***\n+ exit 0\n"
        )
        got = verdict(tmp_path, log, sacct("77 COMPLETED 0:0", "77.0 TIMEOUT 0:15"))
        assert got == ("crash", "scheduler", [], "requeue")

    def test_a_time_limit_with_no_checkpoint_ever_written_stops(self, tmp_path: Path) -> None:
        # Fails on HEAD (requeue): the resubmission would start over into the same limit.
        log = steps(1, 20) + (
            "slurmstepd: error: *** JOB 77 ON gpu001 CANCELLED AT 2025-06-11T14:00:05 DUE TO "
            "TIME LIMIT ***\n"
            "# collector: ls /ckpt/run -> total 0 (no checkpoint directory)\n"
        )
        assert verdict(tmp_path, log, sacct("77 TIMEOUT 0:0")) == ("crash", "scheduler", [], "stop")

    def test_a_time_limit_with_checkpoints_is_requeued(self, tmp_path: Path) -> None:
        log = steps(1, 20) + (
            "successfully saved checkpoint from iteration 20 to /ckpt\n"
            "slurmstepd: error: *** JOB 77 ON gpu001 CANCELLED AT 2025-06-11T14:00:05 DUE TO "
            "TIME LIMIT ***\n"
        )
        got = verdict(tmp_path, log, sacct("77 TIMEOUT 0:0"))
        assert got == ("crash", "scheduler", [], "requeue")

    def test_a_time_limit_hours_after_the_last_step_is_a_hang(self, tmp_path: Path) -> None:
        # Fails on HEAD (crash scheduler): progress stopped at 08:00, the kill came at 14:00.
        log = steps(1, 20, stamp="2025-06-11 08:00") + (
            "slurmstepd: error: *** JOB 77 ON gpu001 CANCELLED AT 2025-06-11T14:00:05 DUE TO "
            "TIME LIMIT ***\n"
        )
        got = verdict(tmp_path, log, sacct("77 TIMEOUT 0:0"))
        assert got == ("hang", "unknown", [], "requeue")

    def test_collective_timeouts_after_a_suspend_are_the_scheduler(self, tmp_path: Path) -> None:
        # Fails on HEAD: the watchdog counts the suspended time; nothing else failed.
        watchdog = "".join(
            f"[rank{r}]:[E0611 10:51:22.19 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=91, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 2439011 milliseconds before timing out.\n"
            for r in range(2)
        )
        sched = sacct("77 FAILED 1:0") + (
            "[2025-06-11T10:10:44.201] _slurm_rpc_suspend(suspend) for 77 usec=1432\n"
            "[2025-06-11T10:51:21.077] _slurm_rpc_suspend(resume) for 77 usec=988\n"
        )
        log = steps(1, 20) + watchdog + "srun: error: gpu001: task 0: Exited with exit code 1\n"
        assert verdict(tmp_path, log, sched) == ("crash", "scheduler", [], "requeue")
