"""Stragglers read from cross-rank timer summaries and per-rank tables, and what decides
whether the slow rank's node or the job's own data split is the cause.

Line shapes: a job's own step timer printing the spread across ranks (`fwd+bwd ms (mean over
250 steps): min 815 (rank 7) median 869 max 2722 (rank 13)`, `[step-timer] step 600: fwd+bwd
min 2.58s (rank 19)  median 2.68s  max 3.76s (rank 37)`), every rank's time on one line
(`per-rank fwd+bwd (s): r0=1.03 ... r11=2.61`), the work each rank is given (`tokens/step per
rank: ... max 31891 (rank 13)`, `[rank11] sampler: shard 11 has 61323 utterances, mean frames
8420`), and rocm-smi's `Concise Info` table (ROCm SMI documentation).

Knowledge: in a synchronous job every rank waits for the slowest one; a slow rank given more
work than the others is the job's data split, an application straggler (attribution-labels.md,
action none while it runs); a busy GPU clocked far below its busy siblings is throttled.
"""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle

RUNNING = "# operator note: job still RUNNING at collection time\n"
HGX = "+ srun -l torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint hgx-k01:29500 train_long.py\n"
NODES = "$ squeue -j 77001\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 77001 gpu train alice R 3:10:04 4 hgx-k[01-04]\n"


def verdict(tmp_path: Path, job_log: str, **files: str) -> tuple[str, str, list[str], str]:
    (tmp_path / "job.log").write_text(job_log)
    (tmp_path / "scheduler.txt").write_text(NODES)
    for name, text in files.items():
        (tmp_path / f"{name}.txt").write_text(text)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]


def _steps(start: int, extra: list[str]) -> list[str]:
    return [
        f"0: [rank0] step {start + k * 50} loss 2.{k:04d} step 2.89s\n" for k in range(3)
    ] + extra


def _timer_reports(slow_rank: int, ratio_ms: list[int], *, work: str = "") -> str:
    out = [HGX]
    for i, mx in enumerate(ratio_ms):
        out += _steps(
            i * 250,
            [
                f"0: [rank0] fwd+bwd ms (mean over 250 steps): min 815 (rank 7) median 869 max {mx} (rank {slow_rank})\n",
            ],
        )
        if work:
            out.append(work)
    return "".join(out) + RUNNING


def test_a_summary_of_bare_numbers_under_a_ms_label_names_the_slow_ranks_node(
    tmp_path: Path,
) -> None:
    got = verdict(tmp_path, _timer_reports(13, [2722, 2752, 2782, 2716, 2790]))
    assert got[0] == "straggler" and got[2] == ["hgx-k02"] and got[3] == "requeue_excluding_nodes"


def test_a_count_summary_is_not_a_timer(tmp_path: Path) -> None:
    job = _timer_reports(13, [2722, 2752, 2782, 2716, 2790]).replace(
        "fwd+bwd ms (mean over 250 steps)", "tokens/step per rank"
    )
    assert verdict(tmp_path, job)[0] != "straggler"


def test_the_slow_rank_given_the_most_tokens_is_the_jobs_data_split(tmp_path: Path) -> None:
    work = "0: [rank0] tokens/step per rank: min 8232 median 9274 max 31891 (rank 13)\n"
    got = verdict(tmp_path, _timer_reports(13, [2722, 2752, 2782, 2716, 2790], work=work))
    assert got == ("straggler", "application", [], "none")


def test_a_throughput_summary_is_speed_not_work(tmp_path: Path) -> None:
    rate = "0: [rank0] tokens/s per rank: min 8232 median 29274 max 31891 (rank 13)\n"
    got = verdict(tmp_path, _timer_reports(13, [2722, 2752, 2782, 2716, 2790], work=rate))
    assert got[1] != "application" and got[2] == ["hgx-k02"]


ASR = """\
+ srun -l --ntasks-per-node=1 torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint mi300-k01:29500 train_asr.py --sampler length_bucketed --no-shuffle-buckets
{shards}0: [rank0] step 200 wer 0.3040 loss 1.1749 step 2.89s
0: [rank0] per-rank fwd+bwd (s): r0=1.03 r1=0.98 r2=0.96 r3=1.01 r4=0.98 r5=0.96 r6=1.01 r7=0.97 r8=0.96 r9=0.97 r10=1.04 r11=2.61 r12=1.04 r13=0.97 r14=0.97 r15=1.03
0: [rank0] step 400 wer 0.2980 loss 1.1526 step 2.88s
0: [rank0] per-rank fwd+bwd (s): r0=1.03 r1=0.96 r2=1.00 r3=1.00 r4=0.96 r5=1.03 r6=0.98 r7=1.03 r8=1.03 r9=1.02 r10=1.02 r11=2.59 r12=1.00 r13=0.97 r14=0.96 r15=1.03
0: [rank0] step 600 wer 0.2920 loss 1.1400 step 2.90s
0: [rank0] per-rank fwd+bwd (s): r0=0.97 r1=0.98 r2=1.01 r3=0.95 r4=1.00 r5=0.97 r6=0.95 r7=0.97 r8=0.96 r9=0.98 r10=0.99 r11=2.55 r12=0.98 r13=1.05 r14=1.04 r15=1.01
0: [rank0] step 800 wer 0.2860 loss 1.1183 step 2.88s
0: [rank0] per-rank fwd+bwd (s): r0=0.96 r1=1.01 r2=1.00 r3=1.03 r4=1.00 r5=1.05 r6=0.99 r7=0.95 r8=1.04 r9=0.98 r10=1.04 r11=2.61 r12=0.95 r13=1.00 r14=0.97 r15=1.01
0: [rank0] step 1000 wer 0.2800 loss 1.0933 step 2.92s
"""
ASR_NODES = "$ squeue -j 88\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 88 gpu asr bob R 2:28:47 2 mi300-k[01-02]\n"


def _shards(heavy: int) -> str:
    frames = {r: (8420 if r == heavy else 3100 + 10 * r) for r in range(16)}
    return "".join(
        f"{r // 8}: [rank{r}] sampler: shard {r} has {61000 + r} utterances, mean frames {frames[r]}\n"
        for r in range(16)
    )


def test_a_one_line_per_rank_table_names_the_slow_ranks_node(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(ASR.format(shards="") + RUNNING)
    (tmp_path / "scheduler.txt").write_text(ASR_NODES)
    v = analyse_bundle(tmp_path).as_json()
    assert (v["kind"], v["culprit_nodes"]) == ("straggler", ["mi300-k02"])


def test_each_ranks_own_work_figure_shows_the_slow_rank_holds_the_longest_shard(
    tmp_path: Path,
) -> None:
    (tmp_path / "job.log").write_text(ASR.format(shards=_shards(11)) + RUNNING)
    (tmp_path / "scheduler.txt").write_text(ASR_NODES)
    v = analyse_bundle(tmp_path).as_json()
    assert (v["kind"], v["category"], v["culprit_nodes"], v["action"]) == (
        "straggler",
        "application",
        [],
        "none",
    )


def test_another_ranks_long_shard_does_not_excuse_the_slow_rank(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(ASR.format(shards=_shards(3)) + RUNNING)
    (tmp_path / "scheduler.txt").write_text(ASR_NODES)
    v = analyse_bundle(tmp_path).as_json()
    assert v["category"] != "application" and v["culprit_nodes"] == ["mi300-k02"]


VIT = "+ srun -l -n 64 --ntasks-per-node=8 --gpus-per-node=8 python train_vit.py --arch vit_h14\n"
VIT_NODES = "$ squeue -j 9120443\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 9120443 standard- vit_h14_ vtanaka R 04:14:04 8 nid[007960-007967]\n"


def _vit(maxima: list[tuple[float, int]]) -> str:
    out = [VIT]
    for i, (mx, rank) in enumerate(maxima):
        out.append(
            f"0: Epoch [3] step [{200 * (i + 1):5d}/11810]  loss 2.8301  img/s 830.3  data 0.004s  step 3.820s\n"
        )
        out.append(
            f"0: [step-timer] step {200 * (i + 1)}: fwd+bwd min 2.58s (rank 19)  median 2.68s  max {mx:.2f}s (rank {rank})  allreduce-wait median 1.10s\n"
        )
    return "".join(out) + RUNNING


def test_one_rank_a_third_slower_in_every_report_is_a_straggler(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        _vit([(3.76, 37), (3.69, 37), (3.80, 37), (3.78, 37), (3.76, 37)])
    )
    (tmp_path / "scheduler.txt").write_text(VIT_NODES)
    v = analyse_bundle(tmp_path).as_json()
    assert (v["kind"], v["culprit_nodes"]) == ("straggler", ["nid007964"])


def test_a_third_slower_but_a_different_rank_each_time_is_noise(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        _vit([(3.76, 37), (3.69, 5), (3.80, 50), (3.78, 12), (3.76, 29)])
    )
    (tmp_path / "scheduler.txt").write_text(VIT_NODES)
    assert analyse_bundle(tmp_path).as_json()["kind"] != "straggler"


# rocm-smi's concise table (ROCm SMI docs' example layout): GPU 5 busy at 800 Mhz.
ROCM_SMI = """\
$ rocm-smi
======================================== ROCm System Management Interface ========================================
================================================== Concise Info ==================================================
Device  Node  IDs              Temp        Power   Partitions          SCLK     MCLK     Fan  Perf    PwrCap  VRAM%  GPU%
              (DID,     GUID)  (Junction)  (Avg)   (Mem, Compute, ID)
==================================================================================================================
0       2     0x740c,   1491   48.0°C      437.0W    NPS1, SPX, 0        1695Mhz  1300Mhz  0%   auto    560.0W  75%    97%
1       3     0x740c,   5918   57.0°C      495.0W    NPS1, SPX, 0        1698Mhz  1300Mhz  0%   auto    560.0W  76%    98%
2       4     0x740c,   7730   53.0°C      488.0W    NPS1, SPX, 0        1691Mhz  1300Mhz  0%   auto    560.0W  79%    97%
3       5     0x740c,   19648  52.0°C      471.0W    NPS1, SPX, 0        1697Mhz  1300Mhz  0%   auto    560.0W  74%    97%
4       6     0x740c,   43000  54.0°C      494.0W    NPS1, SPX, 0        1697Mhz  1300Mhz  0%   auto    560.0W  79%    96%
5       7     0x740c,   1982   105.0°C     301.0W    NPS1, SPX, 0        800Mhz   1300Mhz  0%   auto    560.0W  77%    {busy}%
6       8     0x740c,   9788   56.0°C      455.0W    NPS1, SPX, 0        1699Mhz  1300Mhz  0%   auto    560.0W  73%    100%
7       9     0x740c,   35640  55.0°C      482.0W    NPS1, SPX, 0        1693Mhz  1300Mhz  0%   auto    560.0W  75%    99%
==================================================================================================================
"""


def test_a_busy_gpu_clocked_far_below_its_siblings_is_the_nodes_gpu(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        _vit([(3.76, 37), (3.69, 37), (3.80, 37), (3.78, 37), (3.76, 37)])
    )
    (tmp_path / "scheduler.txt").write_text(VIT_NODES)
    (tmp_path / "node_nid007964.txt").write_text(ROCM_SMI.format(busy=98))
    v = analyse_bundle(tmp_path).as_json()
    assert (v["category"], v["culprit_nodes"]) == ("hardware_gpu", ["nid007964"])


def test_an_idle_gpu_clocked_down_is_not_throttled(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        _vit([(3.76, 37), (3.69, 37), (3.80, 37), (3.78, 37), (3.76, 37)])
    )
    (tmp_path / "scheduler.txt").write_text(VIT_NODES)
    (tmp_path / "node_nid007964.txt").write_text(ROCM_SMI.format(busy=0))
    assert analyse_bundle(tmp_path).as_json()["category"] != "hardware_gpu"


def _recompile(rank: int) -> str:
    return f"{rank // 8}: [rank{rank}]:W0402 13:11:07.971347 656751 torch/_dynamo/convert_frame.py:1551] [5/8] torch._dynamo hit config.recompile_limit (8)\n"


def test_recompiles_spread_over_every_rank_do_not_explain_one_slow_rank(tmp_path: Path) -> None:
    job = _timer_reports(13, [2722, 2752, 2782, 2716, 2790])
    job = job.replace(HGX, HGX + "".join(_recompile(r) for r in (13, 2, 18, 22, 27, 30)))
    got = verdict(tmp_path, job)
    assert got[1] != "application" and got[2] == ["hgx-k02"]


def test_recompiles_on_the_slow_rank_alone_are_the_codes(tmp_path: Path) -> None:
    job = _timer_reports(13, [2722, 2752, 2782, 2716, 2790])
    job = job.replace(HGX, HGX + _recompile(13) * 3)
    assert verdict(tmp_path, job) == ("straggler", "application", [], "none")
