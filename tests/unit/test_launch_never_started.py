"""A node whose launcher never started, when no rendezvous timeout comes before the time limit.

Line formats (public sources):
- torch.distributed.elastic rendezvous/dynamic_rendezvous.py: `The node '<id>' attempts to join
  the next round of the rendezvous '<run id>'.` (glog-prefixed `I0222 08:00:12.002000 ...`).
- slurmstepd (SchedMD/slurm): `*** JOB 449021 ON gpu-q05 CANCELLED AT ... DUE TO TIME LIMIT ***`.
attribution-labels.md: a node whose agent never started is named (category unknown).
"""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.log_header import nodes_in_log
from resurgo.attribute.offline import analyse_bundle
from resurgo.contracts import LogLine

LAUNCH = (
    "+ srun -l --ntasks-per-node=1 torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d "
    "--rdzv-endpoint gpu-q05:29500 --rdzv-conf timeout=86400 train.py   "
    "# nodes gpu-q[05-08], --time=02:00:00\n"
)
KILL = (
    "slurmstepd: error: *** JOB 449021 ON gpu-q05 CANCELLED AT 2026-02-22T10:00:31 DUE TO TIME "
    "LIMIT ***\n"
)


def _join(task: int, host: str) -> str:
    return (
        f"{task}: I0222 08:00:12.002000 5511 torch/distributed/elastic/rendezvous/"
        f"dynamic_rendezvous.py:1088] The node '{host}_5511_0' attempts to join the next round "
        "of the rendezvous 'none'.\n"
    )


def test_a_note_trailing_the_traced_launch_command_names_the_nodes() -> None:
    lines = [LogLine(source="job.log", line_no=1, text=LAUNCH.rstrip("\n"))]
    assert nodes_in_log(lines) == ["gpu-q05", "gpu-q06", "gpu-q07", "gpu-q08"]


def verdict(tmp_path: Path, job_log: str) -> tuple[str, str, list[str], str]:
    (tmp_path / "job.log").write_text(job_log)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]


def test_the_silent_task_of_a_rendezvous_waiting_to_the_time_limit_is_named(
    tmp_path: Path,
) -> None:
    log = LAUNCH + _join(0, "gpu-q05") + _join(1, "gpu-q06") + _join(3, "gpu-q08") + KILL
    assert verdict(tmp_path, log) == ("hang", "unknown", ["gpu-q07"], "requeue_excluding_nodes")


def test_every_task_joined_names_no_node(tmp_path: Path) -> None:
    log = LAUNCH + "".join(_join(t, f"gpu-q0{5 + t}") for t in range(4)) + KILL
    assert verdict(tmp_path, log)[2] == []


def _participant(task: int, host: str) -> str:
    # dynamic_rendezvous.py `_add_to_participants`: `The node '<id>' added itself to the
    # participants of round <n> of the rendezvous '<run id>'. Pending sync.`
    return (
        f"{task}: I0222 08:00:12.002000 5511 torch/distributed/elastic/rendezvous/"
        f"dynamic_rendezvous.py:1134] The node '{host}_5511_0' added itself to the participants "
        "of round 0 of the rendezvous 'none'. Pending sync.\n"
    )


def test_agents_added_to_the_rendezvous_round_wait_for_the_silent_task(tmp_path: Path) -> None:
    log = LAUNCH + _participant(0, "gpu-q05") + _participant(1, "gpu-q06")
    log += _participant(3, "gpu-q08") + KILL
    assert verdict(tmp_path, log) == ("hang", "unknown", ["gpu-q07"], "requeue_excluding_nodes")


# Lightning's per-process line (lightning/fabric/utilities/distributed.py, as quoted in
# Lightning-AI/pytorch-lightning#6206): `Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8`.
MEMBERS = (
    "GPU available: True (cuda), used: True\n"
    "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8\n"
    "Initializing distributed: GLOBAL_RANK: 4, MEMBER: 5/8\n"
)


def _with_tasks(tmp_path: Path, num_tasks: int) -> tuple[str, str, list[str], str]:
    (tmp_path / "scheduler.txt").write_text(
        "$ scontrol show job 449021 | grep NumTasks\n"
        f"   NumNodes=2 NumCPUs=32 NumTasks={num_tasks}\n"
    )
    return verdict(tmp_path, MEMBERS + KILL)


def test_every_started_process_joined_a_larger_world_is_the_launch(tmp_path: Path) -> None:
    assert _with_tasks(tmp_path, 2) == ("hang", "application", [], "stop")


def test_started_processes_that_never_joined_are_not_the_launch(tmp_path: Path) -> None:
    assert _with_tasks(tmp_path, 8)[1] != "application"
