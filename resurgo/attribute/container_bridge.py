"""A multi-node job whose processes dial a container bridge's address: the job's own launch
picked an interface no other host can reach.

Docker puts each container on its default bridge, 172.17.0.0/16 (Docker's networking docs:
`docker0`, the host side 172.17.0.1, containers from 172.17.0.2 up). A job that runs its
containers on that bridge (`docker run` without `--network=host`) advertises a container's own
address (`master_address=172.17.0.2`) that no other node routes to: c10d's clients then time
out dialling `(172.17.0.2, 44737)` (OpenRLHF/OpenRLHF#333 shape). Open MPI's TCP transport
does the same with `docker0` itself, whose address every node carries: a peer dialling
172.17.0.1 reaches its own host, and the BTL says `received unexpected process identifier` or
`connect() to 172.17.0.1 failed` (Open MPI FAQ, TCP: `btl_tcp_if_exclude lo,docker0`; Horovod's
troubleshooting guide for `hvd.init()` hanging). Either way the job's launch (its containers'
network, its mpirun options) chose the interface, on every attempt: an application failure
that recurs (attribution-labels.md tie-breaker 6). One node advertising its own host-local
bridge to NCCL is that node's setup instead (`unroutable_address`).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category

# c10d dialling a container's address on docker's default bridge (not the host side .1).
_C10D_TO_CONTAINER = re.compile(
    r"\bconnect to \(?\[?172\.17\.(?:0\.(?:[2-9]|\d{2,3})|[1-9]\d{0,2}\.\d{1,3})\]?[,:] ?\d{2,5}\b",
    re.IGNORECASE,
)
# Open MPI's TCP BTL reaching the wrong process or a docker0 address (btl_tcp_endpoint.c).
_BTL_WRONG_PEER = re.compile(
    r"\bbtl_tcp_endpoint\.c:\d+:mca_btl_tcp_endpoint_\w+\] (?:received unexpected process "
    r"identifier|connect\(\) to 172\.17\.\d{1,3}\.\d{1,3} failed)"
)


def dials_a_container_bridge(a: Analysis) -> Verdict | None:
    """Processes of a job on two or more nodes dialling a docker bridge address."""
    if len({n.split(".", 1)[0] for n in a.job_nodes()} | set(a.topo.hosts_seen)) < 2:
        return None
    said = [
        e for e in a.lines[:20000]
        if ("172.17." in e.text and _C10D_TO_CONTAINER.search(e.text[:2000]))
        or ("btl_tcp_endpoint" in e.text and _BTL_WRONG_PEER.search(e.text[:2000]))
    ]  # fmt: skip
    if not said:
        return None
    waited = any("timed out" in e.text for e in said) or any(
        "DUE TO TIME LIMIT" in e.text for e in a.lines[-50:]
    )
    return Verdict(
        Category.APPLICATION, "launch|container_bridge",
        "the job's processes dial an address on a container bridge (docker's 172.17.0.0/16) "
        "that other nodes cannot reach: the job's launch picked a host-local interface "
        f"({said[0].text.strip()[:120]})", 0.8,
        evidence=said[:3], kind=AnomalyKind.HANG if waited else AnomalyKind.CRASH,
    )  # fmt: skip
