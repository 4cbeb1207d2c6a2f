"""A pasted log that is only the tail of a long run, and a whole untimed one whose rhythm changed.

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


def test_a_whole_untimed_log_whose_steps_slowed_halfway_is_still_running() -> None:
    # Megatron's lines carry no time: what the printed iterations took, against squeue's
    # TIME, says whether the job went silent. 3,000 iterations at 2.0 s, then 1,500 at 3.5 s
    # (11,250 s), 3:42:30 into the run: still stepping, slowed by its node's lost power
    # supply (the median step would make it 2,550 s of silence, a hang).
    def line(i: int, ms: float) -> str:
        return (
            f"7:  iteration {i:8d}/  250000 | consumed samples: {i * 512:12d} | elapsed time "
            f"per iteration (ms): {ms:.1f} | learning rate: 3.000E-04 | lm loss: 2.6E+00 |\n"
        )

    job = "".join(line(i, 2000.0) for i in range(10, 3001, 10))
    job += "".join(line(i, 3500.0) for i in range(3010, 4501, 10))
    squeue = SQUEUE.replace("1-04:11:09", "   3:42:30")
    sel = "  5a | 03/05/2026 | 01:10:00 | Power Supply PS3 Status | Failure detected | Asserted\n"
    a = attribute(
        Registry.default(), None, _lines(job), None, [], ["a100-201"],
        scheduler_lines=_lines(squeue, "scheduler.txt"),
        node_logs={"a100-201": _lines(sel, "sel_a100-201.txt")},
    )  # fmt: skip
    assert (a.kind, a.culprit_nodes) == ("straggler", ["a100-201"])
