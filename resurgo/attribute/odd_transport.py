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


def hosts_saying(
    a: Analysis,
    gate: str,
    first: re.Pattern[str],
    second: re.Pattern[str],
    limit: int | None = None,
) -> tuple[dict[str, int], set[str]]:
    """Per host (from NCCL's `host:pid:tid [dev]` prefix): where it first printed `first`, and
    the hosts that printed `second` (lines holding `gate` only; the first `limit` lines)."""
    said: dict[str, int] = {}
    other: set[str] = set()
    for order, entry in enumerate(a.lines[:limit]):
        if gate not in entry.text:
            continue
        nccl = parse_nccl_prefix(entry.text)
        host = a.topo.hosts.canonical(nccl.host) if nccl is not None else None
        if host is None:
            continue
        if first.search(entry.text):
            said.setdefault(host, order)
        elif second.search(entry.text):
            other.add(host)
    return said, other


def node_without_ib(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a network or unknown failure naming no node) as the one node without IB."""
    if v.culprits or v.category not in (Category.HARDWARE_NETWORK, Category.UNKNOWN):
        return v
    if any(e.hardware and e.root and e.serious for e in a.node_events):
        return v  # (a node's own link or HCA failed: the hardware stages decide)
    without, with_ib = hosts_saying(a, "NET/IB", _NO_IB, _USES_IB, MAX_SCANNED)
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


# A port's MTU as the node's own diagnostics print it: `ibv_devinfo`'s `active_mtu: 1024 (3)`,
# iproute2's `ip -o link show` (`4: ens1f0np0: <...,UP,LOWER_UP> mtu 1500 qdisc ...`).
_ACTIVE_MTU = re.compile(r"^\s*active_mtu:\s*(\d{3,5})\b")
_LINK_MTU = re.compile(r"^\d+: (?!lo:)\S+: <[^>]*\bUP\b[^>]*> mtu (\d{3,5}) ")


def _mtus(lines: list[LogLine]) -> frozenset[tuple[str, int]]:
    found = set()
    for entry in lines:
        if (m := _ACTIVE_MTU.match(entry.text)) is not None:
            found.add(("ibv", int(m[1])))
        elif (m := _LINK_MTU.match(entry.text)) is not None:
            found.add(("link", int(m[1])))
    return frozenset(found)


def mtu_below_peers(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a network fault on one node) as that node's configuration when its own files show
    its ports at a smaller MTU than every peer's files show theirs (a re-imaged node left with
    the default 1500): its peers' larger packets are what fail (RoCE and IB need one MTU
    across a path; attribution-labels.md: network misconfiguration is system_software)."""
    if v.category != Category.HARDWARE_NETWORK or len(v.culprits) != 1:
        return v
    (node,) = v.culprits
    by_host = {
        host: mtus
        for name, lines in a.node_logs.items()
        if (host := a.topo.hosts.canonical(name)) is not None and (mtus := _mtus(lines))
    }
    own = by_host.pop(node, frozenset())
    if not own or not by_host:
        return v
    for kind in ("ibv", "link"):
        mine = {m for k, m in own if k == kind}
        theirs = {m for mtus in by_host.values() for k, m in mtus if k == kind}
        if mine and theirs and max(mine) < min(theirs):
            return Verdict(
                Category.SYSTEM_SOFTWARE, "network_config|mtu",
                f"{v.summary}; {node}'s ports run at MTU {max(mine)} where its peers' run at "
                f"{min(theirs)}: {node}'s network configuration", 0.75, culprits=[node],
                ranks=v.ranks, evidence=v.evidence, kind=v.kind, outcome=v.outcome,
            )  # fmt: skip
    return v


# NCCL's bootstrap on a host-local virtual bridge (libvirt's virbr0 192.168.122.1, docker0,
# LXC's lxcbr0, a CNI bridge): every host has the same private address there, so peers dial
# their own host and the rendezvous never completes (NCCL's docs: NCCL_SOCKET_IFNAME; NCCL
# skips `docker` and `lo` by default, not these).
_VIRTUAL = r"(?:virbr|docker|lxcbr|cni|br-|vnet)"
_BRIDGE_BOOTSTRAP = re.compile(rf"\bNCCL INFO Bootstrap : Using {_VIRTUAL}\w*")
_REAL_BOOTSTRAP = re.compile(rf"\bNCCL INFO Bootstrap : Using (?!{_VIRTUAL})\w+")


def bootstrap_on_a_bridge(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a hang or failure naming no node) as the node(s) whose NCCL bootstrap chose a
    virtual bridge while the others chose a real interface: their interfaces' configuration."""
    if v.culprits or v.category not in (Category.UNKNOWN, Category.HARDWARE_NETWORK):
        return v
    bridged, real = hosts_saying(a, "Bootstrap", _BRIDGE_BOOTSTRAP, _REAL_BOOTSTRAP, MAX_SCANNED)
    odd = sorted(set(bridged) - real)
    if not odd or not real or not all(a.in_job(n) for n in odd):
        return v
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_bootstrap_bridge",
        f"{v.summary}; NCCL on {', '.join(odd)} bootstraps over a host-local virtual bridge "
        "while the other nodes use a real interface: the node's network configuration", 0.75,
        culprits=odd, ranks=v.ranks, evidence=[a.lines[bridged[odd[0]]], *v.evidence[:2]],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
