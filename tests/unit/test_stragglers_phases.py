"""Stragglers read from the job's own per-rank phase timers: which rank is slow, and whether
the phase it loses its time in is the GPU's (its node) or the job's own host-side work.

Line formats (public sources):
- Composer's console logger (mosaicml/composer loggers/console_logger.py): `[batch=20/20000]:`
  opens each logged batch when the run's duration is in batches.
- Horovod's stall inspector (horovod/common/stall_inspector.cc): `One or more tensors were
  submitted to be reduced, gathered or broadcasted by subset of ranks ...`, `Missing ranks:`,
  `0: [DistributedGradientTape_Allreduce/...]`.
- Per-rank timer lines and tables of a job's own Timer callback: `timing step 5 data=0.902s
  total=1.215s`, `per-rank ms/batch (fwd+bwd | callbacks): r0=1060|544 r1=1037|3`, a CSV with a
  `rank` column.

Knowledge: rank 0 does the job's extra work (logging, evaluation, sample generation) while the
others wait in the next collective (NVRx usage guide); attribution-labels.md: application-level
stragglers are `application`, action none while the job still runs.
"""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle
from resurgo.detect.progress import ProgressParser
from resurgo.detect.timing_fields import timing_fields

RUNNING = "# job still running\n"
CLEAN = "(no kernel messages in the job window)\n"


def verdict(tmp_path: Path, job_log: str, **files: str) -> tuple[str, str, list[str], str]:
    (tmp_path / "job.log").write_text(job_log)
    for name, text in files.items():
        (tmp_path / f"{name}.txt").write_text(text)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]


def test_composer_batch_progress_and_unit_carrying_fields() -> None:
    assert ProgressParser().parse("[batch=20/20000]:") == 20
    assert timing_fields("[rank2|node3] timing step 5 data=0.902s total=1.215s") == {
        "data": 902.0, "total": 1215.0,
    }  # fmt: skip
    # (a step-time spelling of its own still decides the line's step time)
    assert timing_fields("step 5/400 loss=2.3032 step_time=1.210s") == {"step_time": 1210.0}


def _composer(timing: str) -> str:
    out = [
        "# SLURM_JOB_NODELIST=ws-gpu[01-02] SLURM_NNODES=2 gpus-per-node=8\n",
        "[rank0] Callback Generate enabled: interval=1ba (runs on every batch)\n",
    ]
    for k in range(1, 6):
        for b in range(k * 200 - 180, k * 200 + 1, 20):
            out.append(
                f"[batch={b}/20000]:\n\t Train loss/train/total: 3.0978\n"
                "\t Train throughput/batches_per_sec: 0.6113\n"
            )
        out.append(f"[rank-timing] per-rank ms/batch (fwd+bwd | callbacks): {timing}\n")
    return "".join(out) + RUNNING


def _row(slow: int, fwd: int, cb: int) -> str:
    return " ".join(
        f"r{r}={fwd if r == slow else 1030 + r}|{cb if r == slow else 3}" for r in range(16)
    )


def test_rank0_slow_in_its_callbacks_is_the_application(tmp_path: Path) -> None:
    log = _composer(_row(0, 1060, 544))
    files = {"dmesg_ws-gpu01": CLEAN, "dmesg_ws-gpu02": CLEAN}
    assert verdict(tmp_path, log, **files) == ("straggler", "application", [], "none")


def test_one_rank_slow_in_forward_backward_is_its_node(tmp_path: Path) -> None:
    kind, category, culprits, _ = verdict(tmp_path, _composer(_row(11, 2200, 3)))
    assert (kind, category, culprits) == ("straggler", "unknown", ["ws-gpu02"])


def test_equal_timers_are_a_healthy_composer_run(tmp_path: Path) -> None:
    assert verdict(tmp_path, _composer(_row(0, 1031, 3)))[0] == "none"


def test_a_csv_timer_table_in_the_metrics_file(tmp_path: Path) -> None:
    rows = "".join(
        f"{r},mosaic-a-0{1 + r // 8},118{r % 7}.4,{3352.7 if r == 0 else 0.0},"
        f"{3.1 if r == 0 else 3350.5},4601.2\n"
        for r in range(16)
    )
    metrics = (
        "# per-rank wall-clock timers (ms, mean over last 100 batches), from the job's own Timer callback\n"
        "rank,host,forward_backward,generate_samples_rank0,allreduce_wait,batch_total\n" + rows
    )
    log = "".join(
        f"[batch={b}/20000]:\n\t Train loss/train/total: 2.5980\n" for b in range(5, 300, 5)
    )
    assert verdict(tmp_path, log + RUNNING, metrics=metrics) == (
        "straggler", "application", [], "none",
    )  # fmt: skip


def _per_rank_data(slow_data: str) -> str:
    out = ["# SLURM_JOB_NODELIST=node[1-4] ntasks=4 script=train_shards.py\n"]
    for step in range(5, 60, 5):
        for rank in range(4):
            data = slow_data if rank == 2 else "0.000"
            out.append(
                f"{rank}: 2026-12-05 05:06:32 [rank{rank}|node{rank + 1}] timing step {step} "
                f"data={data}s total=1.215s\n"
            )
        out.append(
            f"0: 2026-12-05 05:06:32 [rank0|node1] step {step}/400 loss=2.3032 step_time=1.210s\n"
        )
    return "".join(out) + RUNNING


def test_one_rank_waiting_for_its_data_on_a_clean_node_is_the_application(
    tmp_path: Path,
) -> None:
    nodes = {f"dmesg_node{n}": CLEAN for n in range(1, 5)}
    assert verdict(tmp_path, _per_rank_data("0.902"), **nodes) == (
        "straggler", "application", [], "none",
    )  # fmt: skip


def test_one_rank_waiting_for_data_on_a_node_nobody_checked_names_the_node(
    tmp_path: Path,
) -> None:
    kind, category, culprits, _ = verdict(tmp_path, _per_rank_data("0.902"))
    assert (kind, category, culprits) == ("straggler", "unknown", ["node3"])


def _horovod(stuck: bool) -> str:
    out = [
        "# job still running; nodes v100-[17-20], 4 GPUs each; rank 0 runs evaluate() every 200 steps\n"
    ]
    for k in range(4):
        out += [
            f"[1,0]<stdout>:2026-06-21 01:0{k}:08: step {200 * k + s}, loss = 2.900 (624.4 examples/sec; 0.410 sec/batch)\n"
            for s in range(0, 200, 20)
            if not stuck or k == 0  # (stuck: no step after the first stall report)
        ]
        out += [
            f"[1,0]<stdout>:2026-06-21 01:0{k}:57: running validation on 50000 images (rank 0 only)\n",
            f"[1,0]<stderr>:[2026-06-21 01:0{k}:57.180403: W /tmp/pip-req-build/horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \n",
            "[1,0]<stderr>:Missing ranks:\n",
            "[1,0]<stderr>:0: [DistributedGradientTape_Allreduce/cond_0/HorovodAllreduce_grads_0, DistributedGradientTape_Allreduce/cond_1/HorovodAllreduce_grads_1_0]\n",
        ]
    if not stuck:
        out.append(
            "[1,0]<stdout>:2026-06-21 01:05:05: step 800, loss = 2.740 (624.4 examples/sec; 0.410 sec/batch)\n"
        )
    return "".join(out)


def test_horovod_missing_the_same_evaluating_rank_while_training_goes_on(tmp_path: Path) -> None:
    assert verdict(tmp_path, _horovod(stuck=False)) == ("straggler", "application", [], "none")


def test_horovod_stall_reports_after_the_last_step_are_no_straggler(tmp_path: Path) -> None:
    assert verdict(tmp_path, _horovod(stuck=True))[0] != "straggler"


def test_periodic_slowest_rank0_logging_samples_is_the_application(tmp_path: Path) -> None:
    out = ["# SLURM_JOB_NODELIST=l40-[01-04]; srun -l; job still running\n"]
    for step in range(1000, 1301, 50):
        out += [
            f"0: step {step} loss 0.1842 step_time 4.90s rank_times[min/max]=1.28/4.87 slowest_rank=0\n",
            "0: [rank0] logging 64 samples to wandb (decode+upload) ... 3.5s\n",
            f"0: step {step + 25} loss 0.1839 step_time 1.31s rank_times[min/max]=1.28/1.33 slowest_rank=0\n",
        ]
    assert verdict(tmp_path, "".join(out) + RUNNING) == ("straggler", "application", [], "none")


def test_a_csv_table_of_something_else_than_time_is_no_timer(tmp_path: Path) -> None:
    rows = "".join(f"{r},mosaic-a-0{1 + r // 8},{88 if r == 3 else 45},700\n" for r in range(16))
    metrics = "# per-rank GPU readings\nrank,host,gpu_temp_c,power_w\n" + rows
    log = "".join(
        f"[batch={b}/20000]:\n\t Train loss/train/total: 2.5980\n" for b in range(5, 300, 5)
    )
    assert verdict(tmp_path, log + RUNNING, metrics=metrics)[0] == "none"


def _aligned_tables(slow_rank: int, reports: int = 4) -> str:
    """A job's own timer table with space-aligned columns, under `mpirun -H host:slots`."""
    out = "+ mpirun -np 16 -H gpu-m01:8,gpu-m02:8 --bind-to numa python train_recsys.py\n"
    for it in range(reports):
        out += f"[1,0]<stdout>:it {(it + 1) * 2000:>6} | loss 0.1379 | 212.{it} ms/it\n"
        out += "[1,0]<stdout>:---- timer breakdown (mean ms over last 2000 it, all ranks) ----\n"
        out += "[1,0]<stdout>:  rank  emb_h2d  fwd    bwd    a2a    allreduce  total\n"
        for r in range(16):
            h2d, wait = (82.1, 3.5) if r == slow_rank else (11.0 + r % 3 * 0.4, 76.0 + r % 5)
            out += (
                f"[1,0]<stdout>:  {r:>4}  {h2d:>7.1f}   37.9   60.7   18.4  {wait:>9.1f}  212.0\n"
            )
    return out + RUNNING


LNKSTA = (
    "$ lspci -vvv -s 0000:9d:00.0 | grep -E 'NVIDIA|LnkCap:|LnkSta:'\n"
    "9d:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
    "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
    "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16\n"
)


def test_an_aligned_timer_table_names_the_slow_rank_on_its_mpirun_host(tmp_path: Path) -> None:
    # Rank 13 is slot 5 of gpu-m02 (-H gpu-m01:8,gpu-m02:8); its PCIe link trained at gen1.
    kind, category, culprits, _ = verdict(
        tmp_path, _aligned_tables(13), **{"node_gpu-m02": LNKSTA, "dmesg_gpu-m01": CLEAN}
    )
    assert (kind, category, culprits) == ("straggler", "hardware_gpu", ["gpu-m02"])


def test_the_same_tables_on_the_first_host_name_the_first_host(tmp_path: Path) -> None:
    kind, _category, culprits, _ = verdict(tmp_path, _aligned_tables(3))
    assert (kind, culprits) == ("straggler", ["gpu-m01"])


def _cells(nodes: str, world: int, slow: dict[int, str]) -> str:
    """A job's own per-rank timer, one `|`-separated line per rank per report (a traceml-style
    `rank 2 | step  10 | data 0.198s | fwd 0.041s | ...`), slow ranks slow in one phase."""
    out = [f"# SLURM_JOB_NODELIST={nodes}\n", "+ srun -l python train_resnet18.py --workers 6\n"]
    for step in range(10, 110, 10):
        for r in range(world):
            cells = {"data": "0.011s", "fwd": "0.041s", "bwd": "0.292s", "opt": "0.006s"}
            if r in slow:
                cells[slow[r]] = "0.198s"
            body = " | ".join(f"{k} {v}" for k, v in cells.items())
            out.append(f"0: rank {r} | step {step:3d} | {body} | step 0.361s\n")
    return "".join(out) + RUNNING


def test_one_rank_slow_in_its_data_phase_beside_fast_ranks_on_the_same_node_is_the_jobs_input(
    tmp_path: Path,
) -> None:
    got = verdict(tmp_path, _cells("t4-node02", 4, {2: "data"}))
    assert got == ("straggler", "application", [], "none")


def test_ranks_slow_in_data_alone_on_their_unchecked_node_leave_the_node_named(
    tmp_path: Path,
) -> None:
    kind, category, culprits, _ = verdict(tmp_path, _cells("n[1-3]", 6, {4: "data", 5: "data"}))
    assert (kind, category, culprits) == ("straggler", "unknown", ["n3"])


def _breakdown(summary_rank0: str) -> str:
    """A trainer's per-rank breakdown under a heading that gives its unit, each line in
    absl's prefix: `trainer.py:602] per-rank iteration breakdown (s):`, then
    `rank 0: step 1.94 (compute 1.19, summary 0.71, allreduce_wait 0.04)`."""
    out = ["# job 600412 on hz-a800-06, 8 GPUs (DDP)\n"]
    for k in range(10):
        out.append(
            f"I1216 09:{16 + k:02d}:24.377010 88121 policy_trainer.py:431] ppo -> 600412: {1000 + 20 * k} time=1.948 throughput=2117\n"
        )
        out.append(
            f"I1216 09:{16 + k:02d}:24.949709 88121 trainer.py:602] per-rank iteration breakdown (s):\n"
        )
        for r in range(8):
            summary = summary_rank0 if r == 0 else "0.00"
            wait = "0.04" if r == 0 else "0.74"
            out.append(
                f"I1216 09:{16 + k:02d}:24.842427 88121 trainer.py:606]   rank {r}: step 1.94 (compute 1.19, summary {summary}, allreduce_wait {wait})\n"
            )
    return "".join(out) + RUNNING


def test_rank_0_writing_summaries_while_the_others_wait_is_the_jobs_own_work(
    tmp_path: Path,
) -> None:
    got = verdict(tmp_path, _breakdown("0.71"))
    assert got == ("straggler", "application", [], "none")


def test_the_same_breakdown_with_every_rank_even_is_a_healthy_run(tmp_path: Path) -> None:
    kind, category, _, _ = verdict(tmp_path, _breakdown("0.00"))
    assert (kind, category) == ("none", "none")
