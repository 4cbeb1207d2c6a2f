"""Is a running job still training? Its progress lines' times against when Slurm was asked."""

from __future__ import annotations

import itertools
import re
import statistics
from datetime import datetime

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.stragglers import stragglers
from resurgo.contracts import Category

# A running job is hung when its progress lines stop for this many of their usual intervals
# (and at least the floor): a collective timeout is 10 minutes by default.
HANG_SILENCE_FACTOR = 10.0
HANG_SILENCE_FLOOR_SECONDS = 600.0
_STAMP = re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\b")


def progress_silence(a: Analysis) -> tuple[float, float] | None:
    """(seconds from the last progress line to the scheduler's observation, the silence that
    would be a hang) where the log's progress lines carry times and the scheduler's record says
    when it was taken (StartTime + RunTime; squeue's TIME from the log's first time stamp)."""
    times = a.scan.progress_times
    if len(times) < 2:
        return None
    observed = a.facts.observed_at()
    if observed is None and (run := a.facts.run_time()) is not None:
        first = next((t for e in a.lines[:200] if (t := _any_time(e.text))), None)
        observed = first + run if first is not None else None
    if observed is None:
        return None
    gaps = [(b - a_).total_seconds() for a_, b in itertools.pairwise(times) if b > a_]
    typical = statistics.median(gaps) if gaps else 0.0
    silence = (observed - times[-1]).total_seconds()
    return silence, max(HANG_SILENCE_FACTOR * typical, HANG_SILENCE_FLOOR_SECONDS)


def _any_time(text: str) -> datetime | None:
    m = _STAMP.search(text)
    return datetime.fromisoformat(m.group().replace("T", " ")) if m else None


def running_fine(a: Analysis) -> Verdict | None:
    """A running job whose output shows training advancing up to when Slurm was asked."""
    measured = progress_silence(a)
    if measured is None or measured[0] > measured[1] or stragglers(a) is not None:
        return None
    last = a.scan.advances[-1] if a.scan.advances else -1
    if any(e.serious and (e.root or e.cascade) and e.order > last for e in a.events):
        return None  # something failed after the last progress line
    return Verdict(
        Category.NONE, "none",
        f"job running, training at iteration {a.scan.max_iteration} "
        f"{max(measured[0], 0.0):.0f}s before the scheduler's record", 0.8,
        evidence=a.lines[-2:], kind="none",
    )  # fmt: skip
