"""Launch failures: a node whose launcher agent never started or never joined the rendezvous.

torchrun's agents wait in the c10d rendezvous (or the TCPStore's client count) for every node;
when one node's task never prints a line (not even the agent's banner) while the others time
out waiting (`RendezvousTimeoutError`, `DistStoreError: ... waiting for clients. 8/16 clients
joined`), that node is where it went wrong. attribution-labels.md names such a node even though
no cause is visible (category unknown): it is the one to exclude.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import parse_nccl_prefix, strip_prefixes
from resurgo.policy.decide import AGENT_NEVER_STARTED_KEY

# The catalogue's entries for waiting on peers that never came (patterns.json).
_WAITING = frozenset({"rendezvous_error", "dist_store_timeout"})


def _spoke(a: Analysis) -> set[int]:
    """srun task labels (`N:`) that prefixed at least one line of the job's output."""
    tasks: set[int] = set()
    for entry in a.lines:
        if entry.text.startswith(("srun:", "slurmstepd:", "#")):
            continue
        task = strip_prefixes(entry.text).task
        if task is not None:
            tasks.add(task)
    return tasks


def agent_never_started(a: Analysis) -> Verdict | None:
    roots = [e for e in a.events if e.root and e.serious and e.origin == "job"]
    waiting = [
        e for e in roots
        if e.match.id in _WAITING and ("Timeout" in e.message or "imed out" in e.message)
    ]  # fmt: skip
    if not waiting or len(waiting) != len(roots):
        return None
    spoke = _spoke(a)
    # One task per node: the node list's order, else srun's own lines (`srun: error: gx-d04:
    # task 3: Killed`) say which node each task ran on.
    tasks = set(range(len(a.node_list))) if a.node_list else set(a.topo.tasks_seen)
    if len(tasks) < 2 or not spoke or max(spoke) >= len(tasks):
        return None  # not one task per node: task numbers do not name nodes
    where = {t: a.node_list[t] if a.node_list else a.topo.node_of(t, None) for t in tasks}
    silent = sorted({n for t in tasks - spoke if (n := where[t]) is not None})
    if not silent or len(silent) * 2 > len(tasks) or len(set(where.values())) < len(tasks):
        return None
    names = ", ".join(silent)
    return Verdict(
        Category.UNKNOWN, AGENT_NEVER_STARTED_KEY,
        f"the launcher on {names} never printed a line nor joined; the other nodes timed out "
        f"waiting for it ({waiting[0].message[:120]})", 0.6,
        culprits=silent, evidence=[e.line for e in waiting[:4]], kind=AnomalyKind.HANG,
    )  # fmt: skip


# EHOSTUNREACH (errno 113) as NCCL, c10d and Python print it, with the address it could not
# reach. A host whose own firewall rejects (firewalld's default `icmp-host-prohibited`) or
# whose route is gone answers every peer this way, while the fabric still carries the rest.
_NO_ROUTE = re.compile(
    r"(?:Connect to (?P<ip>\d{1,3}(?:\.\d{1,3}){3})<\d+> returned 113\(No route to host\)"
    r"|failed to connect to \[?(?P<host>[\w.-]+?)\]?:\d+ \(errno: 113 - No route to host\)"
    r"|\[Errno 113\] No route to host.{0,80}?\(['\"]?(?P<addr>[\w.-]+)['\"]?, \d+\))"
)


def unreachable_node(a: Analysis) -> Verdict | None:
    """Every peer gets `No route to host` from the same one node of the job, which reports no
    such trouble itself: that node's firewall or routing (its own software), not the fabric."""
    targets: set[str] = set()
    reporters: set[str] = set()
    lines = []
    for entry in a.lines:
        if "No route to host" not in entry.text:
            continue
        m = _NO_ROUTE.search(entry.text)
        if m is None:
            continue
        target = a.topo.hosts.canonical(m.group("ip") or m.group("host") or m.group("addr"))
        if target is None or not a.in_job(target) or (a.node_list and target not in a.node_list):
            return None  # an address outside the job (a store, a registry): not this rule's
        targets.add(target)
        pre = strip_prefixes(entry.text)
        nccl = parse_nccl_prefix(entry.text)
        reporter = a.topo.hosts.canonical(nccl.host if nccl else pre.host) or a.topo.node_of(
            pre.task, pre.rank
        )
        if reporter is not None:
            reporters.add(reporter)
        lines.append(entry)
    if len(targets) != 1 or not reporters:
        return None
    (target,) = targets
    if target in reporters:
        return None
    if any(e.node == target and e.root and e.hardware for e in a.node_events):
        return None  # its own logs show a link or NIC fault: the hardware stages decide
    return Verdict(
        Category.SYSTEM_SOFTWARE, "unreachable|no_route_to_host",
        f"{target} refuses its peers (No route to host from {', '.join(sorted(reporters))}): "
        "a firewall or route on that node", 0.75,
        culprits=[target], evidence=lines[:4], kind=AnomalyKind.CRASH,
    )  # fmt: skip
