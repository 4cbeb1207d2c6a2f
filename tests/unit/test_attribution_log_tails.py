"""A pasted log that is only the tail of a long run.

A log whose first progress line is far past step 0 (and past any resumed step) is a tail: its
first time stamp is not the job's start, so squeue's TIME cannot say when the job was last seen
(attribution-labels.md: a log that simply ends in steady progress is not a hang). Lines as
DeepSpeed's `log_dist` prints them (deepspeed/utils/logging.py) and squeue's default columns.
"""

from __future__ import annotations

from resurgo.attribute.rules import attribute
from resurgo.contracts import Attribution
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

SQUEUE = (
    "$ squeue -j 8812003\n"
    "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
    "           8812003       gpu   ft-13b   rpatel  R 1-04:11:09      4 a100-[201-204]\n"
)


def _steps(first: int) -> str:
    return "".join(
        f"[2026-03-05 02:{i:02d}:01,818] [INFO] [logging.py:128:log_dist] [Rank 0] "
        f"step={first + 10 * i}, skipped=0, lr=[1.2e-04], mom=[(0.9, 0.95)]\n"
        for i in range(10)
    )


def _run(job: str) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], ["a100-201"],
        scheduler_lines=_lines(SQUEUE, "scheduler.txt"),
    )  # fmt: skip


def test_a_tail_of_steady_progress_is_healthy_whatever_squeues_time() -> None:
    assert _run(_steps(14000)).kind == "none"


def test_a_whole_log_ten_minutes_into_a_28_hour_run_went_silent() -> None:
    assert _run(_steps(1)).kind == "hang"
