"""Horovod shut down because a rank finished while the others still called collectives.

Horovod answers every collective requested after its background loop stopped with `Horovod
has been shut down. This was caused by an exception on one of the ranks or an attempt to
allreduce, allgather or broadcast a tensor after one of the ranks finished execution`
(horovod/common/operations.cc SHUT_DOWN_ERROR). With no exception anywhere, no process killed
by a signal and no node fault, the rank that stopped first ended its own loop: an early-stopping
check or an epoch count only it evaluates, a data shard that runs out on one rank. The job's
control flow, which ends the next attempt the same way (attribution-labels.md: application).
Open MPI names the first process to exit non-zero (`The first process to do so was: Process
name: [[41210,1],3]`); when that is a rank that reported the shutdown, the rank that stopped
before it exited cleanly.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import rank_of

_SHUTDOWN = frozenset({"horovod_shutdown"})
# mpirun's and srun's words for a process ended by a signal (a kill the job did not choose).
_SIGNALLED = re.compile(
    r"\bexited on signal \d+|\bprocess \w+ was killed\b|: Killed\b|\bSegmentation fault\b|"
    r"\bBus error\b|\bout of memory\b|\bOOM\b"
)
_FIRST_EXIT = re.compile(r"^\s*Process name: \[\[\d+,\d+\],(?P<rank>\d+)\]")


def _first_to_exit(a: Analysis) -> int | None:
    """The rank Open MPI names as the first to exit with a non-zero status."""
    for i, entry in enumerate(a.lines):
        if "first process to do so was" in entry.text:
            for later in a.lines[i + 1 : i + 4]:
                if (m := _FIRST_EXIT.match(later.text)) is not None:
                    return int(m["rank"])
    return None


def rank_finished_early(a: Analysis) -> Verdict | None:
    """Horovod's shutdown on the ranks still running, and nothing else failing first."""
    reports = [e for e in a.events if e.match.id in _SHUTDOWN]
    if not reports:
        return None
    if any(e.root and e.serious for e in (*a.events, *a.node_events)):
        return None  # an exception or a node's fault stopped the first rank
    if any(x.status != "exit" for x in a.scan.exit_order) or any(
        _SIGNALLED.search(e.text) for e in a.lines[-300:]
    ):
        return None  # a process killed from outside
    reporters = {e.rank if e.rank is not None else e.task for e in reports}
    first = _first_to_exit(a)
    if first is not None and first not in reporters:
        return None
    return Verdict(
        Category.APPLICATION, "horovod_shutdown|rank_finished",
        "Horovod shut down with no exception on any rank and no process killed: a rank ended "
        "its own loop (an early-stopping check or epoch count only it evaluates) while the "
        "others still called collectives",
        # (Open MPI naming a reporter as the first non-zero exit: the rank before it exited 0)
        0.8 if first is not None else 0.7,
        evidence=[e.line for e in reports[:2]], kind=AnomalyKind.CRASH,
    )  # fmt: skip


# PyTorch's ProcessGroupNCCL destructor, at a process's exit without destroy_process_group()
# (ProcessGroupNCCL.cpp: "WARNING: destroy_process_group() was not called before program
# exit, which can leak resources"): that rank's program has ended.
_LEFT = "destroy_process_group() was not called before program exit"
# The others then lose the TCPStore its rank 0 hosts, or their peer (patterns.json).
_LOST = frozenset({"store_peer_lost", "store_recv_closed", "gloo_connection_closed"})


def rank_left_early(a: Analysis) -> Verdict | None:
    """One rank's program exited while the others still needed it: they lost the store or
    their connection to it right after, with no exception, signal or node fault first
    (falcon/habitat-baselines DDPPO: rank 0 leaves the loop before the last update and the
    other ranks' TCPStore reads get 0 bytes). The job's control flow: application."""
    lost = [e for e in a.events if e.match.id in _LOST]
    if not lost or any(
        e.root and e.serious for e in (*a.events, *a.node_events) if e.match.id not in _LOST
    ):
        return None
    if any(x.status != "exit" for x in a.scan.exit_order) or any(
        _SIGNALLED.search(e.text) for e in a.lines[-300:]
    ):
        return None  # a process killed from outside
    first = min(e.line.line_no for e in lost if e.line.source == "job.log") if any(
        e.line.source == "job.log" for e in lost) else None  # fmt: skip
    left = next(
        (e for e in a.lines if _LEFT in e.text and (first is None or e.line_no < first)), None
    )
    if left is None or first is None:
        return None
    rank = rank_of(left.text)
    if rank is not None and (
        any(e.rank == rank for e in lost)
        or any(x.task == rank and x.code for x in a.scan.exit_order)
    ):
        return None  # (the rank that left failed too: not a clean exit)
    who = f"rank {rank}" if rank is not None else "a rank"
    # (srun listing the others' failed exits and not its task's: that rank exited 0)
    clean = rank is not None and any(x.code for x in a.scan.exit_order)
    return Verdict(
        Category.APPLICATION, "rank_left_early",
        f"{who} exited (PyTorch's exit-time warning that destroy_process_group() was not "
        "called) while the other ranks still needed it; they lost the store or their peer "
        "next, with no exception, signal or node fault first: the job's own control flow",
        0.8 if clean else 0.7, evidence=[left, lost[0].line], kind=AnomalyKind.CRASH,
    )  # fmt: skip
