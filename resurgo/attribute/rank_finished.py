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
