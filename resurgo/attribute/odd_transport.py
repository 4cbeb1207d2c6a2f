"""The one node whose NCCL transport differs from its peers': no InfiniBand device where they
use theirs, or a RoCE GID table that changed under a job that then slowed down.

NCCL picks its network transport per process: where `NET/IB` finds no RDMA device (`NCCL INFO
NET/IB : No device found.`) it falls back to sockets (`NET/Socket : 1 interfaces found`) while
the other nodes' processes use IB (`NET/IB : Using [0]mlx5_0:1/IB ...`, or older NCCL's `NET/IB
: Using interface eth0 for sideband communication`). A ring that mixes the two cannot connect
(`Connect to ... failed`, `unhandled system error`; NVIDIA/nccl#258). On nodes meant to be the
same, the odd one's RDMA stack is what differs: its driver, firmware or modules (the kernel
module loaded but no `/sys/class/infiniband` ports), node-local software on that node
(attribution-labels.md: system_software, the node named). A node whose own files show its
HCA failing is hardware and is left to the stages that read those.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import parse_nccl_prefix

_NO_IB = re.compile(r"\bNCCL INFO NET/IB : No device found\b")
_USES_IB = re.compile(r"\bNCCL INFO NET/IB : Using\b")
MAX_SCANNED = 5000


def node_without_ib(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a network or unknown failure naming no node) as the one node without IB."""
    if v.culprits or v.category not in (Category.HARDWARE_NETWORK, Category.UNKNOWN):
        return v
    if any(e.hardware and e.root and e.serious for e in a.node_events):
        return v  # (a node's own link or HCA failed: the hardware stages decide)
    without: dict[str, int] = {}
    with_ib: set[str] = set()
    for order, entry in enumerate(a.lines[:MAX_SCANNED]):
        if "NET/IB" not in entry.text:
            continue
        nccl = parse_nccl_prefix(entry.text)
        host = a.topo.hosts.canonical(nccl.host) if nccl is not None else None
        if host is None:
            continue
        if _NO_IB.search(entry.text):
            without.setdefault(host, order)
        elif _USES_IB.search(entry.text):
            with_ib.add(host)
    odd = sorted(set(without) - with_ib)
    if len(odd) != 1 or len(with_ib) < 2 or not a.in_job(odd[0]):
        return v
    line = a.lines[without[odd[0]]]
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_no_ib_device_one_node",
        f"{v.summary}; NCCL on {odd[0]} finds no InfiniBand device while the job's other nodes "
        f"use theirs: {odd[0]}'s RDMA stack (driver, firmware, modules)", 0.75,
        culprits=odd, ranks=v.ranks, evidence=[line, *v.evidence[:2]], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


# libibverbs' name for IBV_EVENT_GID_CHANGE, as NCCL's async-event thread prints it
# (src/transport/net_ib.cc `NET/IB : %s:%d Got async event : %s`, ibv_event_type_str).
_GID_CHANGE = re.compile(r"\bNCCL WARN NET/IB : \S+ Got async event : GID table change\b")


def gid_changed_under_slowdown(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a job-wide slowdown naming no node) as the one node whose RoCE GID table changed
    under the running job: its address moved (a DHCP lease on a port meant to be static), so
    its peers' queue pairs to it degrade; the node's network configuration (attribution-labels
    .md lists a RoCE GID changed by DHCP under system_software)."""
    if v.culprits or v.kind != AnomalyKind.STRAGGLER or v.category != Category.UNKNOWN:
        return v
    moved: dict[str, LogLine] = {}
    for entry in a.lines[:MAX_SCANNED]:
        if "GID table change" not in entry.text or not _GID_CHANGE.search(entry.text):
            continue
        nccl = parse_nccl_prefix(entry.text)
        host = a.topo.hosts.canonical(nccl.host) if nccl is not None else None
        if host is not None and a.in_job(host):
            moved.setdefault(host, entry)
    if len(moved) != 1:
        return v
    ((node, line),) = moved.items()
    return Verdict(
        Category.SYSTEM_SOFTWARE, "straggler|gid_changed",
        f"{v.summary}; NCCL on {node} reports its RoCE GID table changed under the job (its "
        "address moved): that node's network configuration", 0.7, culprits=[node],
        ranks=v.ranks, evidence=[line, *v.evidence[:2]], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
