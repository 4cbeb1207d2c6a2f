"""Phase timers printed as space-separated `key value+unit` pairs, and what their phases say.

- `it 100 step 0.530s data 0.016s allreduce_wait 0.013s` (a hand-written per-rank timer) is
  read as three durations; prose that holds durations (`wait was 199.7ms vs median ... at
  10.4ms`, `saved in 12.3s`) is not.
- A rank long in a collective's wait waits for the slow ones: the ranks whose own data
  loading is slow are the stragglers, the job's (input pipeline), no node to exclude.
- Phases without a total make up the step: a job that waits 5 s for data per 0.24 s of compute
  is bound by its own input pipeline.
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from pathlib import Path

import pytest

from resurgo.detect.timing_fields import timing_fields
from tests.log_lines import bundle_verdict


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        (
            "1: [rank5] it 100 step 0.530s data 0.016s allreduce_wait 0.013s",
            {"step": 530.0, "data": 16.0, "allreduce_wait": 13.0},
        ),
        ("0: [rank3] it 200 fwd+bwd 61ms data 2ms", {"fwd+bwd": 61.0, "data": 2.0}),
        ("0:   Rank r2 input wait was 199.7ms vs median rank r0 at 10.4ms.", {}),
        ("[rank0] checkpoint saved in 12.3s to /ckpt/step_400", {}),
        ("epoch 3 took 41s", {}),
        # a timer padding its values to a column; a separated line's last cell at its end
        (
            "[timers step 2400] rank 16 (hv-43) data_wait= 309ms fwd_bwd= 275ms allreduce_wait=   3ms",
            {"data_wait": 309.0, "fwd_bwd": 275.0, "allreduce_wait": 3.0},
        ),
        ("[2026-12-04 09:40:02] step 2400 | img/s 5231 | step 0.587s", {"step": 587.0}),
    ],
)
def test_space_separated_phases(line: str, fields: dict[str, float]) -> None:
    assert dict(timing_fields(line)) == fields


def _two_nodes(slow_node_data: float) -> str:
    out = ["# job 918100 nodes=g[12-13] 4 tasks per node; job still running"]
    for it in range(100, 1100, 100):
        for rank in range(8):
            task = rank // 4
            data = slow_node_data if task == 1 else 0.015
            wait = 0.001 if task == 1 else 0.31
            out.append(
                f"{task}: [rank{rank}] it {it} step 0.845s data {data:.3f}s allreduce_wait {wait:.3f}s"
            )
    return "\n".join(out) + "\n"


SCHEDULER = "JobId=918100 JobState=RUNNING NodeList=g[12-13] NumTasks=8\n"
CLEAN = "(no kernel messages in the job window)\n"


def test_the_ranks_slow_on_their_own_data_are_the_jobs_stragglers(tmp_path: Path) -> None:
    got = bundle_verdict(tmp_path, _two_nodes(0.33), SCHEDULER, dmesg_g12=CLEAN, dmesg_g13=CLEAN)
    assert got == ("straggler", "application", [], "none")


def test_even_data_loading_names_no_straggler(tmp_path: Path) -> None:
    got = bundle_verdict(tmp_path, _two_nodes(0.015), SCHEDULER, dmesg_g12=CLEAN, dmesg_g13=CLEAN)
    assert got[0] != "straggler" or got[2] == []


@pytest.mark.parametrize(
    ("rate", "data_wait", "verdict"),
    [
        # waits 5 s for data per 0.24 s of compute: bound by its own input pipeline
        ("0.19", "5.26", ("straggler", "application", [], "none")),
        # the same phases with compute dominating: a healthy run
        ("4.1", "0.01", ("none", "none", [], "none")),
    ],
)
def test_phases_without_a_total_make_up_the_step(
    tmp_path: Path, rate: str, data_wait: str, verdict: tuple[str, str, list[str], str]
) -> None:
    job = "# job still running (squeue: R)\n" + "".join(
        f"[13:{35 + i}:17] step {250 + 50 * i:5d} | loss 0.70{i} | {rate} batch/s | data_wait {data_wait}s | fwd+bwd 0.24s\n"
        for i in range(8)
    )
    got = bundle_verdict(tmp_path, job, "JobId=5 JobState=RUNNING NodeList=frontier[01-02]\n")
    assert got == verdict
