"""Which ranks a stalled collective waits for, from Horovod's stall inspector, and whether the
ranks took different paths through the job's collectives.

Horovod's coordinator warns when tensors were submitted by only some ranks for longer than
HOROVOD_STALL_CHECK_TIME_SECONDS (horovod/common/stall_inspector.cc, operations.cc in older
releases). Its report lists the stalled tensors with the ranks that are missing, in one of
its formats:

    Stalled ops: allreduce.fc.weight [missing ranks: 6], allreduce.aux.bias [ready ranks: 6]
    Missing ranks:
    0: [DistributedGradientTape_Allreduce/cond_0/HorovodAllreduce_grads_0, ...]
    6!: [HorovodAllreduce_grads_7]

A dead or slow rank is missing from every stalled tensor (or ranks lagging at different points
are missing from nested sets of them). When one rank waits for tensors the others never submit
while they wait for tensors it never submits, the sets cross: the ranks run different
collectives (a model whose structure depends on the rank's data, a rank-dependent branch), a
deadlock of the job's own code (attribution-labels.md: collective mismatches are `application`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes

_REPORT = re.compile(r"submitted to be reduced, gathered or broadcasted by subset of ranks")
_ENTRY = re.compile(
    r"(?P<tensor>[^\s,\[\]]+) \[(?P<kind>missing|ready) ranks?: ?(?P<ranks>[\d, ]+)\]"
)
_MISSING_HEADER = re.compile(r"^\s*Missing ranks:\s*$")
# (Read from the raw line: a launcher's `N: ` label and the row's own `0: [` look alike.)
_RANK_ROW = re.compile(r"(?:^|[:>\s])(?P<rank>\d+)!?: \[(?P<tensors>[^\]]*)\]\s*$")


def _ranks(text: str) -> set[int]:
    return {int(r) for r in re.findall(r"\d+", text)}


def stall_reports(lines: Iterable[LogLine]) -> list[tuple[LogLine, dict[str, set[int]]]]:
    """Each stall report's line and, per stalled tensor, the ranks missing from it (a `ready`
    entry is kept as the negative set, resolved against the world in `crossing`)."""
    reports: list[tuple[LogLine, dict[str, set[int]]]] = []
    in_table = False
    for entry in lines:
        body = strip_prefixes(entry.text).body
        if _REPORT.search(body):
            reports.append((entry, {}))
            in_table = False
        if not reports:
            continue
        missing = reports[-1][1]
        for m in _ENTRY.finditer(body):
            key = m["tensor"] if m["kind"] == "missing" else f"!{m['tensor']}"
            missing[key] = _ranks(m["ranks"])
        if _MISSING_HEADER.match(body):
            in_table = True
            continue
        if in_table and (row := _RANK_ROW.search(entry.text)) is not None:
            for tensor in (t.strip() for t in row["tensors"].split(",")):
                if tensor and tensor != "...":
                    missing.setdefault(tensor, set()).add(int(row["rank"]))
        elif in_table:
            in_table = False
    return [(line, tensors) for line, tensors in reports if tensors]


def crossing(tensors: dict[str, set[int]], world: int | None) -> bool:
    """Two stalled tensors whose missing ranks are not nested: rank r waits on A but not B,
    rank s on B but not A (each submitted what the other did not)."""
    ranks = set().union(*tensors.values())
    size = max(world or 0, max(ranks, default=-1) + 2)  # a `ready` set implies another rank
    everyone = set(range(size))
    sets = [everyone - ranks_ if key.startswith("!") else ranks_ for key, ranks_ in tensors.items()]
    return any(a - b and b - a for i, a in enumerate(sets) for b in sets[i + 1 :])


def mismatched_collectives(lines: Iterable[LogLine], world: int | None) -> LogLine | None:
    """The first stall report showing the ranks submitted different collectives, else None."""
    for line, tensors in stall_reports(lines):
        if crossing(tensors, world):
            return line
    return None
