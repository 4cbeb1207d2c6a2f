"""How people name a job: `500`, an array task `500_1`, a hetjob component `500+1`; and the
job a Resurgo workflow id names. Pure parsing, shared by the gateway's reads and its models."""

from __future__ import annotations

import re
from dataclasses import dataclass

# How people name a job in a path: `500`, an array task `500_1` (the array's job id, the task's
# index), or a heterogeneous job's component `500+1` (one workflow watches the whole hetjob,
# named by its leader). Anything else is refused before it reaches a query.
JOB_REF = re.compile(r"^([0-9]{1,19})(?:([_+])([0-9]{1,10}))?$")
JOB_REF_PATTERN = JOB_REF.pattern
MAX_JOB_ID = 2**63 - 1
MAX_TASK_ID = 2**32 - 1


@dataclass(frozen=True)
class SlurmRef:
    """One job as Slurm users name it: a job id, or an array's job id and a task index."""

    job_id: int
    task_id: int | None = None

    def __str__(self) -> str:
        return str(self.job_id) if self.task_id is None else f"{self.job_id}_{self.task_id}"


def slurm_ref(text: str | int) -> SlurmRef | None:
    """`500`, `500_1` or `500+1` -> the job (a hetjob component names its leader); None when
    `text` is not one of those shapes or out of Slurm's range."""
    if isinstance(text, int):
        return SlurmRef(text) if 0 <= text <= MAX_JOB_ID else None
    m = JOB_REF.fullmatch(text)
    if m is None or int(m[1]) > MAX_JOB_ID or (m[3] is not None and int(m[3]) > MAX_TASK_ID):
        return None
    if m[2] == "_":
        return SlurmRef(int(m[1]), int(m[3]))
    return SlurmRef(int(m[1]))


def parse_workflow_id(workflow_id: str) -> tuple[str, SlurmRef] | None:
    """`resurgo:<cluster>:<job id | array id>_<task id>:<submit epoch>` -> (cluster, job).

    Not a job's workflow (an array's coordinator, a notice, anything else): None."""
    if not workflow_id.startswith("resurgo:"):
        return None
    parts = workflow_id[len("resurgo:") :].rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or "+" in parts[1]:
        return None
    ref = slurm_ref(parts[1])
    return None if ref is None else (parts[0], ref)


__all__ = ["JOB_REF_PATTERN", "SlurmRef", "parse_workflow_id", "slurm_ref"]
