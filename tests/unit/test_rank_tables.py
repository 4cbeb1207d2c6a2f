"""Per-rank and per-pair performance reports: who is slow, consistently, and on which node.

Line formats (public sources):
- NVRx straggler detection (NVIDIA/nvidia-resiliency-ext, straggler reporting, usage guide):
  `GPU relative performance:` then ` Worst performing 2/16 ranks:` and `  Rank=12 Node=gpu002
  Score=0.55`; NVRx's default relative-performance threshold is 0.7.
- Megatron-LM `StragglerDetector.report` (megatron/core/utils.py): `... | MnRtt/Rnk:
  3287.70ms/26 | MxRtt/Rnk: 4109.62ms/21 | MnPwr/Rnk: ... |`.
- Megatron-LM `Timers` with `--timing-log-option all` (megatron/core/timers.py): `times across
  ranks (ms):`, `  forward-backward:`, `     rank  0: 1021.33`.
- nccl-tests (NVIDIA/nccl-tests src/common.cu): `# Avg bus bandwidth    : 187.01`.
"""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle

SCONTROL = (
    "JobId=88 JobName=pretrain JobState=RUNNING Reason=None ExitCode=0:0 RunTime=00:04:00 "
    "StartTime=2025-06-11T08:00:00 EndTime=Unknown NodeList=gpu[001-002] NumNodes=2 NumTasks=2\n"
)


def verdict(tmp_path: Path, job_log: str, scheduler: str = SCONTROL) -> dict[str, object]:
    (tmp_path / "job.log").write_text(job_log)
    (tmp_path / "scheduler.txt").write_text(scheduler)
    return analyse_bundle(tmp_path).as_json()


def nvrx(worst: list[tuple[int, str, float]]) -> str:
    rows = "".join(f"   Rank={r} Node={n} Score={s}\n" for r, n, s in worst)
    return (
        "GPU relative performance:\n"
        f" Worst performing {len(worst)}/16 ranks:\n{rows}"
        " Best performing 1/16 ranks:\n   Rank=0 Node=gpu001 Score=1.00\n"
    )


def megatron_steps(first: int, n: int) -> str:
    return "".join(
        f" iteration {i:8d}/  100000 | elapsed time per iteration (ms): 3112.{i % 10} | "
        f"lm loss: 5.1E+00 |\n"
        for i in range(first, first + n)
    )


class TestNvrx:
    def test_the_same_rank_worst_in_every_report_names_its_node(self, tmp_path: Path) -> None:
        # Fails on HEAD: NVRx reports were not read, a running job with no times was a hang.
        log = "".join(megatron_steps(10 * k, 10) + nvrx([(12, "gpu002", 0.55)]) for k in range(4))
        v = verdict(tmp_path, log)
        assert (v["kind"], v["culprit_nodes"], v["action"]) == (
            "straggler", ["gpu002"], "requeue_excluding_nodes",
        )  # fmt: skip

    def test_scores_above_the_threshold_are_not_stragglers(self, tmp_path: Path) -> None:
        log = "".join(megatron_steps(10 * k, 10) + nvrx([(12, "gpu002", 0.93)]) for k in range(4))
        assert verdict(tmp_path, log)["culprit_nodes"] == []


class TestMegatronStragglerDetector:
    def line(self, step: int, slow_rank: int, spread: float = 1.25) -> str:
        return (
            f"[2025-06-11 08:0{step // 10}:{step % 10}0] {step} | MnRtt/Rnk: 3287.70ms/3 | "
            f"MxRtt/Rnk: {3287.70 * spread:.2f}ms/{slow_rank} | MnPwr/Rnk: 601000.00mW/1 | "
            f"MxPwr/Rnk: 695000.00mW/10 |\n"
        )

    def test_a_slowest_rank_that_moves_every_report_is_no_culprit_and_no_action(
        self, tmp_path: Path
    ) -> None:
        # Fails on HEAD (a hang): the detector's report was not read.
        log = "".join(megatron_steps(10 * k, 5) + self.line(k, 5 + 3 * k) for k in range(5))
        v = verdict(tmp_path, log)
        assert (v["kind"], v["culprit_nodes"], v["action"]) == ("straggler", [], "none")

    def test_a_small_spread_is_not_a_straggler(self, tmp_path: Path) -> None:
        log = "".join(megatron_steps(10 * k, 5) + self.line(k, 7, 1.02) for k in range(5))
        assert verdict(tmp_path, log)["kind"] == "none"


class TestMegatronTimers:
    def table(self, slow_rank: int | None) -> str:
        rows = "".join(
            f"     rank {r:2d}: {2400.0 if r == slow_rank else 1021.0 + r:.2f}\n" for r in range(4)
        )
        return f"times across ranks (ms):\n  forward-backward:\n{rows}"

    def test_one_rank_consistently_slow_names_its_node(self, tmp_path: Path) -> None:
        # Fails on HEAD. Task N runs on the N-th host (one task per node): rank 3 is gpu004.
        sched = SCONTROL.replace(
            "gpu[001-002] NumNodes=2 NumTasks=2", "gpu[001-004] NumNodes=4 NumTasks=4"
        )
        log = "".join(megatron_steps(10 * k, 5) + self.table(3) for k in range(4))
        v = verdict(tmp_path, log, sched)
        assert (v["kind"], v["culprit_nodes"]) == ("straggler", ["gpu004"])

    def test_even_timers_are_running_fine(self, tmp_path: Path) -> None:
        log = "".join(megatron_steps(10 * k, 5) + self.table(None) for k in range(4))
        assert verdict(tmp_path, log)["kind"] == "none"


class TestNcclTestsPairs:
    def test_the_node_common_to_every_slow_pair_is_the_culprit(self, tmp_path: Path) -> None:
        # Fails on HEAD: admin-run pairwise nccl-tests were not read.
        pairs = [("gpu001", "gpu002", 187.0), ("gpu003", "gpu004", 90.2),
                 ("gpu001", "gpu003", 92.4), ("gpu002", "gpu003", 91.8),
                 ("gpu002", "gpu004", 188.1), ("gpu001", "gpu004", 186.9)]  # fmt: skip
        log = "".join(
            f"$ srun -N2 -w {a},{b} ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8\n"
            f"#  Avg bus bandwidth    : {bw}\n"
            for a, b, bw in pairs
        )
        sched = SCONTROL.replace(
            "gpu[001-002] NumNodes=2 NumTasks=2", "gpu[001-004] NumNodes=4 NumTasks=4"
        )
        v = verdict(tmp_path, megatron_steps(1, 20) + log, sched)
        assert (v["kind"], v["culprit_nodes"]) == ("straggler", ["gpu003"])


def test_rank_0_alone_slow_in_a_code_section_of_a_16_rank_job_is_the_application(
    tmp_path: Path,
) -> None:
    # NVRx's report dict with its StragglerId repr: only rank 0's `train_step` section is slow
    # while every GPU scores ~1.0; the score dict prints all 16 ranks (ranks 0-7 on gpu001).
    scores = ", ".join(f"{r}: 0.99" for r in range(16))
    report = (
        f"0: [rank0]: Rank 0 GPUs relative perf: {{{scores}}}\n"
        "0: [rank0]: {'straggler_gpus_individual': set(),\n"
        "0: [rank0]:  'straggler_gpus_relative': set(),\n"
        "0: [rank0]:  'straggler_sections_individual': {},\n"
        "0: [rank0]:  'straggler_sections_relative': {'train_step': "
        "{StragglerId(rank=0, node='gpu001')}}}\n"
    )
    steps = "".join(f"0: [rank0]: step {100 * i} loss 0.09 | 1.81 s/it\n" for i in range(1, 9))
    got = verdict(tmp_path, (steps + report) * 3)
    assert (got["kind"], got["category"], got["culprit_nodes"]) == ("straggler", "application", [])
    assert got["action"] == "none"


class TestComposerStragglerDetector:
    """Composer's GlobalStragglerDetector (mosaicml/composer#3342, callbacks/
    global_straggler_detector.py): rank 0 logs `MinThroughput/Rank: 58.41TF/Rank-0` and
    `MaxThroughput/Rank: 129.99TF/Rank-12` per report (`_ValueWithRank.__str__`)."""

    def report(self, batch: int, low_rank: int, low: float = 58.41) -> str:
        return (
            f"0: [batch={batch}/8000]:\n"
            f"0: \t Train time/batch: {batch}\n"
            f"0: \t Train loss/train/total: 2.8950\n"
            f"0: \t Train MinThroughput/Rank: {low:.2f}TF/Rank-{low_rank}\n"
            f"0: \t Train MaxThroughput/Rank: 129.99TF/Rank-15\n"
        )

    def scheduler(self) -> str:
        # 16 ranks on two nodes: ranks 0-7 on gpu001 (node-major), so rank 0 shares its node.
        return SCONTROL

    def test_rank_0_the_slowest_in_every_report_of_a_16_rank_job_is_the_application(
        self, tmp_path: Path
    ) -> None:
        # Fails without the reader: a running job with no per-rank times was healthy.
        log = "".join(self.report(10 + 70 * k, 0) for k in range(6))
        v = verdict(tmp_path, log, self.scheduler())
        assert (v["kind"], v["category"], v["culprit_nodes"], v["action"]) == (
            "straggler", "application", [], "none",
        )  # fmt: skip

    def test_a_lowest_rank_that_moves_every_report_names_no_node(self, tmp_path: Path) -> None:
        log = "".join(self.report(10 + 70 * k, 3 + 2 * k) for k in range(6))
        assert verdict(tmp_path, log, self.scheduler())["culprit_nodes"] == []

    def test_close_throughputs_are_not_a_straggler(self, tmp_path: Path) -> None:
        log = "".join(self.report(10 + 70 * k, 9, 127.5) for k in range(6))
        assert verdict(tmp_path, log, self.scheduler())["kind"] == "none"
