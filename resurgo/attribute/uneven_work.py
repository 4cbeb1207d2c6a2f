"""A slow rank that is given more work than the others: the job's own split of its data.

A synchronous job waits for its slowest rank at every step. When the rank its timers single
out is also the rank whose share of the work is largest (the most tokens per step, the
longest sequences or utterances in its shard), the spread is the job's data split: a
length-sorted or bucketed sampler without shuffling, sequences left unpacked. It is not the
rank's GPU. Load imbalance is the application's (attribution-labels.md, application-level
stragglers: data imbalance); a running application straggler needs no action, and excluding
the node would only move the imbalance.

The work figures are read in the two shapes jobs print them:
- a cross-rank summary of a count, beside the timer's: `tokens/step per rank: min 8232
  median 9274 max 31891 (rank 13)`;
- each rank's own figure, one line per rank: `[rank11] sampler: shard 11 has 61323
  utterances, mean frames 8420`, `tokens/step 31891`, `avg seq len 4096`.
A rate (`tokens/s`, `samples/sec`) is speed, not work, and is never read here.
"""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes

WORK_RATIO = 1.5  # the slow rank's work over the others' median that explains its slowness
MIN_PEERS = 3  # (fewer ranks' figures are no distribution to be far from)
MAX_LINES = 200_000  # (a bound on the lines read for figures, however long the output)

_WORK = (
    r"(?:tokens?|toks|samples|sequences|seqs|frames|utterances|examples|images"
    r"|seq(?:uence)?[ _]len(?:gth)?)"
)
# Literals one of which a line must hold before a regex runs (lower-cased).
_GATE = ("tok", "sample", "seq", "frame", "utterance", "example", "image")
_RATE = re.compile(r"(?i)/\s*s(?:ec)?\b|\bper[ _]sec|\bthroughput\b")
_WORK_SUMMARY = re.compile(
    rf"(?i)\b{_WORK}\b(?P<label>.{{0,60}}?)\b(?:median|med|mean|avg)[\s=:]+"
    r"(?P<med>\d+(?:\.\d+)?)\b.{0,80}?\bmax[\s=:]+(?P<max>\d+(?:\.\d+)?)\s*"
    r"\((?:global )?rank[\s=:]+(?P<rank>\d{1,7})\)"
)
_RANK_WORK = re.compile(
    rf"(?i)\b(?P<label>(?:mean|avg|average|max)[ _]{_WORK}"
    rf"|{_WORK}(?:/step|/batch|/iter|[ _]per[ _](?:step|batch|iter))?)\s{{0,16}}[=:]?\s{{0,16}}"
    r"(?P<value>\d+(?:\.\d+)?)\b"
)
_SAID_RANK = re.compile(r"\brank[\s=:]*(\d{1,6})\b")


def uneven_work(a: Analysis, slow: list[int]) -> list[LogLine]:
    """Lines showing the slow ranks carry WORK_RATIO times the others' work, or nothing."""
    if not slow:
        return []
    wanted = set(slow)
    summaries: list[LogLine] = []
    figures: dict[str, dict[int, tuple[float, LogLine]]] = {}
    for entry in a.lines[-MAX_LINES:]:
        text = entry.text
        low = text.lower()
        if not any(g in low for g in _GATE):
            continue
        body = strip_prefixes(text).body
        m = _WORK_SUMMARY.search(body)
        if m is not None:
            if not _RATE.search(m["label"]) and int(m["rank"]) in wanted:
                median = float(m["med"])
                if median > 0 and float(m["max"]) >= WORK_RATIO * median:
                    summaries.append(entry)
            continue
        rank = _rank_of(text, body)
        if rank is None:
            continue
        for f in _RANK_WORK.finditer(body):
            label = re.sub(r"\s+", " ", f["label"].lower())
            figures.setdefault(label, {})[rank] = (float(f["value"]), entry)
    if summaries:
        return summaries[-2:]
    for by_rank in figures.values():
        others = [v for r, (v, _) in by_rank.items() if r not in wanted]
        if len(others) < MIN_PEERS:
            continue
        median = statistics.median(others)
        heavy = [
            line for r, (v, line) in by_rank.items()
            if r in wanted and median > 0 and v >= WORK_RATIO * median
        ]  # fmt: skip
        if heavy:
            return heavy[-2:]
    return []


def _rank_of(text: str, body: str) -> int | None:
    pre = strip_prefixes(text)
    if pre.rank is not None:
        return pre.rank
    m = _SAID_RANK.search(body)
    return int(m.group(1)) if m else None
