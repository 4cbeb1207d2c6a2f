"""Which task of an array a job's output is, when the output does not say.

An array's sacct table lists every task (`810200_4|...|FAILED|...|gpu-c12`). A task's output
that states `SLURM_ARRAY_TASK_ID` is matched by it (`scheduler.array_task_in_log`); one that
does not still names the nodes it ran on in Slurm's own lines (`srun: error: gpu-c12: task 0:
Exited with exit code 1`, `*** STEP 810204.0 ON gpu-c12 CANCELLED ...`). The one task whose
node list holds exactly those nodes is the output's; with two such tasks (two tasks on one
node) nothing is decided.
"""

from __future__ import annotations

import re

from resurgo.attribute.log_header import array_task_in_log
from resurgo.contracts import LogLine
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

_SLURM_NODE = re.compile(
    r"^(?:\d+: )?(?:srun: error: (?P<a>[A-Za-z][\w.-]{0,62}): tasks? [\d,-]+: "
    r"|slurmstepd: error: \*\*\* (?:STEP|JOB) \S+ ON (?P<b>[A-Za-z][\w.-]{0,62}) )"
)
_TASK_ROW = re.compile(r"^(?P<id>\d{1,12}_\d{1,9})\|")


def array_task_of(lines: list[LogLine], scheduler: list[LogLine]) -> str | None:
    """`<array job id>_<task id>` of the output: as it states, else by the nodes it names."""
    if (stated := array_task_in_log(lines)) is not None:
        return stated
    named = {m["a"] or m["b"] for e in lines if (m := _SLURM_NODE.match(e.text.strip()))}
    if not named:
        return None
    header: list[str] | None = None
    matching: set[str] = set()
    for entry in scheduler:
        text = entry.text.strip()
        if text.startswith("JobID|"):
            header = text.split("|")
            continue
        if header is None or "NodeList" not in header or (m := _TASK_ROW.match(text)) is None:
            continue
        cells = text.split("|")
        if len(cells) != len(header):
            continue
        try:
            nodes = set(expand_hostlist(cells[header.index("NodeList")]))
        except (ParseError, ValueError):
            continue
        if named <= nodes:
            matching.add(m["id"])
    return matching.pop() if len(matching) == 1 else None
