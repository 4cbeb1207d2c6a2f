"""Running vs hung: a job that has not ended is hung only with evidence of a long silence.

Line formats (public sources):
- Megatron-LM `training_log` (megatron/training/training.py): ` iteration  N/ TOTAL | consumed
  samples: ... | elapsed time per iteration (ms): 3112.1 | learning rate: ... | lm loss: ... |`.
- tqdm `format_meter` (tqdm/std.py): `{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]`.
- `scontrol show -o job` (Slurm docs, scontrol(1)): `JobState=RUNNING ... RunTime=HH:MM:SS`.
- attribution-labels.md: a `#` line is an operator's note stating a fact ("job still running").
"""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle

START = "2025-06-11T08:00:00"


def scontrol(run_time: str, state: str = "RUNNING", start: str = START) -> str:
    return (
        "# scontrol show -o job 4242\n"
        f"JobId=4242 JobName=pretrain UserId=alice(1000) JobState={state} Reason=None "
        f"Requeue=1 Restarts=0 ExitCode=0:0 RunTime={run_time} TimeLimit=2-00:00:00 "
        f"SubmitTime={start} StartTime={start} EndTime=Unknown Partition=gpu "
        "NodeList=gpu[001-002] BatchHost=gpu001 NumNodes=2 NumTasks=2\n"
    )


def megatron(iterations: range, stamp: bool = False) -> str:
    out = []
    for i in iterations:
        when = f"[2025-06-11 08:{i // 20:02d}:{i * 3 % 60:02d}] " if stamp else ""
        out.append(
            f"0: {when} iteration {i:8d}/  100000 | consumed samples: {i * 512:12d} | "
            f"elapsed time per iteration (ms): 3112.{i % 10} | learning rate: 2.999E-04 | "
            f"global batch size:   512 | lm loss: {5.1 - i / 1000:.6E} | loss scale: 1.0 |"
        )
    return "\n".join(out) + "\n"


def verdict(tmp_path: Path, job_log: str, scheduler: str | None = None) -> dict[str, object]:
    (tmp_path / "job.log").write_text(job_log)
    if scheduler is not None:
        (tmp_path / "scheduler.txt").write_text(scheduler)
    return analyse_bundle(tmp_path).as_json()


def brief(v: dict[str, object]) -> tuple[object, object, object]:
    return v["kind"], v["category"], v["action"]


class TestRunningFine:
    def test_steady_progress_with_nothing_showing_a_silence_is_not_a_hang(
        self, tmp_path: Path
    ) -> None:
        # Fails on HEAD: without times on the progress lines the old check had no measure
        # of the silence and called every running job a hang.
        v = verdict(tmp_path, megatron(range(1, 40)), scontrol("00:05:00"))
        assert brief(v) == ("none", "none", "none")

    def test_an_operators_still_running_note_makes_the_job_running(self, tmp_path: Path) -> None:
        # Fails on HEAD: with no scheduler record the job was not known to be running at all.
        log = megatron(range(1, 40)) + "# job still running at collection (squeue: R 00:05:10)\n"
        assert brief(verdict(tmp_path, log)) == ("none", "none", "none")

    def test_tqdm_elapsed_that_accounts_for_the_run_time_is_running(self, tmp_path: Path) -> None:
        # Fails on HEAD (hang): the bar has been running 30 minutes of a 40-minute job.
        log = "".join(
            f"0: Training:   {n // 100}%|▌         | {n}/10000 [0:{n // 60 + 13:02d}:11<9:33:40,"
            f"  1.18it/s, loss=2.31]\n"
            for n in range(300, 1200, 100)
        )
        assert brief(verdict(tmp_path, log, scontrol("00:40:00")))[0] == "none"


class TestHangNeedsASilence:
    def test_operator_note_hours_after_the_last_stamped_step_is_a_hang(
        self, tmp_path: Path
    ) -> None:
        # The note's time is "now": the last step was 3.5 hours before it.
        log = megatron(range(1, 40), stamp=True) + "# job still running at 2025-06-11 11:30:02\n"
        kind, category, action = brief(verdict(tmp_path, log))
        assert (kind, action) == ("hang", "requeue") and category != "none"

    def test_run_time_far_beyond_what_the_printed_steps_account_for_is_a_hang(
        self, tmp_path: Path
    ) -> None:
        # 40 steps of 3.1 s (~2 minutes) in a job that has run 5 hours: silent for hours.
        v = verdict(tmp_path, megatron(range(1, 40)), scontrol("05:00:00"))
        assert v["kind"] == "hang" and v["action"] == "requeue"

    def test_tqdm_elapsed_far_behind_the_run_time_is_a_hang(self, tmp_path: Path) -> None:
        log = "".join(
            f"0: Training:   {n // 100}%|▌         | {n}/10000 [0:{n // 60 + 13:02d}:11<9:33:40,"
            f"  1.18it/s, loss=2.31]\n"
            for n in range(300, 1200, 100)
        )
        assert verdict(tmp_path, log, scontrol("10:00:00"))["kind"] == "hang"

    def test_an_error_after_the_last_step_is_not_running_fine(self, tmp_path: Path) -> None:
        # PyTorch ProcessGroupNCCL watchdog (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).
        log = megatron(range(1, 40)) + (
            "1: [rank1]:[E611 08:12:01.120000 140 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before "
            "timing out.\n"
        )
        assert verdict(tmp_path, log, scontrol("00:20:00"))["kind"] != "none"

    def test_tqdm_bar_read_even_when_the_last_step_line_is_a_checkpoint_callbacks(
        self, tmp_path: Path
    ) -> None:
        # Lightning `ModelCheckpoint` (pytorch_lightning/callbacks/model_checkpoint.py) prints
        # `Epoch E, global step N: 'metric' reached ...` between NeMo's bars. The bar says the
        # loop has run 4 h 12 min of a job running 9 h 41 min: silent for hours. (Failed before
        # the bar was looked for past that line: called running.)
        bars = [
            f"Epoch 0: :  6%| {n}/120000 [{n * 2 // 3600}:{n * 2 // 60 % 60:02d}:11<2 days, "
            f"13:08:28, reduced_train_loss=1.97, global_step={n - 1}.0, train_step_timing in "
            "s=1.922]"
            for n in range(7050, 7750, 50)
        ]
        bars.insert(
            -3,
            "Epoch 0, global step 7499: 'reduced_train_loss' reached 1.93291 (best "
            "1.88919), saving model to '/results/ckpt/step=7499.ckpt' as top 3",
        )
        log = "\n".join(bars) + "\n"
        assert verdict(tmp_path, log, scontrol("09:41:07"))["kind"] == "hang"


def _time_limited_bars(tmp_path: Path, note: str) -> str:
    # Lightning's progress bar (no clock time), then slurmstepd's time-limit kill line.
    bars = "".join(
        f"Epoch 7:  {10 + 8 * i}%|█         | {220 + 176 * i}/2200 [00:{9 * i:02d}:12<1:09:20, "
        "v_num=3, train_loss=0.440]\n"
        for i in range(7)
    )
    (tmp_path / "job.log").write_text(
        bars + "slurmstepd: error: *** JOB 781003 ON node201 CANCELLED AT 2026-07-04T18:00:22 "
        "DUE TO TIME LIMIT ***\n"
    )
    (tmp_path / "scheduler.txt").write_text(
        "JobID           JobName      State ExitCode    Elapsed  Timelimit\n"
        "781003          seg-lit    TIMEOUT      0:0   12:00:22   12:00:00\n" + note
    )
    return str(analyse_bundle(tmp_path).as_json()["kind"])


def test_a_noted_last_write_hours_before_the_time_limit_is_a_hang(tmp_path: Path) -> None:
    note = "# last progress line written 2026-07-04 10:41 (job log mtime)\n"
    assert _time_limited_bars(tmp_path, note) == "hang"


def test_a_noted_last_write_just_before_the_time_limit_is_the_time_limit(tmp_path: Path) -> None:
    note = "# last progress line written 2026-07-04 17:59 (job log mtime)\n"
    assert _time_limited_bars(tmp_path, note) == "crash"
