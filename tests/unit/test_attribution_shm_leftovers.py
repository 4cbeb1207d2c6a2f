"""A POSIX shared-memory object the job creates already existing in /dev/shm: an earlier process
on the node left it (mosaicml-streaming's `/000010_locals` after an interrupted job), the node's
state; a directory the job creates already existing stays the job's. Lines as CPython's
multiprocessing.shared_memory and torchrun print them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

STEPS = "".join(f"[rank0]: step {s} loss 2.{s}\n" for s in range(1, 6))
SHM = """\
[rank7]: Traceback (most recent call last):
[rank7]:   File "/opt/venv/lib/python3.11/site-packages/streaming/base/shared/prefix.py", line 192, in get_shm_prefix
[rank7]:     shm = SharedMemory(name, True, len(data))
[rank7]:   File "/usr/lib/python3.11/multiprocessing/shared_memory.py", line 104, in __init__
[rank7]:     self._fd = _posixshmem.shm_open(
[rank7]: FileExistsError: [Errno 17] File exists: '{name}'
"""
SCHED = "JobId=2260418 JobName=sft\n   JobState=FAILED Reason=NonZeroExitCode\n   NodeList=h100-sxm-06\n"


def test_a_shared_memory_name_left_in_dev_shm_is_the_nodes_state() -> None:
    a = attribute_text(STEPS + SHM.format(name="/000010_locals"), ["h100-sxm-06"], scheduler=SCHED)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["h100-sxm-06"]), a.summary
    assert first_action(a) == "requeue_excluding_nodes"


def test_a_directory_the_job_creates_existing_stays_the_jobs() -> None:
    job = STEPS + SHM.format(name="/scratch/run7/checkpoints/step_4000")
    a = attribute_text(job, ["h100-sxm-06"], scheduler=SCHED)
    assert a.category == Category.APPLICATION, a.summary
