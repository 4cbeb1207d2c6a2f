"""A running job stalled, time after time, by one rank's own extra work.

NVRx's usage guide names the classic application straggler: rank 0 doing work the others do
not (generating samples for a logger, evaluating, uploading) while every other rank waits at
the next collective. Without per-rank timers it shows in the job-wide series: the steps that
contain that work take several times the others, and the rank's own output says what it was
doing just before (`iteration 2400: generating 16 samples for wandb table ...`, `sample
generation took 195.2 s`), or reports it right after (a checkpoint gathered to rank 0 and saved
synchronously: `torch.save -> step_200.pt (26.1 GB) in 65.0s`). Recurring, it costs the run a
share of its throughput for good; the job's code decides it, not a node (attribution-labels.md:
application-level stragglers).
"""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.rank_phases import OWN_WORK, node_quiet
from resurgo.attribute.series import read_series
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import strip_prefixes

SPIKE_RATIO = 3.0  # a step holding the extra work against the run's usual step
MIN_SPIKES = 2
NEAR_LINES = 6  # how far before a slow step its rank's own-work line may be
MIN_SHARE = 0.1  # the extra work's share of the run's time that makes it worth saying
AFTER_LINES = 2  # how far after a slow step its rank's report of a finished save may be
# A checkpoint save that one rank does while the others wait (a full state dict gathered to
# rank 0 and written synchronously, PyTorch FSDP's FULL_STATE_DICT with rank0_only): the job's
# checkpoint configuration, reported when done (`torch.save -> .../step_200.pt ... in 65.0s`,
# `saved checkpoint ... in 65.0 s`).
_SAVED = re.compile(
    r"(?i)\btorch\.save\b.{0,200}\bin \d+(?:\.\d+)?\s*s\b"
    r"|\bsav(?:ed|ing) (?:the )?(?:full )?(?:model )?checkpoint\b.{0,200}\bin \d+(?:\.\d+)?\s*s\b"
)


def periodic_own_work(a: Analysis) -> Verdict | None:
    if not a.running:
        return None
    samples = read_series(a).get("iteration_ms", [])
    if len(samples) < 2 * MIN_SPIKES + 3:
        return None
    usual = statistics.median(s.value for s in samples)
    spikes = [s for s in samples if usual > 0 and s.value >= SPIKE_RATIO * usual]
    if len(spikes) < MIN_SPIKES or len(spikes) * 2 >= len(samples):
        return None
    said: list[int] = []
    ranks: set[int | None] = set()
    for s in spikes:
        # Its own words just before the slow step, or its report of the work right after it
        # (a synchronous save prints when it is done: `torch.save -> step_200.pt in 65.0s`).
        near = [
            i for i in range(max(s.order - NEAR_LINES, 0), s.order)
            if OWN_WORK.search(a.lines[i].text)
        ] or [
            i for i in range(s.order + 1, min(s.order + 1 + AFTER_LINES, len(a.lines)))
            if _SAVED.search(a.lines[i].text)
        ]  # fmt: skip
        if not near:
            return None  # (a spike with nothing of the job's own work around it)
        said.append(near[-1])
        pre = strip_prefixes(a.lines[near[-1]].text)
        ranks.add(pre.rank if pre.rank is not None else pre.task)
    if len(ranks) != 1:
        return None
    lost = sum(s.value - usual for s in spikes) / sum(s.value for s in samples)
    if lost < MIN_SHARE or not node_quiet(a, a.node_list):
        return None
    (rank,) = ranks
    who = f"rank {rank}" if rank is not None else "one rank"
    return Verdict(
        Category.APPLICATION, "straggler|application", f"straggler in the application ({who}'s "
        f"own extra work stalls every rank: the {len(spikes)} steps that hold it take "
        f"{statistics.median(s.value for s in spikes) / usual:.0f}x the usual step, "
        f"{lost:.0%} of the run's time)", 0.6,
        ranks=[rank] if rank is not None else [],
        evidence=[a.lines[i] for i in said[-2:]], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip
