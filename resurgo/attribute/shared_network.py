"""Several nodes' links going down at the same moment: the switch they share, not the nodes.

attribution-labels.md tie-breaker 5: a leaf switch's outage has no culprit node and is requeued
once recovered. In an InfiniBand or Ethernet fat tree every host port is cabled to a leaf
(top-of-rack) switch; a switch that reboots or loses power takes all of its ports down at
once, so the hosts' HCAs log `Link DOWN` within the same second or two (NVIDIA, "Port Down
State Diagnostics": a port goes down when its peer, the switch port, does). A failing cable,
transceiver or HCA takes down one host's link, and independent failures on several hosts do not
fall on the same second. Links of two or more of the job's nodes going down within
SIMULTANEOUS_SECONDS of each other, with no other hardware fault of their own, are therefore
the shared switch's (hardware_network, no culprit).
"""

from __future__ import annotations

import itertools
import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.events import Event
from resurgo.contracts import Category

# The host's port to the switch going down (mlx5's `Link DOWN`, ib_core's port state change,
# a NIC's `Link is Down`): the catalogue's node-side entries.
LINK_DOWN = frozenset({"link_down_upper", "nic_link_down", "ib_port_down"})
# How close together the hosts' first `Link DOWN` lines must be to be one switch's outage
# (kernel log stamps are to the second; the HCAs notice the loss of signal within one).
SIMULTANEOUS_SECONDS = 3.0
_TIME_OF_DAY = re.compile(r"\b(?P<h>[01]\d|2[0-3]):(?P<m>[0-5]\d):(?P<s>[0-5]\d)\b")
_DAY = 86400.0


def switch_took_nodes_down(a: Analysis, v: Verdict) -> Verdict:
    """`v` without its culprits when every node it names lost its link at the same moment."""
    if v.category != Category.HARDWARE_NETWORK or len(v.culprits) < 2:
        return v
    downs: dict[str, Event] = {}
    for e in a.node_events:
        if e.node in v.culprits and e.root and e.hardware:
            if e.match.id not in LINK_DOWN:
                return v  # (a node's own HCA or cable fault speaks for that node)
            downs.setdefault(e.node, e)
    # Every named node whose kernel log the bundle holds lost its link then; nodes without one
    # (a large job's operator pastes a few) cannot say otherwise, but two must show it.
    logged = {n for h in a.node_logs if (n := a.topo.hosts.canonical(h)) in v.culprits}
    if len(downs) < 2 or not logged <= set(downs):
        return v
    times = [_seconds_of_day(e) for e in downs.values()]
    known = [t for t in times if t is not None]
    if len(known) != len(times) or _spread(known) > SIMULTANEOUS_SECONDS:
        return v
    nodes = ", ".join(sorted(downs))
    return Verdict(
        Category.HARDWARE_NETWORK, "shared|switch_outage",
        f"{v.summary}: the links of {nodes} went down at the same moment, the switch they "
        "share, not the nodes; no node to exclude", 0.75,
        ranks=v.ranks, evidence=[e.line for e in downs.values()] + [*v.evidence],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip


def _seconds_of_day(e: Event) -> float | None:
    if e.when is not None:
        return e.when.hour * 3600.0 + e.when.minute * 60.0 + e.when.second
    m = _TIME_OF_DAY.search(e.line.text[:80])
    return None if m is None else int(m["h"]) * 3600.0 + int(m["m"]) * 60.0 + int(m["s"])


def _spread(times: list[float]) -> float:
    """The widest gap between the times, on a clock that wraps at midnight."""
    ordered = sorted(times)
    gaps = [b - a for a, b in itertools.pairwise(ordered)]
    wrap = ordered[0] + _DAY - ordered[-1]
    return _DAY - max([*gaps, wrap])
