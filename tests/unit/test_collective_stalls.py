"""Ranks in different collectives: Horovod's stall reports and faulthandler dumps.

Stall reports in Horovod's formats (horovod/common/stall_inspector.cc `Missing ranks:` rows;
operations.cc in older releases, `Stalled ops: NAME [missing ranks: 1]`); faulthandler dumps as
CPython's Modules/faulthandler.c prints them on SIGTERM, under srun labels (a real run).
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.collective_stalls import crossing, mismatched_collectives, stall_reports
from resurgo.attribute.stack_dumps import diverged_collective, faulthandler_stacks
from resurgo.contracts import LogLine

WARNING = (
    "[1,0]<stderr>:[2021-02-02 21:19:07.345988: W /tmp/pip-install/horovod/common/stall_inspector.cc:105] "
    "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
    "waiting for remainder of ranks for more than 10 seconds. This may indicate that different ranks are "
    "trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. "
)


def _lines(texts: list[str]) -> list[LogLine]:
    return [LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(texts)]


def test_one_rank_missing_from_every_tensor_is_not_a_mismatch() -> None:
    lines = _lines([
        WARNING,
        "[1,0]<stderr>:Missing ranks:",
        "[1,0]<stderr>:0: [DistributedGradientTape_Allreduce/cond_0/HorovodAllreduce_grads_0, DistributedGradientTape_Allreduce/cond_1/HorovodAllreduce_grads_1_0]",
    ])  # fmt: skip
    ((_, tensors),) = stall_reports(lines)
    assert len(tensors) == 2 and all(v == {0} for v in tensors.values())
    assert mismatched_collectives(lines, 4) is None


def test_ranks_waiting_on_tensors_the_others_never_submit_cross() -> None:
    lines = _lines([
        WARNING,
        "[1,0]<stderr>:Missing ranks:",
        "[1,0]<stderr>:0: [allreduce.aux_head.weight]",
        "[1,0]<stderr>:1: [allreduce.aux_head.weight]",
        "[1,0]<stderr>:2: [allreduce.fc.weight, allreduce.fc.bias]",
    ])  # fmt: skip
    assert mismatched_collectives(lines, 3) == lines[0]


def test_older_one_line_format_with_ready_ranks() -> None:
    lines = _lines([
        WARNING + "Stalled ops: allreduce.aux.conv.weight [ready ranks: 6], allreduce.fc.weight [missing ranks: 6]"
    ])  # fmt: skip
    assert mismatched_collectives(lines, 8) is not None
    lagging = {"a": {5, 6}, "b": {6}}  # ranks lagging at different points: nested sets
    assert not crossing(lagging, 8)


RANK0_BARRIER = [
    "1: Current thread 0x00007f3e4ac90b80 (most recent call first):",
    '1:   File "/home/root/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward',
    '1:   File "/home/root/runs/train_eval.py", line 56 in <module>',
    "0: Current thread 0x00007f5c27c2cb80 (most recent call first):",
    '0:   File "/home/root/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier',
    "2: Current thread 0x00007f0fbbc71b80 (most recent call first):",
    '2:   File "/home/root/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward',
    '2:   File "/home/root/runs/train_eval.py", line 56 in <module>',
    '0:   File "/home/root/runs/train_eval.py", line 65 in <module>',
]


def test_a_rank_alone_in_a_barrier_elsewhere_in_the_code_diverged() -> None:
    lines = _lines(RANK0_BARRIER)
    assert len(faulthandler_stacks(lines)) == 3
    assert diverged_collective(lines) == "/home/root/runs/train_eval.py:65"


def test_a_rank_stuck_outside_collectives_while_others_wait_is_not_divergence() -> None:
    # Rank 0 stuck in the job's own compute (a dead GPU, a kernel): the others wait on it.
    stuck = [
        t.replace("distributed/distributed_c10d.py", "nn/modules/linear.py").replace(
            "in barrier", "in forward"
        )
        for t in RANK0_BARRIER
    ]
    assert diverged_collective(_lines(stuck)) is None
