"""A rendezvous store address the job's launch computed wrong, seen in how the clients fail.

Each node's store clients dialling their own node: the rendezvous address was set per node.

A multi-node launch needs one rendezvous address shared by every node: torchrun's
`--master-addr`/`--rdzv-endpoint`, or `MASTER_ADDR`, naming the node whose agent (or rank 0)
serves the c10d TCPStore. A launch that computes it on each node instead (`srun bash -c 'export
MASTER_ADDR=$(hostname); torchrun ...'`, `--master-addr=$(hostname)` expanded by every task)
sends every node's clients to their own host, where nothing listens but the first node's: each
prints c10d's `The client socket has failed to connect to [<its own host>]:29500 (errno: 111 -
Connection refused)` until the store's timeout (pytorch/pytorch#76367, MASTER_ADDR set per node
under srun). The loopback variant (`localhost`) is `stages_launch.loopback_coordinator`.

A store host written in Slurm's hostlist syntax (`gpu-b[12-15]`): the launch took the job's
compressed node list (`$SLURM_JOB_NODELIST` cut at a comma) for a host name. No resolver knows
it (c10d: `The IPv4 network addresses of (gpu-b[12-15], 29500) cannot be retrieved (gai error:
-2 - Name or service not known)`); the fix is `scontrol show hostnames` in the script
(pytorch/pytorch#107021).

Each node's agent forming a world of its own: torchrun's agents on two or more hosts each report
`The node '<host>_<pid>_0' has joined round 0 of the rendezvous '<id>' as rank 0 in a world of
size 1` (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py): one rendezvous gives its
members distinct ranks, so two rank-0 agents on different hosts met in different stores (an
endpoint of `localhost` or of each node's own name, pithtrain's script falling back to localhost
when `scontrol` is missing in the container). The workers then wait for peers that sit in the
other world until the time limit.

All are the launch's doing, on every attempt: the job script's arguments (attribution-labels.md
tie-breaker 6: a wrong launch script is `application`), whatever the script looks like.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.liveness import last_progress
from resurgo.attribute.stages_launch import STORE_CONNECT, STORE_TARGET
from resurgo.contracts import AnomalyKind, Category, LogLine


def every_node_dials_itself(a: Analysis) -> Verdict | None:
    """The store clients of two or more nodes fail to connect, each to its own node only."""
    if a.running:
        return None
    dialled: dict[str, set[str]] = {}
    said = []
    for e in a.events:
        if e.origin != "job" or e.match.id not in STORE_CONNECT or e.node is None:
            continue
        if (m := STORE_TARGET.search(e.message)) is None:
            continue
        target = a.topo.hosts.canonical(m["host"]) or m["host"].split(".", 1)[0]
        dialled.setdefault(e.node, set()).add(target)
        said.append(e)
    own = [n for n, targets in dialled.items() if targets == {n}]
    if len(own) < 2 or len(own) != len(dialled):
        return None
    nodes = ", ".join(sorted(own)[:4]) + (", ..." if len(own) > 4 else "")
    return Verdict(
        Category.APPLICATION, "launch|store_address_per_node",
        f"the rendezvous store's clients on {nodes} each dial their own node: the launch sets "
        "the store's address on each node (e.g. MASTER_ADDR=$(hostname)) instead of once for "
        "the job", 0.85, evidence=[e.line for e in said[:3]], kind=AnomalyKind.CRASH,
    )  # fmt: skip


# c10d naming the store's host and port (`(host, 29500)`, `[host]:29500`) where the host holds a
# hostlist range (`gpu-b[12-15]`, `node[01,03]`).
_HOSTLIST_TARGET = re.compile(
    r"(?:\(|\bto \[?)(?P<host>[A-Za-z][\w.-]{0,63}\[\d[\d,-]{0,60}\][\w.-]{0,32})\]?"
    r"(?:, |:)\d{2,5}\b"
)
_CONNECT = frozenset({"store_connect_failed", "rendezvous_error", "dist_store_timeout"})


def store_host_is_a_hostlist(a: Analysis) -> Verdict | None:
    """The store clients fail to reach a host named by a hostlist expression."""
    if a.running or not any(e.match.id in _CONNECT for e in a.events if e.origin == "job"):
        return None
    for entry in a.lines:
        text = entry.text
        if "[" not in text or ("c10d" not in text and "socket" not in text):
            continue
        if (m := _HOSTLIST_TARGET.search(text[:2000])) is not None:
            return Verdict(
                Category.APPLICATION, "launch|store_host_hostlist",
                f"the job's launch names its rendezvous store {m['host']}, a Slurm hostlist "
                "expression, not a host (the compressed node list taken for a name)", 0.85,
                evidence=[entry], kind=AnomalyKind.CRASH,
            )  # fmt: skip
    return None


_JOINED_ALONE = re.compile(
    r"\bThe node '(?P<node>[^'\s]{1,200})_\d+_\d+' has joined round \d+ of the rendezvous "
    r"'[^']{0,200}' as rank 0 in a world of size (?P<size>\d+)\b"
)


def separate_worlds(a: Analysis) -> Verdict | None:
    """Rank-0 agents on two or more hosts (each met only itself, or its own node's share), and
    no training step after."""
    if a.running or last_progress(a) is not None:
        return None
    alone: dict[str, LogLine] = {}
    for entry in a.lines[:5000]:
        if "as rank 0" in entry.text and (m := _JOINED_ALONE.search(entry.text)) is not None:
            host = a.topo.hosts.canonical(m["node"]) or m["node"].split(".", 1)[0]
            alone.setdefault(host, entry)
    if len(alone) < 2:
        return None
    hosts = sorted(alone)
    return Verdict(
        Category.APPLICATION, "launch|separate_worlds",
        f"torchrun's agents on {', '.join(hosts[:4])} each joined their rendezvous as rank 0: "
        "every node formed a world of its own (the launch's rendezvous endpoint is not one "
        "address shared by the job's nodes)", 0.85,
        evidence=[alone[h] for h in hosts[:3]], kind=AnomalyKind.HANG,
    )  # fmt: skip
