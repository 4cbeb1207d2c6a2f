"""A straggler detector's own verdicts, as the job's output prints them.

nvidia-resiliency-ext's example trainers print each straggler it identifies in a parseable
line (its `print_stragglers`): `DETECTED RELATIVE STRAGGLER SECTION=step_tail RANK=0
NODE=h100-b-01` for a rank slow in one of the job's marked code sections, `DETECTED
INDIVIDUAL STRAGGLER GPU RANK=5 NODE=dgx-07` for a rank whose GPU kernels are slow. The
section says whose time it is: a GPU verdict is the device's, a section the job's code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from resurgo.attribute.analysis import Analysis

_DETECTED = re.compile(
    r"\bDETECTED (?:RELATIVE|INDIVIDUAL) STRAGGLER (?:GPU|SECTION=(?P<section>\S+)) "
    r"RANK=(?P<rank>\d{1,7}) NODE=(?P<node>[\w.-]+)"
)


@dataclass(frozen=True)
class Detected:
    rank: int
    node: str
    section: str | None
    """The job's code section it is slow in; None: its GPU."""


def detected_stragglers(a: Analysis) -> list[Detected]:
    """Every straggler the detector named, in order."""
    found = []
    for e in a.events:
        if e.match.id == "straggler_report" and (m := _DETECTED.search(e.line.text)):
            node = a.topo.hosts.canonical(m["node"]) or m["node"]
            found.append(Detected(int(m["rank"]), node, m["section"]))
    return found
