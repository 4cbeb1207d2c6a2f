"""Peers failing to connect to an address one node advertised on an interface no other host
can reach: a host-local bridge (docker's `br-<id>` and `docker0`, libvirt's `virbr0`, a CNI or
LXC bridge, a veth) or a link-local IPv4 address (169.254.0.0/16, RFC 3927: never routed, a
BMC's USB NIC `usb0` carries one).

NCCL lists the interfaces it will use and their addresses (`NCCL INFO Bootstrap : Using
bond0:192.168.1.161<0>`, `NCCL INFO NET/Socket : Using [0]bond0:192.168.1.161<0>
[1]br-05ab815fa14e:172.19.0.1<0>`) and its peers dial those addresses (`NCCL WARN Net : Connect
to 172.19.0.1<44181> failed : Connection timed out`, `socketStartConnect: Connect to
169.254.0.1<40815> failed : Software caused connection abort`). When every failing connect goes
to such an address of one node, that node's interfaces are the cause: its network setup (NCCL's
docs: NCCL_SOCKET_IFNAME; NVIDIA/nccl#697), system_software with the node named, not the fabric
and not the node that reported the failure.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.stages_common import NETWORKISH
from resurgo.contracts import Category, LogLine
from resurgo.detect.lines import parse_nccl_prefix

_ADVERTISED = re.compile(r"\bNCCL INFO (?:Bootstrap|NET/Socket) ?: Using ")
_IF_ADDRESS = re.compile(r"(?:\[\d+\])?(?P<ifname>[\w.@-]+):(?P<ip>\d{1,3}(?:\.\d{1,3}){3})<")
_CONNECT = re.compile(r"\bConnect to (?P<ip>\d{1,3}(?:\.\d{1,3}){3})<\d+> failed\b")
# Interfaces that are no host's fabric: hypervisor and container bridges, virtual pairs.
VIRTUAL_INTERFACE = re.compile(r"^(?:virbr|docker|br-|veth|vnet|cni|flannel|lxcbr|podman)")
MAX_SCANNED = 5000


def _unroutable(ifname: str, ip: str) -> bool:
    return bool(VIRTUAL_INTERFACE.match(ifname)) or ip.startswith("169.254.")


def unroutable_advertised(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a network or unknown failure) as the one node whose unroutable address every
    failing connect went to."""
    if v.category not in NETWORKISH or v.key.startswith("shared|"):
        return v
    owners: dict[str, set[tuple[str, str]]] = {}  # address -> {(node, interface)}
    shown: dict[str, LogLine] = {}
    failed: dict[str, LogLine] = {}
    for entry in a.lines[:MAX_SCANNED]:
        text = entry.text
        if "Connect to" in text and (c := _CONNECT.search(text)) is not None:
            failed.setdefault(c["ip"], entry)
        if "Using" not in text or (m := _ADVERTISED.search(text)) is None:
            continue
        nccl = parse_nccl_prefix(text)
        node = a.topo.hosts.canonical(nccl.host) if nccl is not None else None
        if node is None:
            continue
        for f in _IF_ADDRESS.finditer(text, m.end()):
            owners.setdefault(f["ip"], set()).add((node, f["ifname"]))
            shown.setdefault(f["ip"], entry)
    if not failed:
        return v
    culprits: set[str] = set()
    for ip in failed:
        held = owners.get(ip, set())
        nodes = {n for n, _i in held}
        if len(nodes) != 1 or not all(_unroutable(i, ip) for _n, i in held):
            return v  # (a routable or shared address failed too: not this node's setup alone)
        culprits |= nodes
    if len(culprits) != 1:
        return v
    (node,) = culprits
    if not a.in_job(node) or (v.culprits == [node] and v.category == Category.SYSTEM_SOFTWARE):
        return v
    if any(e.node == node and e.root and e.hardware and e.serious for e in a.node_events):
        return v  # (its own link or NIC failed: the hardware stages decide)
    ip = next(iter(failed))
    ifname = next(i for _n, i in owners[ip])
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_unroutable_address",
        f"{v.summary}, but every failing connect goes to {ip}, which {node} advertised on "
        f"{ifname}, an interface other hosts cannot reach: {node}'s network setup", 0.8,
        culprits=[node], ranks=v.ranks, evidence=[shown[ip], failed[ip], *v.evidence[:2]],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
