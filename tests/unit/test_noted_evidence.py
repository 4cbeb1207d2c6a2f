"""What an operator's notes add to a stuck job's output: when it last advanced (its lines carry
no clock), and stack dumps taken while it hung (py-spy's README; pytorch/pytorch#54059)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle

SACCT = """\
$ sacct -j 9031 --format=JobID,JobName,Partition,NodeList,Start,End,State,ExitCode
JobID          JobName       Partition NodeList                             Start                 End          State ExitCode
-------------- ------------ ---------- ---------------------- ------------------- ------------------- -------------- --------
9031           clap-pt             p4d ip-10-3-14-[21,88]     2023-03-07T02:11:40 2023-03-07T14:11:40        TIMEOUT      0:0
"""
LAST = "# last progress line at 2023-03-07T03:54:44; GPUs on both nodes at 100% util, ~70 W each from then until the kill (dcgm)\n"
STACKS = "# rank 11 py-spy: webdataset/shardlists.py:__iter__ waiting on exhausted shard list; ranks 0-10,12-15 in all_gather (torchmetrics)\n"
JOB = "".join(
    [
        *(
            f"ip-10-3-14-21: Epoch {e}:  {p}%|#####     | {24 * p}/2400 [..., 1.38it/s, loss=3.{9 - e}00, v_num=7]\n"
            for e in range(3)
            for p in (25, 50, 75)
        ),
        "ip-10-3-14-21: Validation DataLoader 0:  61%|######    | 183/300 [03:02<01:56,  1.01it/s]\n",
        "slurmstepd: error: *** JOB 9031 ON ip-10-3-14-21 CANCELLED AT 2023-03-07T14:11:40 DUE TO TIME LIMIT ***\n",
    ]
)


def verdict(tmp_path: Path, notes: str) -> tuple[str, str, list[str], str]:
    (tmp_path / "job.log").write_text(JOB)
    (tmp_path / "scheduler.txt").write_text(SACCT + notes)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]


def test_a_noted_last_progress_hours_before_the_time_limit_is_a_hang(tmp_path: Path) -> None:
    kind, category, _, _ = verdict(tmp_path, LAST)
    assert (kind, category) == ("hang", "unknown")


def test_noted_stack_dumps_with_one_rank_outside_the_collective_are_the_jobs_code(
    tmp_path: Path,
) -> None:
    assert verdict(tmp_path, LAST + STACKS) == ("hang", "application", [], "stop")


def test_every_rank_dumped_in_the_same_collective_says_nothing_about_why(tmp_path: Path) -> None:
    same = "# py-spy dump of every rank: ranks 0-15 in all_gather (torchmetrics)\n"
    kind, category, _, _ = verdict(tmp_path, LAST + same)
    assert (kind, category) == ("hang", "unknown")
