"""Nodes where the job's step never ran, from what sacct says each step used.

A job launched as one step per node (`srun -N1 -w host ...`, as Ray and other launchers that
start a worker on each node do) has one sacct row per step, with the node it ran on and what it
used: `MaxRSS` (the largest resident set of its tasks) and `AveCPU`/`TotalCPU` (their CPU
time). A step that ran as long as its siblings yet used no memory and no CPU never started its
program there: the node's agent never came up, whatever the reason (attribution-labels.md: a
node whose agent never started is named, category unknown). Slurm's sacct manual defines the
fields; Slurm's accounting records them per step.
"""

from __future__ import annotations

import re

from resurgo.attribute.scheduler import SchedulerFacts
from resurgo.contracts import LogLine

_STEP = re.compile(r"^\d+(?:_\d+)?\.\d+$")  # a numbered step (not `.batch`, `.extern`)
_USAGE = ("MaxRSS", "AveCPU", "TotalCPU")
_HOST = re.compile(r"^[A-Za-z][\w.-]{0,63}$")  # one node, not a hostlist expression


def _zero(value: str) -> bool:
    """`0`, `0K`, `00:00:00`, `00:00.000`: nothing used (an empty cell is not known)."""
    digits = re.sub(r"[^0-9]", "", value)
    return bool(digits) and set(digits) == {"0"} and bool(re.fullmatch(r"[0-9:.]+[KMGT]?", value))


def idle_step_nodes(facts: SchedulerFacts) -> tuple[list[str], list[LogLine]]:
    """Nodes whose own step used no memory and no CPU while at least two sibling steps on
    other nodes used some (fewer idle than busy), with the sacct rows that say so."""
    idle: dict[str, LogLine] = {}
    busy: set[str] = set()
    for step, (row, line) in facts.step_rows.items():
        node = row.get("NodeList", "")
        used = [row[k] for k in _USAGE if row.get(k)]
        if not _STEP.match(step) or not _HOST.match(node) or not used:
            continue
        if all(_zero(v) for v in used):
            idle[node] = line
        else:
            busy.add(node)
    nodes = sorted(set(idle) - busy)
    if len(busy) < 2 or not nodes or len(nodes) >= len(busy):
        return [], []
    return nodes, [idle[n] for n in nodes]
