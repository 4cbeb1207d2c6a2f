"""Helpers several attribution stages share.

Which events may be the root cause (serious roots of non-victims before the scheduler's
kill), which peer a transport error names, and srun's exit lines for the blamed nodes. Used by
both the hardware stages and the root-failure/cascade stages, so they live below both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.events import Event
from resurgo.contracts import LogLine


def _peer_node(a: Analysis, e: Event) -> str | None:
    address = re.sub(r"[<:\]].*$", "", e.match.groups.get("peer", "")).strip("[")
    node = a.topo.hosts.canonical(address) if address else None
    return node if node is not None and a.in_job(node) else None


def _exit_lines(a: Analysis, nodes: Iterable[str]) -> list[LogLine]:
    wanted = set(nodes)
    return [x.line for x in a.scan.exit_order if x.node in wanted and x.status != "terminated"]


def _primary_candidates(a: Analysis, victims: set[str]) -> list[Event]:
    cut = a.kill_order
    out = []
    for e in a.events:
        if not (e.root and e.serious) or e.actor in victims:
            continue
        if cut is not None and e.order > cut:
            continue
        out.append(e)
    return out
