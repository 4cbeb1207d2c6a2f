"""The one node whose NCCL finds no InfiniBand device while its peers' NCCL uses theirs.

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
from resurgo.contracts import Category
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
