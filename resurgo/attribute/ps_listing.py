"""The processes a `ps` listing in a node's file shows, and whose memory they hold.

An operator who collects a node's state after an OOM often runs `ps -eo pid,user,etime,rss,cmd
--sort=-rss` (procps `ps(1)`: the header names the columns, `RSS` in KiB). When the kernel's
report of a system-wide OOM carries no task table, such a listing says who held the memory: a
process of another user, not of this job's, holding more than the job's process the kernel
killed is a leftover of another job (attribution-labels.md tie-breaker 4: the node's state).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from resurgo.contracts import LogLine

_HEADER = re.compile(r"^\s*PID\s+.*\bUSER\b.*\bRSS\b|^\s*USER\s+PID\b.*\bRSS\b")
MAX_ROWS = 200


class Process(NamedTuple):
    pid: int
    user: str
    rss_kib: int
    line: LogLine


def ps_rows(lines: Iterable[LogLine]) -> list[Process]:
    """Every row of every `ps` listing with PID, USER and RSS columns in these lines."""
    rows: list[Process] = []
    columns: list[str] = []
    taken = 0
    for entry in lines:
        text = entry.text
        if _HEADER.search(text):
            columns = text.split()
            taken = 0
            continue
        if not columns:
            continue
        cells = text.split()
        if len(cells) < len(columns) or not cells[columns.index("PID")].isdigit():
            columns = []  # (the listing ended)
            continue
        try:
            rss = int(cells[columns.index("RSS")])
        except ValueError:
            continue
        rows.append(Process(int(cells[columns.index("PID")]), cells[columns.index("USER")], rss,
                            entry))  # fmt: skip
        taken += 1
        if taken >= MAX_ROWS:
            columns = []
    return rows


def others_hold_more(
    lines: Iterable[LogLine], job_user: str, killed_rss_kib: int | None
) -> Process | None:
    """The largest process of a user other than `job_user`, where it holds more memory than
    the job's killed process (or, that unknown, than every process of the job's user)."""
    rows = ps_rows(lines)
    if not rows or not job_user:
        return None
    other = max((p for p in rows if p.user != job_user), key=lambda p: p.rss_kib, default=None)
    if other is None:
        return None
    own = max((p.rss_kib for p in rows if p.user == job_user), default=0)
    floor = max(own, killed_rss_kib or 0)
    return other if other.rss_kib > floor else None
