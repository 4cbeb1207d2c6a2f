"""A checkpoint save on one rank that outlasts the job's own collective timeout.

Frameworks that gather a full state dict on rank 0 (FSDP `FULL_STATE_DICT`, torchtune's
`Saving checkpoint. This may take some time. Retrieving full model state dict...`, Megatron's
and Lightning's rank-zero saves) leave every other rank waiting in the next collective, often a
one-element all-reduce or barrier. When the write takes longer than the process group's timeout
(600 s by default, ProcessGroupNCCL), the watchdog on every other rank fires while rank 0 is
still writing shards: the job's save and timeout settings (meta-pytorch/torchtune#2093 "Multi
GPU timeout on save checkpoint"; raise the timeout, save adapters only), an application hang
that recurs at the next save.

The same holds for a dataset preprocessed on rank 0 only while the others wait at a barrier
(`main_process_first`, HF `datasets.map` with its progress bar: `Running tokenizer on dataset:
8%|...| 245000/2969526`): the preprocessing outlasts the timeout on every attempt
(hiyouga/LlamaFactory#2424: preprocess beforehand or raise the timeout).

Evidence read: ProcessGroupNCCL's `[Rank N] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=S, OpType=..., NumelIn=K, ...)` from every rank but one, that one's last lines
being a save or a preprocessing pass in progress, with no hardware fault and no file-system
error anywhere.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import strip_prefixes

_WATCHDOG = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: WorkNCCL\("
    r"SeqNum=(?P<seq>\d+)"
)
# A save being written: the framework's own progress lines (torchtune `Saving checkpoint`,
# `Model checkpoint of size 4.98 GB saved to`, Lightning/HF `Saving model checkpoint to`,
# Megatron `saving checkpoint at iteration`).
_SAVING = re.compile(
    r"(?i)\bsaving (?:the )?(?:model )?checkpoint\b|\bsaving checkpoint at iteration\b"
    r"|\bcheckpoint of size [\d.]+ ?[KMGT]?B saved to\b|\bsaving (?:the )?model (?:in|to)\b"
)
# The save's end (`Model saved in /nfs/ckpts/hf_format/samples_249600`, `Saved checkpoint to`).
_SAVED = re.compile(r"(?i)\b(?:model|checkpoint) saved (?:in|to)\b|\bsaved (?:the )?checkpoint\b")
# The catalogue's file-system entries (a client evicted, a server not responding, ENOSPC...).
_FILE_SYSTEM = re.compile(r"(?:fs_|nfs_|lustre|gpfs|weka|beegfs)")
# HF datasets' `map`/`filter` bars by their description (`Map`, `Map (num_proc=8)`, a job's
# own `desc=`: `Running tokenizer on dataset`, `Grouping texts in chunks of 1024`), not finished.
_PREPROCESSING = re.compile(
    r"(?i)\b(?:Running tokenizer on (?:\w+ )?dataset|Map|Filter|Tokeniz\w*(?: \w+){0,3}"
    r"|Grouping texts[\w ]{0,40}|Converting format of dataset|Preprocess\w*(?: \w+){0,3})"
    r"(?: \(num_proc=\d+\))?:\s+(?P<pct>\d{1,3})%\|"
)
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
        return _save_ended_after_the_timeouts(a, first)
    if _failed_otherwise(a):
        # (the save failed with an error of its own: a crash; or a fault or a slow file system
        # made the save slow: not the job's)
        return None
    before = a.lines[max(0, first - SAVE_LINES_BEFORE) : first]
    (rank,) = waiting_for
    saves = [e for e in before if _SAVING.search(e.text)]
    if saves:
        return Verdict(
            Category.APPLICATION, "hang|save_outlasts_collective_timeout",
            f"every rank but {rank} timed out in the same collective while rank {rank} was "
            "still writing a checkpoint: the job's save outlasts its own collective timeout",
            0.8, ranks=[rank], evidence=[saves[0], saves[-1], a.lines[first]],
            kind=AnomalyKind.HANG,
        )  # fmt: skip
    bars = [e for e in before if "%|" in e.text and _PREPROCESSING.search(e.text)]
    last = _PREPROCESSING.search(bars[-1].text) if bars else None
    if last is None or last["pct"] == "100":
        return None  # (no preprocessing pass, or the last one finished)
    trained = any(not _PREPROCESSING.search(a.lines[o].text) for o in a.scan.advances if o < first)
    if trained:
        return None  # (training had started: not a start-up barrier)
    return Verdict(
        Category.APPLICATION, "hang|preprocessing_outlasts_collective_timeout",
        f"every rank but {rank} timed out in the same collective while rank {rank} was still "
        "preprocessing the dataset: the job's preprocessing outlasts its own collective "
        "timeout (preprocess beforehand or raise the timeout)", 0.8,
        ranks=[rank], evidence=[bars[-1], a.lines[first]], kind=AnomalyKind.HANG,
    )  # fmt: skip


def _save_ended_after_the_timeouts(a: Analysis, first: int) -> Verdict | None:
    """The saving rank's own `Model saved` line printed only after the others' watchdogs had
    fired (it then times out too, or the log shows only some ranks' timeouts): the save
    outlasted the job's collective timeout, however many ranks the log shows."""
    if _failed_otherwise(a):
        return None
    before = a.lines[max(0, first - SAVE_LINES_BEFORE) : first]
    start = next((e for e in reversed(before) if _SAVING.search(e.text)), None)
    if start is None:
        return None
    speaker = _speaker(start.text)
    done = next(
        (e for e in a.lines[first + 1 :]
         if _SAVED.search(e.text) and _speaker(e.text) == speaker),
        None,
    )  # fmt: skip
    if done is None:
        return None
    return Verdict(
        Category.APPLICATION, "hang|save_outlasts_collective_timeout",
        "the other ranks timed out in their next collective while one rank was still writing a "
        "checkpoint, which it finished only after them: the job's save outlasts its own "
        "collective timeout", 0.8, evidence=[start, a.lines[first], done], kind=AnomalyKind.HANG,
    )  # fmt: skip


def _failed_otherwise(a: Analysis) -> bool:
    """An error of its own (not a wait), a hardware fault or a file system's trouble."""
    if any(e.origin == "job" and e.serious and e.root and e.match.kind != AnomalyKind.HANG
           for e in a.events):  # fmt: skip
        return True
    faults = (*a.events, *a.node_events)
    return any((e.serious and e.hardware) or _FILE_SYSTEM.match(e.match.id) for e in faults)


def _speaker(text: str) -> tuple[int | None, int | None]:
    pre = strip_prefixes(text)
    return pre.task, pre.rank
