"""Straggler reports that time each section of the step on every rank (FlagScale's straggler
detection, flagos-ai/FlagScale#938, printed by rank 0 every `straggler_report_interval` steps):

    === Straggler Report at Step 300 ===
    Stragglers detected: ranks [0]          (also `Detected stragglers: [0]`, or one
      data_loading:                          `Rank 0 (node)` line per straggler below it)
        Min: 3.11ms, Max: 812.40ms, Avg: 104.52ms, Slowdown: 261x
        Rank 0: 812.40ms
      forward:
        Min: 40.90ms, Max: 41.88ms, Avg: 41.30ms, Slowdown: 1.02x

The detector names the straggling ranks; the sections say where they lose their time. The
section with the largest slowdown is that phase: host work of the job's own code (data loading,
logging) with compute even is the application's straggler (`rank_phases.HOST_WORK`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes

_HEADER = re.compile(r"(?i)=+\s*Straggler Report at Step\s+(\d+)\s*=+")
_NONE = re.compile(r"(?i)\bNo stragglers detected\b")
_NAMED = re.compile(
    r"(?i)\b(?:stragglers detected|detected stragglers)\s*:\s*(?:ranks?\s*)?\[([\d,\s]*)\]"
)
_LISTED = re.compile(r"^\s*(?:-\s*)?[Rr]ank\s+(\d{1,7})\s*\(([\w.-]+)\)\s*$")
_SECTION = re.compile(r"^\s*([A-Za-z_][\w.+/-]{0,60}):\s*$")
_SLOWDOWN = re.compile(r"\bMin:.*\bMax:.*\bSlowdown:\s*(\d+(?:\.\d+)?)x\b")
REPORT_LINES = 400  # a report's lines follow its header; past this, a line is the job's again
_RANK_TIME = re.compile(r"^\s*Rank\s+(\d{1,7}):\s*(\d+(?:\.\d+)?)\s*ms\b")


@dataclass
class SectionReport:
    step: int
    ranks: set[int] = field(default_factory=set)
    """The ranks the detector names as stragglers."""
    nodes: dict[int, str] = field(default_factory=dict)
    slowdown: dict[str, float] = field(default_factory=dict)
    """Section → its max over min time across ranks."""
    slowest: dict[str, int] = field(default_factory=dict)
    """Section → the rank that took longest in it."""
    lines: list[LogLine] = field(default_factory=list)

    def phase(self) -> str:
        """The section where the named stragglers lose the most (the largest slowdown among
        those whose slowest rank is a named straggler), or ""."""
        own = {s: x for s, x in self.slowdown.items() if self.slowest.get(s, -1) in self.ranks}
        if not own and not self.slowest and self.ranks:
            own = self.slowdown  # (no per-rank rows printed: the largest slowdown is theirs)
        return max(own, key=own.__getitem__) if own else ""


def section_reports(lines: list[LogLine]) -> list[SectionReport]:
    """The reports in the job's output, in order (one with no straggler has no ranks)."""
    out: list[SectionReport] = []
    current: SectionReport | None = None
    section = ""
    listing = False
    best: dict[str, float] = {}
    start = 0
    for index, entry in enumerate(lines):
        text = entry.text
        if "traggler" in text and (h := _HEADER.search(text)) is not None:
            current = SectionReport(int(h[1]))
            out.append(current)
            section, listing, best, start = "", False, {}, index
            continue
        if current is None:
            continue
        if index - start > REPORT_LINES:
            current = None
            continue
        body = strip_prefixes(text).body
        if (named := _NAMED.search(body)) is not None and not _NONE.search(body):
            current.ranks |= {int(r) for r in re.findall(r"\d+", named[1])}
            current.lines.append(entry)
            listing = True
        elif listing and (listed := _LISTED.match(body)) is not None:
            current.ranks.add(int(listed[1]))
            current.nodes[int(listed[1])] = listed[2]
        elif (m := _SECTION.match(body)) is not None:
            section, listing = m[1], False
        elif section and (s := _SLOWDOWN.search(body)) is not None:
            current.slowdown[section] = float(s[1])
            if current.ranks:
                current.lines.append(entry)
        elif (
            section
            and (r := _RANK_TIME.match(body)) is not None
            and float(r[2]) > best.get(section, -1.0)
        ):
            best[section] = float(r[2])
            current.slowest[section] = int(r[1])
    return out
