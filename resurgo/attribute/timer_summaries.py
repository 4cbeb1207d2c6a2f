"""Cross-rank timer summaries in a job's output: which rank is slowest, and how far behind.

Jobs and frameworks print the spread of a per-step time across ranks in a few shapes:
- a median and the maximum with its rank: `median 0.92s max 1.68s (rank 34 on gpu-x05)`, or
  the numbers bare under a label naming their unit (`fwd+bwd ms (mean over 250 steps): min 815
  (rank 7) median 869 max 2722 (rank 13)`);
- the extremes with the slowest rank: `rank_times[min/max]=1.28/4.87 slowest_rank=0`;
- every rank's time on one line: `per-rank fwd+bwd (s): r0=1.03 r1=0.98 ... r11=2.61` (or
  `rank0=`), the slowest against the median of all of them.

`slowest_rank` returns (the rank's node where the topology knows it, the rank, its time over
the median or the fastest); `stragglers` decides whether the reports name one node
consistently.
"""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.topology import Topology
from resurgo.detect.literals import gated

MIN_TABLE_RANKS = 4  # (fewer per-rank values are a comparison, not the job's table)

_TIMER_SUMMARY = gated(re.compile(  # (searched in every line holding "rank")
    r"\b(?:median|med|avg|mean)[\s=:]+(?P<med>\d+(?:\.\d+)?)\s*(?P<med_unit>ms|s)?\b.{0,80}?"
    r"\bmax[\s=:]+(?P<max>\d+(?:\.\d+)?)\s*(?P<max_unit>ms|s)?\s*"
    r"\((?:global )?rank[\s=:]+(?P<rank>\d+)(?:\s+on\s+(?P<host>[A-Za-z][\w.-]*))?\)",
    re.IGNORECASE,
))  # fmt: skip
# The label of a summary whose numbers carry no unit of their own, naming a time unit
# (`fwd+bwd ms (mean over 250 steps): min 815 (rank 7) median 869 max 2722 (rank 13)`); the
# same summary of a count (`tokens/step per rank: min 8232 median 9274 ...`) is not a timer.
_TIME_LABEL = re.compile(r"(?i)(?:\b(?:ms|msec|sec|seconds|time)\b|\((?:s|ms)\))(?!/)")
# A step line's cross-rank extremes and the rank behind the maximum: `step_time 4.90s
# rank_times[min/max]=1.28/4.87 slowest_rank=0`.
_EXTREMES_SUMMARY = re.compile(
    r"(?i)\bmin/max\]?\s*[=:]\s*(?P<min>\d+(?:\.\d+)?)\s*(?P<min_unit>ms|s)?\s*/\s*"
    r"(?P<max>\d+(?:\.\d+)?)\s*(?P<max_unit>ms|s)?\b.{0,80}?\bslowest[_ ]rank\s*[=:]?\s*"
    r"(?P<rank>\d{1,7})\b"
)
# One rank's value in a one-line table of every rank's (`r11=2.61`, `rank11=2.61s`).
_RANK_VALUE = re.compile(r"\b(?:r|rank)(?P<rank>\d{1,6})=(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s)?\b")


def slowest_rank(body: str, topo: Topology) -> tuple[str | None, int, float] | None:
    """A timer summary across ranks: `median 0.92s max 1.68s (rank 34 on gpu-x05)`, or the
    extremes with the slowest rank (`rank_times[min/max]=1.28/4.87 slowest_rank=0`)."""
    m = _TIMER_SUMMARY.search(body)
    if m is None and "slowest" in body and (x := _EXTREMES_SUMMARY.search(body)) is not None:
        fastest = _seconds(x["min"], x["min_unit"] or x["max_unit"])
        slowest = _seconds(x["max"], x["max_unit"] or x["min_unit"])
        rank = int(x["rank"])
        return topo.node_of(None, rank), rank, slowest / fastest if fastest > 0 else 0.0
    if m is None:
        return _rank_table(body, topo) if "0=" in body else None
    if m["med_unit"] is None and (m["max_unit"] or not _TIME_LABEL.search(body, 0, m.start())):
        return None  # (unitless numbers are times only under a label that says so)
    median = _seconds(m["med"], m["med_unit"])
    slowest = _seconds(m["max"], m["max_unit"] or m["med_unit"])
    if median <= 0:
        return None
    rank = int(m["rank"])
    node = topo.hosts.canonical(m["host"]) if m["host"] else topo.node_of(None, rank)
    return node, rank, slowest / median


def _seconds(value: str, unit: str | None) -> float:
    return float(value) / 1000.0 if unit == "ms" else float(value)


def _rank_table(body: str, topo: Topology) -> tuple[str | None, int, float] | None:
    """Every rank's time on one line, under a label naming the unit when the values carry
    none: the slowest rank against the median of them all."""
    values = {int(m["rank"]): _seconds(m["value"], m["unit"]) for m in _RANK_VALUE.finditer(body)}
    if len(values) < MIN_TABLE_RANKS or 0 not in values:
        return None
    first = _RANK_VALUE.search(body)
    assert first is not None
    if first["unit"] is None and not _TIME_LABEL.search(body, 0, first.start()):
        return None
    median = statistics.median(values.values())
    rank = max(values, key=lambda r: values[r])
    if median <= 0:
        return None
    return topo.node_of(None, rank), rank, values[rank] / median
