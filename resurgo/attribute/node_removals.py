"""Nodes Slurm took from a job for a reason that is not a fault of theirs, and the drain or
down reasons that do name one.

- slurmctld's power_save (src/slurmctld/power_save.c): `node a3-gpu-dy-5 not resumed by
  ResumeTimeout(1200) - marking down and power_save`: a cloud node that never came up is
  replaced by a fresh instance, nothing of it to leave out.
- An operator's `scontrol update NodeName=... State=DOWN Reason=...` (slurmctld's
  src/slurmctld/node_mgr.c `update_node`: `update_node: node rk3-n13 reason set to: ...`, then
  `update_node: node rk3-n13 state set to DOWN`) kills the jobs on it as a node failure. With a
  reason that names no hardware (a planned PDU replacement, a rack move) the job's end is an
  administrative action: nothing of the node to blame, the requeue finds other nodes.
- A node failure (sacct NODE_FAIL) that names no node: slurmctld's own reason for the job's node
  going down (`Not responding`, `Node unexpectedly rebooted`, src/slurmctld/node_mgr.c and
  ping_nodes.c, cut short by sinfo -R's 20-character REASON column), or the job's only node.
  When Slurm gives the same reason for many nodes outside the job too (a room's power, a
  cluster-wide reboot), the loss was shared: no node of the job's to leave out.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import Category, LogLine

_SOFTWARE_REASON = re.compile(
    r"hostengine|daemon|service|not running|version|mount|filesystem|file system|munge|"
    r"slurmd|upgrade|package|check_(?:fs|ps|file)_"
)


def hardware_reason(reason: str) -> Category | None:
    """The hardware a drain or down reason names, if it names any."""
    text = reason.lower()
    if _SOFTWARE_REASON.search(text):
        return None  # a daemon, a mount, a package: the node's software (or an operator's)
    if re.search(r"\bxid\b|\becc\b|\bgpu|nvlink|nvswitch|fallen off|dcgm|row remap", text):
        return Category.HARDWARE_GPU
    if re.search(r"infiniband|\bib\b|\bhca\b|mlx\d|link (?:down|flap)|\bnic\b|port down", text):
        return Category.HARDWARE_NETWORK
    if re.search(
        r"machine check|\bmce\b|dimm|memory error|power supply|\bpsu\b|\bfan\b|thermal|"
        r"overheat|\bnvme\b|disk fail|hardware|hw error|\bbmc\b|\bnhc\b|health ?check",
        text,
    ):
        return Category.HARDWARE_HOST
    return None


_NOT_RESUMED = re.compile(r"\bnode (?P<node>\S+) not resumed by ResumeTimeout\b")


def not_resumed(a: Analysis, node: str) -> bool:
    """The controller woke `node` for the job and it never came up (power saving)."""
    return any(
        (m := _NOT_RESUMED.search(e.text)) is not None and a.topo.hosts.canonical(m["node"]) == node
        for e in a.facts.lines
        if "ResumeTimeout" in e.text
    )


_UPDATE = re.compile(
    r"\bupdate_node: node (?P<node>[\w.-]+) (?:state set to (?P<state>DOWN)\b"
    r"|reason set to: (?P<reason>.{1,200}))"
)


def set_down_by_operator(a: Analysis, nodes: set[str]) -> tuple[str, list[LogLine]] | None:
    """Every one of `nodes` set DOWN through `scontrol update` with a reason naming no hardware:
    that reason, and the controller's lines saying so."""
    down: set[str] = set()
    reasons: dict[str, str] = {}
    lines: list[LogLine] = []
    for entry in a.facts.lines:
        if "update_node" not in entry.text or (m := _UPDATE.search(entry.text)) is None:
            continue
        node = a.topo.hosts.canonical(m["node"])
        if node not in nodes:
            continue
        if m["state"]:
            down.add(node)
            lines.append(entry)
        else:
            reasons[node] = m["reason"].strip()
    if not nodes or down != nodes or set(reasons) != nodes:
        return None
    if any(hardware_reason(r) is not None for r in reasons.values()):
        return None  # (a node taken out for its hardware: that hardware's failure)
    return sorted(set(reasons.values()))[0], lines


_LOST_REASON = re.compile(r"(?i)^\s*(?:not respond|node unexpectedly re)")


def lost_by_slurm(a: Analysis) -> list[str]:
    """The job's nodes Slurm says it lost (its reason for them), else its only node."""
    said = sorted({
        lost for r in a.facts.reasons
        if (lost := a.topo.hosts.canonical(r.node)) is not None and a.in_job(lost)
        and _LOST_REASON.search(r.reason)
    })  # fmt: skip
    return said or (list(a.node_list) if len(a.node_list) == 1 else [])


SHARED_LOSS_NODES = 5  # other nodes lost for the same reason that make the loss a shared one


def lost_together(a: Analysis, nodes: list[str]) -> bool:
    """Slurm's reason for each of `nodes` is also its reason for SHARED_LOSS_NODES or more
    nodes outside the job."""
    if not nodes:
        return False
    by_reason: dict[str, set[str]] = {}
    for r in a.facts.reasons:
        if _LOST_REASON.search(r.reason):
            by_reason.setdefault(r.reason.strip().lower(), set()).add(r.node)
    for node in nodes:
        said = [s for s in by_reason.values() if node in s]
        if not said or all(
            len({n for n in s if not a.in_job(n)}) < SHARED_LOSS_NODES for s in said
        ):
            return False
    return True
