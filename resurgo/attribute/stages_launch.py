"""Launch failures: a node whose launcher agent never started or never joined the rendezvous.

torchrun's agents wait in the c10d rendezvous (or the TCPStore's client count) for every node;
when one node's task never prints a line (not even the agent's banner) while the others time
out waiting (`RendezvousTimeoutError`, `DistStoreError: ... waiting for clients. 8/16 clients
joined`), that node is where it went wrong. attribution-labels.md names such a node even though
no cause is visible (category unknown): it is the one to exclude.
"""

from __future__ import annotations

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import strip_prefixes

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
        Category.UNKNOWN, "launch|agent_never_started",
        f"the launcher on {names} never printed a line nor joined; the other nodes timed out "
        f"waiting for it ({waiting[0].message[:120]})", 0.6,
        culprits=silent, evidence=[e.line for e in waiting[:4]], kind=AnomalyKind.HANG,
    )  # fmt: skip
