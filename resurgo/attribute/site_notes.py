"""What an operator's note says about shared infrastructure, when the logs say nothing.

attribution-labels.md: a line starting with `#` is an operator's note stating a fact. A note
that a switch the job's traffic crosses (a spine, a leaf, a fabric switch) went down, lost
power or reloaded explains a uniform stall that left every node's own logs clean: a shared
network outage (hardware_network), no node to exclude, requeued once it is over (tie-breaker 5).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.shared_network import LINK_DOWN
from resurgo.contracts import Category, LogLine

# A network switch by its role or name (`spine ib-sp-03`, `leaf switch ib-leaf-r07-3`,
# `leaf-ib-r07`, `core switch`, `TOR switch`), then what happened to it.
_SWITCH = (
    r"(?:\b(?:spine|leaf|core|tor|top-of-rack|edge|fabric|ib|ethernet|network)[ -]?switch\b"
    r"|\bspine\b|\bleaf\b|\bleaf-[\w-]+|\b[\w-]*-(?:sp|spine|leaf)-[\w-]+)"
)
_OUTAGE = (
    r"(?:lost power|power(?:ed)? (?:off|down|loss)|power[- ]?cycled|went down|was down|"
    r"\bdown\b|crashed|reloaded|rebooted|failed|outage|unreachable|isolated)"
)
_NOTED_OUTAGE = re.compile(rf"(?i){_SWITCH}.{{0,80}}?{_OUTAGE}")
_NOT_NOW = re.compile(r"(?i)\b(?:last (?:week|month|year)|yesterday|planned for|scheduled for)\b")


def noted_fabric_outage(a: Analysis, v: Verdict) -> Verdict:
    """`v` as a shared network outage when it found no cause and an operator's note states a
    switch outage."""
    if v.category == Category.HARDWARE_NETWORK and len(v.culprits) >= 2:
        return _several_nodes_behind_a_noted_switch(a, v)
    if v.category != Category.UNKNOWN or v.culprits:
        return v
    for entry in [*a.header, *a.facts.lines[:60]]:
        text = entry.text.lstrip()
        if not text.startswith("#") or _NOT_NOW.search(text):
            continue
        if _NOTED_OUTAGE.search(text):
            return Verdict(
                Category.HARDWARE_NETWORK, "shared|switch_outage",
                f"{v.summary}; an operator's note states a shared switch outage", 0.7,
                ranks=v.ranks, evidence=[entry, *v.evidence], kind=v.kind, outcome=v.outcome,
            )  # fmt: skip
    return v


def _several_nodes_behind_a_noted_switch(a: Analysis, v: Verdict) -> Verdict:
    """Several nodes named only by the job's own network errors (none of their node files shows
    a fault of its own) while the fabric's log or a note pasted with the scheduler's text says a
    switch went down: the switch they share (attribution-labels.md tie-breaker 5), no culprit."""
    own = [e for e in a.node_events if e.root and e.hardware and e.node in v.culprits]
    if any(e.match.id not in LINK_DOWN for e in own):
        return v  # (a node's own HCA or cable fault speaks for that node)
    for entry in [*a.header, *a.facts.lines[:200]]:
        if _NOT_NOW.search(entry.text) or not _NOTED_OUTAGE.search(entry.text):
            continue
        return Verdict(
            Category.HARDWARE_NETWORK, "shared|switch_outage",
            f"{v.summary}: a switch outage is logged with the job ({entry.text.strip()[:120]});"
            " the switch these nodes share, no node to exclude", 0.7,
            ranks=v.ranks, evidence=[entry, *v.evidence], kind=v.kind, outcome=v.outcome,
        )  # fmt: skip
    return v


# An operator's note that the output was abridged and that every task/rank printed the same
# (`# every task reported the same watchdog; 250 copies omitted`): ranks missing from the lines
# shown are not silent (attribution-labels.md: a `#` line states a fact).
_ABRIDGED = re.compile(r"(?i)\b(?:omitted|elided|abridged|snipped|not shown|left out)\b")
_EVERY_ACTOR = re.compile(r"(?i)\b(?:every|all|each)(?:\s+one)?(?:\s+of)?(?:\s+the)?\s+(?:\d+\s+)?"
                          r"(?:tasks?|ranks?|nodes?|process(?:es)?|workers?)\b")  # fmt: skip


def all_reported_abridged(a: Analysis) -> bool:
    """The job's output carries a note that it was abridged and every actor printed the same."""
    return any(
        e.text.lstrip().startswith("#") and _ABRIDGED.search(e.text) and _EVERY_ACTOR.search(e.text)
        for e in a.lines
    )


def short_notes(a: Analysis) -> list[tuple[LogLine, str]]:
    """Operators' `#` notes of at most 600 characters (a note, not a pasted file) in the
    output's first 400 and last 100 lines and the scheduler text, each with its text stripped:
    where notes about earlier runs, the nodes and the job's ending are written."""
    return [
        (entry, text) for entry in [*a.lines[:400], *a.lines[-100:], *a.facts.lines]
        if (text := entry.text.lstrip()).startswith("#") and len(text) <= 600
    ]  # fmt: skip
