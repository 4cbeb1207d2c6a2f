"""Stragglers the job causes itself, read from the phases of its own step lines.

Line formats (public sources):
- pytorch/examples imagenet/main.py `ProgressMeter`/`AverageMeter`: `Epoch: [4][ 200/2502]` then
  `Time  0.781 ( 0.70)` and `Data  0.372 ( 0.30)` (seconds, running average in parentheses).
- `|`-separated per-phase step lines with units (`| data 0.011s | fwd+bwd 0.98s |`), the shape of
  custom trainers' step summaries.
- PyTorch's DataLoader warning (torch/utils/data/dataloader.py `_check_worker_number_rationality`).

Knowledge: rank 0 does the job's extra work (logging, uploads, profiler traces) while the other
ranks wait in the next collective (NVRx usage guide); every rank waiting most of its step for
data is the job's input pipeline, not a node (attribution-labels.md: application stragglers).
"""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle
from resurgo.detect.progress import ProgressParser
from resurgo.detect.timing_fields import timing_fields

RUNNING_NOTE = "# job still running at 2026-09-30 10:09\n"


def verdict(tmp_path: Path, job_log: str) -> tuple[str, str, list[str], str]:
    (tmp_path / "job.log").write_text(job_log)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]


def test_imagenet_progress_meter_is_progress_with_step_and_data_times() -> None:
    line = "Epoch: [4][ 200/2502]\tTime  0.781 ( 0.70)\tData  0.372 ( 0.30)\tLoss 2.111e+00\tAcc@1  51.2\tAcc@5  76.1"
    assert ProgressParser().parse(line) == 4 * 2502 + 200
    assert timing_fields(line) == {"time": 781.0, "data": 372.0}


def test_the_meters_with_their_tabs_expanded_are_the_same_times() -> None:
    line = "2019-09-16 06:06:43,447 - INFO - [  10/5000]    lr: 0.000040    Time  2.828 ( 4.689)    Data  0.011 ( 1.300)    Loss 2.8722 (2.9722)"
    assert timing_fields(line) == {"time": 2828.0, "data": 11.0}
    # (a sentence about time is no meter)
    assert timing_fields("Time  to first batch was 2.8 seconds (see above)") == {}


# The same job's own rate on one GPU, as a note gives it, against its meters' Time now.
SPACED_METERS = "".join(
    f"2019-09-16 06:{6 + k // 20:02d}:{(3 * k) % 60:02d},447 - INFO - [{k:>4}/5000]    lr: 0.000040    Time  2.82{k % 9} ( 4.689)    Data  0.011 ( 1.300)    Loss 2.87 (2.97)\n"
    for k in range(1, 40)
)


def test_a_noted_time_per_iteration_of_the_same_script_against_the_meters_is_a_straggler(
    tmp_path: Path,
) -> None:
    note = "# operator note: job still running at collection time; the same script on one V100 of this node logs Time ~1.7 s per iteration\n"
    assert verdict(tmp_path, note + SPACED_METERS)[0::3] == ("straggler", "none")


def test_a_bare_time_field_is_a_step_time_and_a_date_is_not() -> None:
    """maskrcnn-benchmark's and detectron2's MetricLogger (`time: 1.0310 (1.020)`, `time:
    0.4140  data_time: 0.0150`); torchrun's error summary prints `time : 2024-02-27_06:02:13`."""
    mrcnn = "2019-04-19 09:43:11,517 maskrcnn_benchmark.trainer INFO: eta: 3 days, 12:30:22  iter: 20  loss: 1.8920  time: 1.0310 (1.020)  data: 0.020  lr: 0.020000"
    assert timing_fields(mrcnn) == {"time": 1031.0}
    d2 = "[10/14 12:55:01 d2.utils.events]:  eta: 5:12:33  iter: 1019  total_loss: 0.8212  time: 0.4140  data_time: 0.0150  lr: 0.02"
    assert timing_fields(d2) == {"time": 414.0, "data_time": 15.0}
    assert timing_fields("  time      : 2024-02-27_06:02:13") == {}


def test_separated_phase_fields_with_units() -> None:
    line = "rank 0 step 1000 | step 1.63s | data 0.011s | fwd+bwd 0.98s | allreduce 0.19s | log_samples 0.44s | loss 1.4267"
    assert timing_fields(line) == {
        "step": 1630.0, "data": 11.0, "fwd+bwd": 980.0, "allreduce": 190.0, "log_samples": 440.0
    }  # fmt: skip
    assert timing_fields("took 3 s, done") == {}  # prose, not a separated field


def _per_rank(log_samples_rank0: float) -> str:
    out = []
    for step in range(1000, 3001, 500):
        for rank in range(8):
            extra = log_samples_rank0 if rank == 0 else 0.0
            out.append(
                f"{rank}: [09:13:35] rank {rank} step {step} | step 1.63s | data 0.010s | "
                f"fwd+bwd 0.98s | allreduce {0.19 if rank == 0 else 0.62}s | "
                f"log_samples {extra:.2f}s\n"
            )
    return "".join(out)


def test_rank0_alone_slow_in_a_logging_phase_is_the_application(tmp_path: Path) -> None:
    assert verdict(tmp_path, _per_rank(0.44) + RUNNING_NOTE) == (
        "straggler", "application", [], "none"
    )  # fmt: skip


def test_the_same_ranks_without_the_extra_phase_are_healthy(tmp_path: Path) -> None:
    assert verdict(tmp_path, _per_rank(0.0) + RUNNING_NOTE)[0] == "none"


def test_rank0_printing_a_logging_phase_most_of_its_step_is_the_application(
    tmp_path: Path,
) -> None:
    log = "".join(
        f"[ap-01] [rank0] 2025-12-20 0{8 + i // 6}:{(i * 5) % 60:02d}:31 step {100 * (i + 1)}  | "
        f"step 2.95 s | fwd/bwd 0.71 s | log+upload 2.1{i % 10} s (rank 0 only)\n"
        for i in range(7)
    )
    assert verdict(tmp_path, log + RUNNING_NOTE) == ("straggler", "application", [], "none")


def test_every_rank_waiting_for_data_is_the_input_pipeline(tmp_path: Path) -> None:
    log = [
        "0: /opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:617: UserWarning: This DataLoader will create 6 worker processes in total. Our suggested max number of worker in current system is 2, which is smaller than what this DataLoader is going to create.\n"
    ]
    for it in range(100, 1700, 100):
        for rank in (0, 5, 11):
            log.append(
                f"{rank}: 2026-11-02 09:04:54 rank{rank} iter {it} | time 2.9{rank % 7}s | "
                f"data 2.3{rank % 9}s | loss 1.887 | max mem 21.4G\n"
            )
    assert verdict(tmp_path, "".join(log) + RUNNING_NOTE) == (
        "straggler", "application", [], "none"
    )  # fmt: skip


def test_data_a_small_share_of_the_step_is_healthy(tmp_path: Path) -> None:
    log = "".join(
        f"{rank}: rank{rank} iter {it} | time 2.9{rank}s | data 0.3{rank}s | loss 1.887\n"
        for it in range(100, 1700, 100)
        for rank in (0, 5)
    )
    assert verdict(tmp_path, log + RUNNING_NOTE)[0] == "none"


def _titan(steps: range, every: int) -> str:
    # torchtitan (torchtitan/tools/profiling.py, components/metrics.py) log lines.
    out = []
    for step in steps:
        out.append(
            f"0: [rank0]:[titan] 2026-09-02 10:{step % 60:02d}:44,120 - root - INFO - step: {step}  "
            "loss:  5.7600  memory: 58.02GiB(73.25%)  tps: 2,901  tflops: 168.02  mfu: 16.99%\n"
        )
        if step % every == 0:
            out.append(
                f"0: [rank0]:[titan] 2026-09-02 10:{step % 60:02d}:45,002 - root - INFO - "
                f"Dumping profiler traces at step {step}\n"
                f"0: [rank0]:[titan] 2026-09-02 10:{step % 60:02d}:52,310 - root - INFO - "
                "Finished dumping profiler traces in 7.31 seconds\n"
            )
    return "".join(out)


def test_a_profiler_trace_at_every_step_is_the_application(tmp_path: Path) -> None:
    assert verdict(tmp_path, _titan(range(200, 206), 1) + RUNNING_NOTE) == (
        "straggler", "application", [], "none"
    )  # fmt: skip


def test_a_profiler_trace_every_tenth_step_is_healthy(tmp_path: Path) -> None:
    assert verdict(tmp_path, _titan(range(200, 241), 10) + RUNNING_NOTE)[0] == "none"


def _megatron_detector(launch_extra: str) -> str:
    # Megatron-LM StragglerDetector report (megatron/core/utils.py), slowest rank moving
    # around the last pipeline stage's ranks.
    out = [
        "SLURM_JOB_ID=6678210 SLURM_JOB_NODELIST=mg-[11-14] SLURM_NNODES=4 SLURM_GPUS_ON_NODE=8\n",
        "+ srun -l torchrun --nnodes 4 --nproc_per_node 8 pretrain_gpt.py --num-layers 72 "
        f"--pipeline-model-parallel-size 4 {launch_extra}--log-straggler\n",
    ]
    for i, rank in enumerate([27, 24, 25, 30, 26, 29]):
        it = 3000 + 20 * i
        out.append(
            f"0:  [2025-10-09 14:{i * 3:02d}:16] iteration {it:8d}/  200000 | elapsed time per "
            "iteration (ms): 9809.7 | learning rate: 1.500E-04 | lm loss: 2.596300E+00 |\n"
            f"0: INFO:megatron.core.utils:[2025-10-09 14:{i * 3:02d}:16] | MnRtt/Rnk: "
            f"5125.08ms/11 | MxRtt/Rnk: 7696.14ms/{rank} | MnTmp/Rnk: 51C/9 | MxTmp/Rnk: 66C/{rank}\n"
        )
    return "".join(out) + "# job still running at collection time\n"


def test_an_uneven_pipeline_split_makes_its_slow_stage_the_application(tmp_path: Path) -> None:
    log = _megatron_detector(
        "--decoder-first-pipeline-num-layers 16 --decoder-last-pipeline-num-layers 24 "
    )
    assert verdict(tmp_path, log)[:2] == ("straggler", "application")


def test_a_rotating_slowest_rank_without_a_cause_is_unknown(tmp_path: Path) -> None:
    assert verdict(tmp_path, _megatron_detector(""))[:2] == ("straggler", "unknown")


# py-spy dump (benfred/py-spy): `Thread N (active): "MainThread"` then frames innermost first.
BUSY_RANK0 = """# py-spy dump --pid 1882231 (global rank 0)
Thread 1882231 (active): "MainThread"
    _token_accuracy (token_acc.py:58)
    on_train_batch_end (token_acc.py:31)
    _call_callback_hooks (lightning/pytorch/trainer/call.py:208)
    advance (lightning/pytorch/loops/training_epoch_loop.py:285)

# same dump for global rank 1 (pid 1882232):
Thread 1882232 (idle): "MainThread"
    wait (torch/distributed/distributed_c10d.py:2501)
    all_reduce (megatron/core/distributed/param_and_grad_buffer.py:421)
"""
NEMO_STEPS = "".join(
    f"[NeMo I 2025-03-02 {8 + i // 4:02d}:{(i % 4) * 15:02d}:00 nemo_logging:393] Training epoch "
    f"0, iteration {300 * (i + 1)}/19999 | lr: 0.0002999 | global_step: {300 * (i + 1)} | "
    "reduced_train_loss: 2.9 | train_step_timing in s: 2.61\n"
    for i in range(12)
)


def test_one_rank_busy_in_its_own_code_while_the_others_wait_is_the_application(
    tmp_path: Path,
) -> None:
    (tmp_path / "node_gpu-e01.txt").write_text(BUSY_RANK0)
    log = "# job still running at time of capture (2025-03-02 11:10)\n" + NEMO_STEPS
    assert verdict(tmp_path, log) == ("straggler", "application", [], "none")


def test_every_rank_waiting_in_a_collective_is_no_such_straggler(tmp_path: Path) -> None:
    waiting = BUSY_RANK0.replace(
        "    _token_accuracy (token_acc.py:58)\n    on_train_batch_end (token_acc.py:31)\n",
        "    wait (torch/distributed/distributed_c10d.py:2501)\n",
    )
    (tmp_path / "node_gpu-e01.txt").write_text(waiting)
    log = "# job still running at time of capture (2025-03-02 11:10)\n" + NEMO_STEPS
    assert verdict(tmp_path, log)[0] == "none"


# nvidia-resiliency-ext's example trainer (`print_stragglers`): one parseable line per straggler.
def _nvrx(detected: str, extra: str = "") -> str:
    out = [
        "+ srun --ntasks-per-node=1 torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint h100-b-01:29500 train_sft.py\n",
    ]
    for k in range(1, 41):
        out.append(
            f"[rank0]: 11:{k // 5 + 2:02d}:{k % 5 * 12:02d} iter {k * 10}/20000 | loss 1.6{k:03d} | step_time 1.2{k % 9}s | tokens/s/gpu 27248\n"
        )
        if k % 5 == 0 and extra:
            out.append(extra)
        if k % 10 == 0:
            out.append(f"[rank0]: {detected}\n")
    return (
        "".join(out)
        + "[rank0]: 11:11:00 iter 410/20000 | loss 1.5999 | step_time 1.21s | tokens/s/gpu 27250\n"
        + RUNNING_NOTE
    )


SQUEUE = "$ squeue -j 5512\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 5512 gpu sft eve R 10:02 4 h100-b-[01-04]\n"


def test_an_nvrx_section_straggler_on_rank_0_with_its_extra_work_is_the_jobs(
    tmp_path: Path,
) -> None:
    sample = "[rank0]: step_tail: generated 4 sample completions for the wandb table (eval_mini, max_new_tokens=256) [only on rank 0]\n"
    (tmp_path / "scheduler.txt").write_text(SQUEUE)
    got = verdict(
        tmp_path,
        _nvrx("DETECTED RELATIVE STRAGGLER SECTION=step_tail RANK=0 NODE=h100-b-01", sample),
    )
    assert got == ("straggler", "application", [], "none")


def test_an_nvrx_gpu_straggler_names_its_node_while_the_job_runs(tmp_path: Path) -> None:
    (tmp_path / "scheduler.txt").write_text(SQUEUE)
    kind, _, culprits, _ = verdict(
        tmp_path, _nvrx("DETECTED INDIVIDUAL STRAGGLER GPU RANK=21 NODE=h100-b-03")
    )
    assert (kind, culprits) == ("straggler", ["h100-b-03"])


def _gc_run(pause: str, decline: bool) -> str:
    out = ["# job still running at collection time\n"]
    for k in range(12):
        ms = 1882.4 + (15.0 * k if decline else 0.0)
        out.append(
            f" 95: [2024-11-11 02:{10 + 3 * k:02d}:29] iteration {96050 + 50 * k:8d}/   300000 | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 401.9 |\n"
        )
        rank = (7 * k + 3) % 96
        out.append(
            f" {rank}: [rank{rank}] WARNING train.py:77 python gc gen2 collection took {pause}s (collected 1479k objects, tracked 4.8M)\n"
        )
    return "".join(out)


def test_a_gentle_decline_with_long_gc_pauses_on_many_ranks_is_the_jobs_straggler(
    tmp_path: Path,
) -> None:
    """MegaScale (arXiv:2402.15627): Python GC pauses on random ranks slow the whole job."""
    assert verdict(tmp_path, _gc_run("0.88", decline=True)) == (
        "straggler",
        "application",
        [],
        "none",
    )
    assert verdict(tmp_path, _gc_run("0.88", decline=False))[0] == "none"
    assert verdict(tmp_path, _gc_run("0.05", decline=True))[0] == "none"
