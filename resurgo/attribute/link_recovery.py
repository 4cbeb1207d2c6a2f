"""A port that went down and came back long before the job failed did not fail the job.

The InfiniBand core logs every state change of a port (drivers/infiniband/core/cache.c,
`ib_cache_update`: `mlx5_4: Port: 1 Link DOWN`, then `... Port: 1 Link ACTIVE` once the subnet
manager brought it back). Node files collected for a failure reach back hours or days; a flap
that recovered well before the failure (the evening before, an hour before the last step) is
history, not the failure: the job ran over the recovered link. A port still down, or one that
came back only around the failure, stays evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from resurgo.attribute.bundle import line_time, stamp_in
from resurgo.attribute.events import Event
from resurgo.contracts import LogLine

_DOWN = re.compile(
    r"\b(?P<dev>[\w.-]{1,64}): Port:? (?P<port>\d{1,3}) Link DOWN\b"
    # The cxi driver's link events and the Ethernet drivers' carrier messages come in pairs too
    # (`cxi3[hsn3] CXI_EVENT_LINK_DOWN` ... `_UP`; `ens1f0: NIC Link is Down` ... `is Up`).
    r"|\b(?P<cxi>cxi\d{1,3}\[[\w.-]{1,16}\]) CXI_EVENT_LINK_DOWN\b"
    r"|\b(?P<nic>[\w.-]{1,64}): NIC Link is Down\b"
)
# Back for this long before the failure: the job ran over the recovered port since.
RECOVERED_FOR = timedelta(minutes=30)
_DOWN_IDS = frozenset({"link_down_upper", "nic_link_down"})


def _state_of(m: re.Match[str]) -> re.Pattern[str]:
    """Both states of the port or link `m` reported down, in the same message's words."""
    if m["cxi"]:
        return re.compile(rf"\b{re.escape(m['cxi'])} CXI_EVENT_LINK_(?P<state>UP|DOWN)\b")
    if m["nic"]:
        return re.compile(rf"\b{re.escape(m['nic'])}: NIC Link is (?P<state>Up|Down)\b")
    return re.compile(rf"\b{re.escape(m['dev'])}: Port:? {m['port']} Link (?P<state>ACTIVE|DOWN)\b")


def _came_back(lines: list[LogLine], down: Event, m: re.Match[str]) -> datetime | None:
    """When the port that `down` reports came back up later in the same file, if it did and
    stayed up (no later down of that port)."""
    up = _state_of(m)
    back: datetime | None = None
    year = down.when.year if down.when is not None else None
    for entry in lines:
        if entry.source != down.line.source or entry.line_no <= down.line.line_no:
            continue
        text = entry.text
        if ("ink" not in text and "INK" not in text) or (s := up.search(text)) is None:
            continue
        if s["state"].upper() == "DOWN":
            return None  # down again: a flapping port, not a recovered one
        back = line_time(entry.text, year=year) if back is None else back
    return back


def without_recovered_flaps(
    events: list[Event], node_logs: Mapping[str, list[LogLine]], failed_at: datetime | None
) -> list[Event]:
    """`events` without the port-down reports whose port was back more than RECOVERED_FOR
    before `failed_at` (kept all when the failure's time is not known)."""
    if failed_at is None:
        return events
    failed = failed_at.replace(tzinfo=None)
    files = {ls[0].source: ls for ls in node_logs.values() if ls}
    kept: list[Event] = []
    for e in events:
        if e.match.id in _DOWN_IDS and (m := _DOWN.search(e.line.text)) is not None:
            back = _came_back(files.get(e.line.source, []), e, m)
            if back is not None and failed - back.replace(tzinfo=None) > RECOVERED_FOR:
                continue
        kept.append(e)
    return kept


def failure_time(
    end_time: datetime | None, job_tail: Iterable[LogLine], node_events: list[Event]
) -> datetime | None:
    """When the job failed, as well as the bundle dates it: Slurm's end time, else the last
    ISO stamp of the job's output (slurmstepd's `CANCELLED AT`), else the latest dated node
    fault other than a port change."""
    if end_time is not None:
        return end_time
    stamps = [t for e in job_tail if (t := stamp_in(e.text)) is not None]
    if stamps:
        return max(stamps)
    dated = [e.when for e in node_events if e.when is not None and e.match.id not in _DOWN_IDS]
    return max(dated) if dated else None
