"""A node that resolves the job's host names differently from the others: its own name service.

The processes of a job find each other by name: torchrun's rendezvous endpoint, MPICH hydra's
proxies connecting back to `mpiexec` (`[proxy:0:6@gpu-c07] HYDU_sock_connect ...: unable to
connect from "gpu-c07" to "gpu-c01" (No route to host)`), NCCL's bootstrap. Every node must give
a name the same address. A node whose own `/etc/hosts` or resolver configuration is stale (an
image restored from an old backup, a hosts file from another cluster) answers with another, and
its connections go nowhere while every other node's work: that node's software state
(attribution-labels.md: system_software, node-local configuration; exclude the node).

The answers are read from what operators paste per node: `getent hosts NAME` (`10.1.0.121
gpu-c01.cluster gpu-c01`, getent(1)) and `host NAME` (`gpu-c01 has address 10.1.0.121`,
host(1)). The odd node is the one whose answer no other node shares, when the others agree; of
two nodes that disagree, the one whose tasks failed on their own (not killed by the teardown).
"""

from __future__ import annotations

import re
from collections import defaultdict

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.stages_common import NETWORKISH
from resurgo.contracts import Category, LogLine

_ADDRESS = r"(?P<addr>\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F:]{3,39})"
_GETENT_ASKED = re.compile(r"\bgetent (?:ahosts|hosts) (?P<name>[A-Za-z][\w.-]{0,63})\s*$")
_GETENT_ANSWER = re.compile(rf"^\s*{_ADDRESS}\s+(?P<names>[A-Za-z][\w. -]{{0,200}})$")
_HOST_ANSWER = re.compile(rf"^\s*(?P<name>[A-Za-z][\w.-]{{0,63}}) has address {_ADDRESS}\s*$")


def _answers(lines: list[LogLine]) -> dict[str, tuple[str, LogLine]]:
    """Short host name → the address this node's files resolve it to, with the line."""
    out: dict[str, tuple[str, LogLine]] = {}
    asked: str | None = None
    for entry in lines:
        text = entry.text
        if "getent" in text and (q := _GETENT_ASKED.search(text)) is not None:
            asked = q["name"].split(".", 1)[0]
            continue
        if asked is not None and (m := _GETENT_ANSWER.match(text)) is not None:
            names = {n.split(".", 1)[0] for n in m["names"].split()}
            if asked in names:
                out.setdefault(asked, (m["addr"], entry))
        elif "has address" in text and (h := _HOST_ANSWER.match(text)) is not None:
            out.setdefault(h["name"].split(".", 1)[0], (h["addr"], entry))
        asked = None
    return out


def odd_name_resolution(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the odd node's name service, where one node of the failed job resolves a name the
    others resolve alike to another address."""
    if a.running or v.category not in NETWORKISH:
        return v
    by_name: dict[str, dict[str, list[tuple[str, LogLine]]]] = defaultdict(dict)
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node):
            continue
        for name, (addr, line) in _answers(lines).items():
            by_name[name].setdefault(addr, []).append((node, line))
    failed = _failed_on_their_own(a)
    for name, answers in sorted(by_name.items()):
        if len(answers) != 2:
            continue
        (addr, few), (other_addr, many) = sorted(answers.items(), key=lambda kv: len(kv[1]))
        if len(few) != 1:
            continue
        if len(many) == 1:
            # Two nodes disagree: the one whose tasks failed on their own is the odd one.
            if (few[0][0] in failed) == (many[0][0] in failed):
                continue
            if many[0][0] in failed:
                addr, few = other_addr, many
        odd, line = few[0]
        return Verdict(
            Category.SYSTEM_SOFTWARE, "node_config|name_resolution",
            f"{odd} resolves {name} to {addr}, the job's other nodes to another address: "
            f"{odd}'s own hosts file or resolver is stale", 0.8,
            culprits=[odd], ranks=v.ranks, evidence=[line, *v.evidence], kind=v.kind,
            outcome=v.outcome,
        )  # fmt: skip
    return v


def _failed_on_their_own(a: Analysis) -> set[str]:
    """Nodes whose tasks ended with an error of their own, before any teardown killed them."""
    return {
        x.node for x in a.scan.exit_order
        if x.node and x.status in ("exit", "signal") and x.code != 0 and not x.after_termination
    }  # fmt: skip
