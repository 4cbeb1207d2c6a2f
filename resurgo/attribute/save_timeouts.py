"""A checkpoint save on one rank that outlasts the job's own collective timeout.

Frameworks that gather a full state dict on rank 0 (FSDP `FULL_STATE_DICT`, torchtune's
`Saving checkpoint. This may take some time. Retrieving full model state dict...`, Megatron's
and Lightning's rank-zero saves) leave every other rank waiting in the next collective, often a
one-element all-reduce or barrier. When the write takes longer than the process group's timeout
(600 s by default, ProcessGroupNCCL), the watchdog on every other rank fires while rank 0 is
still writing shards: the job's save and timeout settings (meta-pytorch/torchtune#2093 "Multi
GPU timeout on save checkpoint"; raise the timeout, save adapters only), an application hang
that recurs at the next save.

Evidence read: ProcessGroupNCCL's `[Rank N] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=S, OpType=..., NumelIn=K, ...)` from every rank but one, that one's last lines
being a save in progress, with no hardware fault and no file-system error anywhere.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category

_WATCHDOG = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: WorkNCCL\("
    r"SeqNum=(?P<seq>\d+)"
)
# A save being written: the framework's own progress lines (torchtune `Saving checkpoint`,
# `Model checkpoint of size 4.98 GB saved to`, Lightning/HF `Saving model checkpoint to`,
# Megatron `saving checkpoint at iteration`).
_SAVING = re.compile(
    r"(?i)\bsaving (?:the )?(?:model )?checkpoint\b|\bsaving checkpoint at iteration\b"
    r"|\bcheckpoint of size [\d.]+ ?[KMGT]?B saved to\b"
)
# The catalogue's file-system entries (a client evicted, a server not responding, ENOSPC...).
_FILE_SYSTEM = re.compile(r"(?:fs_|nfs_|lustre|gpfs|weka|beegfs)")
# How far before the first timeout the save's last line may be (the default timeout is 600 s;
# lines are counted, as save progress lines carry no clock of their own).
SAVE_LINES_BEFORE = 400


def save_outlasts_timeout(a: Analysis) -> Verdict | None:
    timed_out: dict[int, int] = {}
    first = None
    for i, entry in enumerate(a.lines):
        if "Watchdog caught" in entry.text and (m := _WATCHDOG.search(entry.text)):
            timed_out.setdefault(int(m["rank"]), int(m["seq"]))
            first = i if first is None else first
    if first is None or len(timed_out) < 2 or len(set(timed_out.values())) != 1:
        return None
    world = max(a.topo.world_size() or 0, max(timed_out) + 1)
    waiting_for = set(range(world)) - set(timed_out)
    if len(waiting_for) != 1:
        return None
    if any(e.origin == "job" and e.serious and e.root and e.match.kind != AnomalyKind.HANG
           for e in a.events):  # fmt: skip
        return None  # (the save, or something else, failed with an error of its own: a crash)
    faults = (*a.events, *a.node_events)
    if any((e.serious and e.hardware) or _FILE_SYSTEM.match(e.match.id) for e in faults):
        return None  # (a fault or a slow file system makes the save slow: not the job's)
    before = a.lines[max(0, first - SAVE_LINES_BEFORE) : first]
    saves = [e for e in before if _SAVING.search(e.text)]
    if not saves:
        return None
    (rank,) = waiting_for
    return Verdict(
        Category.APPLICATION, "hang|save_outlasts_collective_timeout",
        f"every rank but {rank} timed out in the same collective while rank {rank} was still "
        "writing a checkpoint: the job's save outlasts its own collective timeout", 0.8,
        ranks=[rank], evidence=[saves[0], saves[-1], a.lines[first]], kind=AnomalyKind.HANG,
    )  # fmt: skip
