"""The node the job's cross-rank timer summaries keep naming as the slowest.

`timer_summaries` reads each summary line (the slowest rank and how far behind it is); this
decides whether the recent ones name one node consistently enough to call it a straggler.
"""

from __future__ import annotations

from collections import Counter

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.slow_node_reports import ranks_per_node
from resurgo.contracts import LogLine

STEADY_REPORTS = 4
STEADY_RATIO = 1.25


def slow_in_summaries(
    a: Analysis, far: float, window: int
) -> tuple[set[str], set[int], list[LogLine]]:
    """The node (and rank) cross-rank timer summaries keep naming as the slowest, far behind.

    One slow report is noise (a checkpoint, a GC pause). A straggler is: the same node
    slowest by `far` (its time over the median) in most of the last `window` reports, at
    least three times; one named slowest in every report and far behind in three of them (its
    periodic extra work: every Nth step's logging); one rank slowest in every one of at least
    STEADY_REPORTS reports by STEADY_RATIO (a throttled GPU lags by the same amount every
    time; noise moves between ranks).
    """
    per_node = ranks_per_node(a)
    recent = [
        (node or _placed(a, rank, per_node), rank, ratio, line)
        for node, rank, ratio, line in a.scan.slowest[-window:]
    ]
    steady = (
        len(recent) >= STEADY_REPORTS
        and len({r for _, r, _, _ in recent}) == 1
        and all(ratio >= STEADY_RATIO for _, _, ratio, _ in recent)
    )
    floor = STEADY_RATIO if steady else far
    slow = [(node, line) for node, _, ratio, line in recent if ratio >= floor and node]
    counts = Counter(node for node, _ in slow)
    always = {n for n, _, _, _ in recent} if len({r for _, r, _, _ in recent}) == 1 else set()
    nodes = {n for n, c in counts.items() if c >= 3 and (c * 2 > len(recent) or n in always)}
    ranks = {r for n, r, ratio, _ in recent if n in nodes and ratio >= floor}
    return nodes, ranks, [line for node, line in slow if node in nodes][-2:]


def _placed(a: Analysis, rank: int, per_node: int | None) -> str | None:
    """A rank's node by block placement, where the job states its ranks per node."""
    if per_node is None or rank >= per_node * len(a.node_list):
        return None
    return a.node_list[rank // per_node]
