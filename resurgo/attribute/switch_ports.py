"""A switch port that went down, joined to the job's node cabled to it.

Operators add a switch's own log and port table to a bundle (`syslog_<switch>.txt`,
`node_<switch>.txt`) when the job's nodes show nothing. A port going down during the job whose
neighbour (LLDP, or the port's description) is one of the job's nodes is that node's link: its
NIC, cable or optic, hardware_network naming the node (attribution-labels.md: cables,
transceivers and switch ports are hardware_network; a port's fault is the node's to avoid).

Formats: SONiC orchagent `updatePortOperStatus: Port Ethernet68 oper state set from up to
down` and lldpd `removing remote port Ethernet68 (neighbor gpu-c117 ens9np0)`; Cisco/Arista
`%LINK-3-UPDOWN: Interface Ethernet1/12, changed state to down`; `show interfaces description`
rows (`Ethernet68  down  up  etp18  gpu-c117:ens9np0`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.bundle import line_time
from resurgo.contracts import HARDWARE_CATEGORIES, AnomalyKind, Category, LogLine
from resurgo.policy.decide import NO_RETRY_HELPS_KEY

_PORT_DOWN = re.compile(
    r"\bPort (?P<a>[\w/.:-]+) oper state set from up to down\b"
    r"|%LINK-\d-UPDOWN: Interface (?P<b>[\w/.:-]+), changed state to down\b"
    r"|\bInterface (?P<c>[\w/.:-]+)(?: \([^)]*\))?, changed state to (?:down|linkdown)\b"
)
_LLDP_NEIGHBOUR = re.compile(r"\bremote port (?P<port>[\w/.:-]+) \(neighbor (?P<host>[\w.-]+)\b")
_DESCRIPTION_ROW = re.compile(
    r"^\s*(?P<port>[A-Za-z][\w/.:-]*\d)\s+.*?\b(?P<host>[A-Za-z][\w.-]*):\S+\s*$"
)
# A port down this long before the job started is another job's story.
BEFORE_START = timedelta(minutes=5)


def _neighbours(lines: list[LogLine]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in lines:
        if (m := _LLDP_NEIGHBOUR.search(entry.text)) is not None:
            out.setdefault(m["port"], m["host"])
        elif (d := _DESCRIPTION_ROW.match(entry.text)) is not None:
            out.setdefault(d["port"], d["host"])
    return out


def _in_window(a: Analysis, when: datetime | None) -> bool:
    job = a.job
    if when is None or job is None or job.start_time is None:
        return True
    start = job.start_time.replace(tzinfo=None)
    end = job.end_time.replace(tzinfo=None) if job.end_time is not None else None
    return start - BEFORE_START <= when and (end is None or when <= end)


def switch_port_down(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the link of the job's node whose switch port went down, when `v` names no node and
    found no hardware cause of its own."""
    if v.culprits or v.category in HARDWARE_CATEGORIES or v.key == NO_RETRY_HELPS_KEY:
        return v
    if v.category not in (Category.UNKNOWN, Category.SYSTEM_SOFTWARE):
        return v
    year = a.job.start_time.year if a.job is not None and a.job.start_time else None
    down: dict[str, LogLine] = {}
    for host, lines in a.node_logs.items():  # (all of one host's files, joined)
        if a.in_job(a.topo.hosts.canonical(host)):
            continue  # one of the job's own nodes: its kernel log speaks for itself
        neighbours = _neighbours(lines)
        for entry in lines:
            m = _PORT_DOWN.search(entry.text)
            if m is None:
                continue
            port = m["a"] or m["b"] or m["c"]
            node = a.topo.hosts.canonical(neighbours.get(port))
            if (
                node is not None
                and a.in_job(node)
                and _in_window(a, line_time(entry.text, year=year))
            ):
                down.setdefault(node, entry)
    if len(down) != 1:
        return v  # none, or several ports at once: the switch itself, not one node's link
    node, line = next(iter(down.items()))
    return Verdict(
        Category.HARDWARE_NETWORK, f"switch_port_down|{v.key}",
        f"the switch port cabled to {node} went down ({line.text.strip()[:120]}); {v.summary}",
        0.8, culprits=[node], ranks=v.ranks, evidence=[line, *v.evidence],
        kind=v.kind if v.kind is not None else AnomalyKind.CRASH, outcome=v.outcome,
    )  # fmt: skip
