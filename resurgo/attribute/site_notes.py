"""What an operator's note says about shared infrastructure, when the logs say nothing.

attribution-labels.md: a line starting with `#` is an operator's note stating a fact. A note
that a switch the job's traffic crosses (a spine, a leaf, a fabric switch) went down, lost
power or reloaded explains a uniform stall that left every node's own logs clean: a shared
network outage (hardware_network), no node to exclude, requeued once it is over (tie-breaker 5).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import Category

# A network switch by its role or name (`spine ib-sp-03`, `leaf switch ib-leaf-r07-3`,
# `leaf-ib-r07`, `core switch`, `TOR switch`), then what happened to it.
_SWITCH = (
    r"(?:\b(?:spine|leaf|core|tor|top-of-rack|edge|fabric|ib|ethernet|network)[ -]?switch\b"
    r"|\bspine\b|\bleaf\b|\bleaf-[\w-]+|\b[\w-]*-(?:sp|spine|leaf)-[\w-]+)"
)
_OUTAGE = (
    r"(?:lost power|power(?:ed)? (?:off|down|loss)|went down|was down|\bdown\b|crashed|"
    r"reloaded|rebooted|failed|outage|unreachable|isolated)"
)
_NOTED_OUTAGE = re.compile(rf"(?i){_SWITCH}.{{0,80}}?{_OUTAGE}")
_NOT_NOW = re.compile(r"(?i)\b(?:last (?:week|month|year)|yesterday|planned for|scheduled for)\b")


def noted_fabric_outage(a: Analysis, v: Verdict) -> Verdict:
    """`v` as a shared network outage when it found no cause and an operator's note states a
    switch outage."""
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
