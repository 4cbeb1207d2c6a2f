"""A job hung until its time limit: py-spy dumps of its ranks say whose code it is stuck in.

py-spy's `dump` format (benfred/py-spy README: `Thread 0x... (idle): "MainThread"` then one
`function (file:line)` per frame, innermost first); the progress format is a plain training
loop's `it N  loss ...  s/it` line behind torchrun's `[rankN]:` prefix.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.attribute.stack_dumps import deadlocked_in_job_code
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu-u03", "gpu-u04"]


# Progress every 3 minutes until 21:32, then nothing until the time limit 8.5 h later.
JOB = (
    "".join(
        f"[rank0]:[2026-08-09 {20 + m // 60:02d}:{m % 60:02d}:00] it  {200 * (i + 1)}  loss "
        f"0.{8000 - i * 10}  0.92 s/it\n"
        for i, m in enumerate(range(2, 93, 3))
    )
    + "slurmstepd: error: *** JOB 2290144 ON gpu-u03 CANCELLED AT 2026-08-10T06:00:07 DUE TO "
    "TIME LIMIT ***\n"
)


def _dump(pid: int, frames: list[str]) -> str:
    body = "".join(f"    {f}\n" for f in frames)
    return (
        f"$ py-spy dump --pid {pid}\nProcess {pid}: /opt/conda/bin/python -u train.py\n"
        f"Python v3.11.9 (/opt/conda/bin/python3.11)\n\n"
        f'Thread {pid} (idle): "MainThread"\n{body}'
        f'Thread {pid + 50} (idle): "AsyncMetricsWriter"\n'
        "    flush (/home/rb/seg3d/utils/async_metrics.py:71)\n"
        "    run (threading.py:1012)\n\n"
    )


QUEUE_PUT = [
    "wait (threading.py:327)",
    "put (queue.py:140)",
    "log (/home/rb/seg3d/utils/async_metrics.py:44)",
    "train_one_epoch (/home/rb/seg3d/train.py:188)",
    "<module> (/home/rb/seg3d/train.py:266)",
]
ALL_REDUCE = [
    "synchronize (torch/cuda/__init__.py:801)",
    "all_reduce (torch/distributed/distributed_c10d.py:2050)",
    "train_one_epoch (/home/rb/seg3d/train.py:190)",
]


def _run(frames: dict[str, list[str]]) -> Attribution:
    node_logs = {
        n: _lines(_dump(71402 + i, f), f"node_{n}.txt") for i, (n, f) in enumerate(frames.items())
    }
    return attribute(Registry.default(), None, _lines(JOB), None, [], NODES, node_logs=node_logs)


def test_a_silent_run_killed_at_its_time_limit_is_a_hang_even_without_step_numbers() -> None:
    a = _run({})
    assert a.kind == AnomalyKind.HANG


def test_every_rank_blocked_in_the_jobs_own_code_is_the_jobs_deadlock() -> None:
    a = _run({"gpu-u03": QUEUE_PUT, "gpu-u04": QUEUE_PUT})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert "async_metrics.py" in a.summary
    # However far it got, a resubmission runs into the same code: no free time-limit requeue.
    assert default_advice(a, max_iteration=6000).kind == AdviceKind.STOP


def test_ranks_waiting_in_a_collective_are_not_blamed_on_the_code() -> None:
    a = _run({"gpu-u03": QUEUE_PUT, "gpu-u04": ALL_REDUCE})
    assert a.category != Category.APPLICATION
    assert default_advice(a).kind != AdviceKind.STOP


def test_ranks_caught_at_different_places_show_no_deadlock() -> None:
    elsewhere = ["train_one_epoch (/home/rb/seg3d/train.py:150)", "<module> (/home/rb/x.py:1)"]
    logs = {
        "gpu-u03": _lines(_dump(1, QUEUE_PUT), "node_gpu-u03.txt"),
        "gpu-u04": _lines(_dump(2, elsewhere), "node_gpu-u04.txt"),
    }
    assert deadlocked_in_job_code(logs) is None
    assert deadlocked_in_job_code({"gpu-u03": logs["gpu-u03"]}) is None  # one dump: no pattern


def test_dumps_pasted_into_a_stuck_jobs_output_show_its_deadlock() -> None:
    # Still running (no time limit yet), progress stopped; the operator pasted the ranks'
    # py-spy dumps into the output the bundle carries.
    progress = JOB.split("slurmstepd")[0]
    job = progress + _dump(71402, QUEUE_PUT) + _dump(71403, QUEUE_PUT)
    a = attribute(Registry.default(), None, _lines(job), None, [], NODES)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
