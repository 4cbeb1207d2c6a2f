"""A running job slowing down while its own processes report long garbage-collection pauses.

Python's cyclic garbage collector stops the process that runs it; in a synchronous job every
rank then waits for the one collecting, and as the heap grows the full (generation-2)
collections get longer and land on different ranks each time: throughput declines job-wide
with no rank or node singled out (MegaScale, arXiv:2402.15627, section on stragglers: the fix
is the job's own, collecting at the same step on every rank, Megatron's `--manual-gc`). The
pauses show in the job's output as `gc.set_debug(gc.DEBUG_STATS)` prints them (`gc: done,
1234 unreachable, 0 uncollectable, 1.2345s elapsed`) or as a job's own GC hook reports them
(`python gc gen2 collection took 0.88s`). attribution-labels.md: an application straggler,
left running.
"""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.series import read_series
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import strip_prefixes

MIN_PAUSE_SECONDS = 0.5
MIN_PAUSES = 3
MIN_DECLINE = 1.05  # the last samples' slowness against the first ones'
EDGE_SAMPLES = 3

_PAUSE = re.compile(
    r"(?i)\bgc: done, .{0,80}?\b(?P<a>\d+\.\d+)s elapsed"
    r"|\bgc\b.{0,40}?\b(?:collection|pause)\b.{0,20}?\b(?:took|lasted|of)\s+(?P<b>\d+(?:\.\d+)?)\s*s\b"
)


def gc_pause_slowdown(a: Analysis) -> Verdict | None:
    """A declining running job whose ranks report long GC pauses, on several ranks."""
    if not a.running:
        return None
    pauses = []
    ranks: set[int | None] = set()
    for entry in a.lines:
        if "gc" not in entry.text.lower() or (m := _PAUSE.search(entry.text)) is None:
            continue
        if float(m["a"] or m["b"]) >= MIN_PAUSE_SECONDS:
            pauses.append(entry)
            pre = strip_prefixes(entry.text)
            ranks.add(pre.rank if pre.rank is not None else pre.task)
    if len(pauses) < MIN_PAUSES or len(ranks - {None}) < 2:
        return None
    for metric, samples in read_series(a).items():
        if len(samples) < 2 * EDGE_SAMPLES or metric.startswith("field:"):
            continue
        first = statistics.median(s.value for s in samples[:EDGE_SAMPLES])
        last = statistics.median(s.value for s in samples[-EDGE_SAMPLES:])
        lower = samples[-1].lower_is_better
        ratio = (last / first if lower else first / last) if first > 0 and last > 0 else 0.0
        if ratio >= MIN_DECLINE:
            return Verdict(
                Category.APPLICATION, f"straggler|gc_pauses|{metric}",
                f"straggler in the application: {metric} {first:.4g} -> {last:.4g} "
                f"({ratio:.2f}x slower) while {len(ranks - {None})} ranks report garbage-"
                "collection pauses of half a second or more (the job's own collection, one "
                "rank at a time)", 0.6,
                evidence=[*pauses[-2:], a.lines[samples[-1].order]],
                kind=AnomalyKind.STRAGGLER,
            )  # fmt: skip
    return None
