"""When a node-side fault happened, across the node's files: the earliest root-class fault in
time decides (attribution-labels.md tie-breaker 1), whichever file it is in.

Kernel and journal lines carry their time (`node_logs` reads it into `Event.when`); the BMC's
event log as `ipmitool sel list` prints it carries the record's date and time as columns
(`  1a3 | 12/03/2026 | 05:40:01 | Power Supply PS2 | Power Supply AC lost | Asserted`,
ipmitool(1) `sel list`: id | date | time | sensor | event | direction). A chassis power loss
logged by the BMC two seconds before the GPU fell off the bus is the root, not the Xid.

And whether the job was stuck before Slurm reported a node of it lost (`stuck_before_node_loss`).
"""

from __future__ import annotations

import re
from datetime import datetime

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.events import Event
from resurgo.contracts import AnomalyKind

_SEL_ROW = re.compile(
    r"^\s*[0-9a-fA-F]+\s*\|\s*(?P<mon>\d\d)/(?P<day>\d\d)/(?P<year>\d{4})\s*\|\s*"
    r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\s*(?P<ampm>[AP]M))?\s*\|"
)


def sel_time(text: str) -> datetime | None:
    """The time of an `ipmitool sel list` row, if the line is one."""
    m = _SEL_ROW.match(text)
    if m is None:
        return None
    hour = int(m["h"])
    if m["ampm"] == "PM" and hour < 12:
        hour += 12
    elif m["ampm"] == "AM" and hour == 12:
        hour = 0
    try:
        return datetime(
            int(m["year"]), int(m["mon"]), int(m["day"]), hour, int(m["m"]), int(m["s"])
        )
    except ValueError:
        return None


def fault_time(e: Event) -> datetime | None:
    """When a node event happened: its line's time, else its SEL record's."""
    if e.when is not None:
        return e.when.replace(tzinfo=None)
    return sel_time(e.line.text) if e.origin == "node" else None


def in_time_order(events: list[Event]) -> list[Event]:
    """Job-output events first in output order, then node events earliest first where their
    times are known (an event of unknown time keeps its place after those with one)."""
    job = [e for e in events if e.origin == "job"]
    node = [e for e in events if e.origin != "job"]
    timed = [(t, e.order, e) for e in node if (t := fault_time(e)) is not None]
    untimed = sorted((e for e in node if fault_time(e) is None), key=lambda e: e.order)
    first = [e for _, _, e in sorted(timed, key=lambda x: (x[0], x[1]))]
    return sorted(job, key=lambda e: e.order) + first + untimed


# Slurm's word that a node of the job was lost (srun's `Node failure on`, slurmstepd's `DUE TO
# NODE FAILURE`).
NODE_LOSS_IDS = frozenset({"srun_node_failure", "slurm_cancelled_node_failure"})


# The lost node's own kernel died (a panic: `Kernel panic - not syncing: Fatal machine check`):
# its processes ended with it, the job crashed however long its peers then waited.
NODE_DIED_IDS = frozenset({"kernel_panic"})


def stuck_before_node_loss(a: Analysis, lost: set[str]) -> bool:
    """The job's ranks timed out waiting in their collectives before Slurm reported a node
    lost, with no error and no process ending before, and nothing says the lost node's kernel
    died: the node went silent and the job stayed stuck until then, a hang (attribution-labels
    .md kind: progress stopped first, however it ended; tie-breaker 2: a node silent while the
    others time out)."""
    if any(e.node in lost and e.match.id in NODE_DIED_IDS for e in a.node_events):
        return False
    loss = min((e.order for e in a.events if e.match.id in NODE_LOSS_IDS), default=None)
    timeouts = [
        e.order for e in a.events
        if e.origin == "job" and e.cascade and e.serious and e.match.kind == AnomalyKind.HANG
        and (loss is None or e.order < loss)
    ]  # fmt: skip
    if not timeouts:
        return False
    first = min(timeouts)
    if any(e.origin == "job" and e.root and e.serious and e.order < first for e in a.events):
        return False
    return not any(x.order < first and x.status != "terminated" for x in a.scan.exit_order)
