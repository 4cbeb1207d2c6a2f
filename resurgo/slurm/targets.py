"""How the mutating Slurm commands (scontrol update/requeue/release, scancel) name one job.

Kept apart from the client so the wire contracts can name a job the same way without importing
the command layer.
"""

from __future__ import annotations

import re

# A job as the mutating commands take it: a job id, or `<array id>_<task id>` (an array task).
# Anything else is refused before it can become an argument.
JobRef = int | str
_JOB_TARGET = re.compile(r"^\d{1,10}(?:_\d{1,10})?$")


def slurm_ref(job_id: int, array_job_id: int | None, array_task_id: int | None) -> str:
    """How scontrol and scancel address exactly this job: `<array id>_<task id>` for an array
    task. Its own job id is not enough: the task that started last keeps the array's id, and a
    bare array id addresses every task (Slurm 22.05: `scontrol update JobId=<array id>` wrote
    all tasks' AdminComment, and `requeuehold` would requeue them all)."""
    if array_task_id is None or array_job_id is None:
        return str(job_id)
    return f"{array_job_id}_{array_task_id}"


def job_target(job: JobRef) -> str:
    """The scontrol/scancel argument for one job; ValueError for anything but these shapes."""
    target = str(job)
    if isinstance(job, bool) or not _JOB_TARGET.match(target):
        raise ValueError(f"not a job id or array task: {target[:40]!r}")
    return target
