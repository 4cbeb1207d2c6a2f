"""A running job in a long validation pass is not silent.

Lightning prints its training bar (`Epoch 3: 100%|...| 2400/2400 [52:48<00:00, ...]`) and then
its validation loop's own bar (`Validation DataLoader 0:  64%|...| 3840/6000 [47:21<26:38,
1.35it/s]`, lightning's TQDMProgressBar). The validation bar's clock starts with the pass, so
it says nothing of how long the run has gone without a training step.
"""

from __future__ import annotations

from resurgo.attribute.rules import attribute
from resurgo.contracts import AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu-w03", "gpu-w04"]


def _job(validation_bars: bool, epoch: int = 3) -> str:
    train = "".join(
        f"Epoch {epoch}:   {n * 100 // 2400:>2}%|######### | {n}/2400 "
        f"[{n // 45:02d}:{n % 45:02d}<00:52,  0.76it/s, v_num=41, train_loss=0.38{n % 10}]\n"
        for n in range(2200, 2401, 40)
    )
    bars = "".join(
        f"Validation DataLoader 0:  {n * 100 // 6000}%|#####     | {n}/6000 [{n // 81:02d}:"
        f"{n % 60:02d}<30:00,  1.35it/s]\n"
        for n in range(3240, 3841, 60)
    )
    note = (
        "# operator: captured at 00:51; squeue shows job 8812201 state R (running, 02:41:07 "
        "elapsed)\n"
    )
    return train + (bars if validation_bars else "") + note


def _run(job: str) -> Attribution:
    squeue = (
        "$ squeue -j 8812201\n"
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "           8812201       gpu segform-b  lmeyer  R    2:41:07      2 gpu-w[03-04]\n"
    )
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES, node_logs={},
        scheduler_lines=_lines(squeue, "scheduler.txt"),
    )  # fmt: skip


def test_a_validation_bar_advancing_at_the_end_is_a_running_job() -> None:
    a = _run(_job(validation_bars=True))
    assert (a.kind, a.category) == ("none", Category.NONE)


def test_the_training_bar_alone_long_ago_is_still_a_hang() -> None:
    # (The first epoch's bar: Lightning restarts the bar's clock each epoch, so only epoch 0's
    # elapsed time counts from the loop's start.)
    a = _run(_job(validation_bars=False, epoch=0))
    assert a.kind == AnomalyKind.HANG


def test_a_later_epochs_bar_clock_says_nothing_of_the_silence() -> None:
    a = _run(_job(validation_bars=False, epoch=3))
    assert a.kind != AnomalyKind.HANG
