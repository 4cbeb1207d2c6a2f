"""A node whose own firewall turns away the job's other nodes.

Packet filters log what they refuse when asked to: firewalld with `LogDenied` prefixes each
line with the zone and verdict (`filter_IN_public_REJECT: IN=ens3f0 OUT= MAC=... SRC=10.1.0.31
DST=10.1.0.32 ... PROTO=TCP SPT=41822 DPT=43117 SYN`, firewalld's `--set-log-denied`), ufw with
`[UFW BLOCK] IN=...`, a plain iptables `LOG` target with whatever prefix the rule gives. The
fields after the prefix are the kernel's (net/netfilter/nf_log_syslog.c): the interface, the
source and destination addresses and the protocol.

A node's kernel log refusing connections from another node of the same job is that node's
software (a firewall a re-image turned on, a rule set from the wrong role), not the fabric and
not the job: NCCL's bootstrap and c10d's store then wait on the peer until a timeout or the
time limit. The node to exclude is the one that refuses.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import Category, LogLine

# The kernel's fields in their order, each found by its own search from where the one before
# ended: one pattern with a lazy gap between each pair is cubic in the line's length, and a job
# can write lines of this shape into the journal (`logger`) that node files are read from.
_VERDICT = re.compile(r"(?:REJECT|DROP|DENY|DENIED|BLOCK)\w*\]?:? ?IN=\w[\w.@-]* OUT=\S* ")
_SOURCE = re.compile(r"\bSRC=([\d.]{7,15}|[0-9a-fA-F:]{3,39}) DST=\S+ ")
_PROTOCOL = re.compile(r"\bPROTO=(?:TCP|UDP)\b")
MAX_EVIDENCE_LINES = 4
# A listing of the node's own rules whose input chain drops what no rule accepts (`iptables -S`:
# `-P INPUT DROP`; `iptables -L`: `Chain INPUT (policy DROP)`; nft: `type filter hook input
# priority 0; policy drop;`): every port NCCL's bootstrap or c10d's store picks is closed.
_DENY_ALL = re.compile(
    r"^\s*-P INPUT (?:DROP|REJECT)\b|\bChain INPUT \(policy (?:DROP|REJECT)\b"
    r"|\bhook input\b.{0,40}\bpolicy drop;"
)


def refused_source(text: str) -> str | None:
    """The source address of a packet filter's refusal line (`... REJECT: IN=... SRC=...`)."""
    verdict = _VERDICT.search(text)
    if verdict is None:
        return None
    source = _SOURCE.search(text, verdict.end())
    if source is None or _PROTOCOL.search(text, source.end()) is None:
        return None
    return source[1]


def firewalled_node(a: Analysis) -> Verdict | None:
    """The one node of the job whose kernel log shows it refusing the job's other nodes."""
    refusing: dict[str, list[LogLine]] = {}
    peers: dict[str, set[str]] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node):
            continue
        for entry in lines:
            text = entry.text
            if "IN=" not in text or "SRC=" not in text:
                continue
            src = refused_source(text)
            if src is None:
                continue
            source = a.topo.hosts.canonical(src)
            if source is None or source == node or not a.in_job(source):
                continue  # (the internet's scanners, or the node itself)
            if a.node_list and source not in a.node_list:
                continue
            refusing.setdefault(node, []).append(entry)
            peers.setdefault(node, set()).add(source)
    if not refusing:
        refusing = _denying_by_default(a) or _only_firewall_running(a)
        peers = {n: {"every peer"} for n in refusing}
    if len(refusing) != 1:
        return None  # none, or several nodes refusing each other: a site-wide rule set
    ((node, lines),) = refusing.items()
    if any(e.node == node and e.root and e.hardware for e in a.node_events):
        return None  # its own link or NIC failed: the hardware stages decide
    who = ", ".join(sorted(peers[node]))
    return Verdict(
        Category.SYSTEM_SOFTWARE, "firewall|refuses_peers",
        f"{node}'s firewall refuses connections from the job's other nodes ({who}): that "
        "node's own software", 0.75,
        culprits=[node], evidence=lines[:MAX_EVIDENCE_LINES],
    )  # fmt: skip


def _denying_by_default(a: Analysis) -> dict[str, list[LogLine]]:
    """Nodes whose own rule listing drops incoming connections by default, when it is not every
    node of the job that shows one (the site's own compute profile, then)."""
    found: dict[str, list[LogLine]] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node):
            continue
        hits = [e for e in lines if "INPUT" in e.text or "input" in e.text]
        if (deny := next((e for e in hits if _DENY_ALL.search(e.text)), None)) is not None:
            found[node] = [deny]
    if a.node_list and len(found) >= len(a.node_list):
        return {}
    return found


# A firewall service's state as the node's own tools print it: `systemctl is-active firewalld`
# (its answer on the next line), `systemctl status firewalld` (`Active: active (running)`), `ufw
# status` (`Status: active`) (systemctl(1), ufw(8)).
_FIREWALLS = r"(?:firewalld|ufw|nftables|iptables)"
_IS_ACTIVE = re.compile(rf"\bsystemctl is-active {_FIREWALLS}\b|\bfirewall-cmd --state\b")
# (`firewall-cmd --state` answers `running` or `not running`, firewall-cmd(1))
_ANSWER = re.compile(r"^\s*(active|inactive|failed|unknown|running|not running)\s*$")
_UNIT = re.compile(rf"\b{_FIREWALLS}(?:\.service)? - ")
_UNIT_ACTIVE = re.compile(r"^\s*Active: (active|inactive|failed)\b")
_UFW_STATUS = re.compile(r"^\s*Status: (active|inactive)\s*$")


def _firewall_state(lines: list[LogLine]) -> tuple[bool, LogLine] | None:
    """Whether the node's own files show its firewall service running, with the line."""
    asked: re.Pattern[str] | None = None  # (the answer awaited after a status header)
    for i, entry in enumerate(lines):
        text = entry.text
        if ("is-active" in text or "--state" in text) and _IS_ACTIVE.search(text):
            if i + 1 < len(lines) and (m := _ANSWER.match(lines[i + 1].text)) is not None:
                return m[1] in ("active", "running"), lines[i + 1]
        elif " - " in text and _UNIT.search(text):
            asked = _UNIT_ACTIVE
        elif "ufw status" in text:
            asked = _UFW_STATUS
        elif asked is not None and (m := asked.match(text)) is not None:
            return m[1] == "active", entry
    return None


def firewalls_running(a: Analysis) -> tuple[dict[str, LogLine], int]:
    """The job's nodes whose own files show their firewall service running (with the line),
    and how many show it stopped."""
    running: dict[str, LogLine] = {}
    stopped = 0
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node) or (state := _firewall_state(lines)) is None:
            continue
        if state[0]:
            running.setdefault(node, state[1])
        else:
            stopped += 1
    return running, stopped


def _only_firewall_running(a: Analysis) -> dict[str, list[LogLine]]:
    """The one node of the job whose firewall service runs, where the others' files shown say
    theirs does not: that node alone turns peers away (a package update that started it, a
    re-image from another role's profile)."""
    running, stopped = firewalls_running(a)
    return {n: [e] for n, e in running.items()} if len(running) == 1 and stopped else {}
