"""Whose memory an OOM kill in a node's kernel log was about, from the kernel's own report.

The kernel prints one report per OOM kill (Linux mm/oom_kill.c `dump_header`,
`dump_tasks`, `oom_kill_process`; mm/memcontrol.c for memory cgroups):

    python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
    Memory cgroup stats for /slurm/uid_1000/job_42/step_0/task_1:
    Tasks state (memory values in pages):
    [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name
    [  77121] 41234 77121 98211741 93122817 752312320        0             0 python3
    oom-kill:constraint=CONSTRAINT_NONE,...,global_oom,task_memcg=/system.slice/slurmstepd.scope/job_671120/step_0/user/task_0,task=python,pid=88410,uid=43017
    Out of memory: Killed process 88410 (python) total-vm:..., anon-rss:..., UID:43017 ...

Slurm's cgroup plugins put each job's tasks under a path naming the job (`job_<id>`, cgroup
v1 `/slurm/uid_U/job_J/step_S/task_T`, v2 `/system.slice/slurmstepd.scope/job_J/...`). So the
report says which job's cgroup ran out of memory, which process was killed and which processes
held the memory: another job's OOM on a shared node is not this job's failure; a global OOM
where another user's process holds most of the memory is that process's doing (a leftover of an
earlier job: the node's state, attribution-labels.md tie-breaker 4), not the job's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from resurgo.attribute.events import Event
from resurgo.contracts import LogLine

_START = re.compile(r"\binvoked oom-killer\b")
_KILLED = re.compile(
    r"\b(?:Memory cgroup out of memory|Out of memory): Killed process (?P<pid>\d+)\b"
    r"(?:.*?\banon-rss:(?P<rss>\d+)kB)?(?:.*?\bUID:(?P<uid>\d+))?"
)
_SUMMARY = re.compile(r"\boom-kill:constraint=(?P<constraint>\w+)\b(?P<rest>.*)")
_SUMMARY_UID = re.compile(r"\bpid=(?P<pid>\d+),uid=(?P<uid>\d+)")
_CGROUP_JOB = re.compile(r"(?:/|\b)job_(?P<job>\d+)\b")
_REAPED = re.compile(r"\boom_reaper: reaped process (?P<pid>\d+)\b")
_STATS_FOR = re.compile(r"\bMemory cgroup stats for (?P<path>\S+?):?\s*$")
_TABLE_HEAD = re.compile(r"\[\s*pid\s*\]\s+uid\s+tgid\s+total_vm\s+rss\b")
_TABLE_ROW = re.compile(r"\[\s*(?P<pid>\d+)\]\s+(?P<rest>\d+(?:\s+-?\d+)+\s+\S+)\s*$")


@dataclass
class OomBlock:
    """One OOM report: its lines, the cgroup jobs it names, the victim and the task table."""

    source: str
    first: int
    last: int
    jobs: set[int] = field(default_factory=set)
    constraint: str | None = None
    killed_pid: int | None = None
    killed_uid: int | None = None
    tasks: list[tuple[int, int, int]] = field(default_factory=list)
    """(pid, uid, rss pages) per row of the kernel's task dump."""
    killed_rss_kib: int | None = None
    memcg: bool = False
    """A memory cgroup reached its limit (mm/memcontrol.c), not the whole node."""

    def holds(self, line: LogLine) -> bool:
        return line.source == self.source and self.first <= line.line_no <= self.last

    def of_another_job(self, job_id: int | None) -> bool:
        """The report's cgroup paths name only jobs other than this one."""
        return job_id is not None and bool(self.jobs) and job_id not in self.jobs

    def of_this_job(self, job_id: int | None) -> bool:
        return job_id is not None and job_id in self.jobs

    def held_by_another_user(self) -> bool:
        """A system-wide OOM where a process of another user (uid) than the killed one holds
        more memory than every process of the killed one's user together."""
        if self.constraint == "CONSTRAINT_MEMCG" or self.killed_uid is None or not self.tasks:
            return False
        own = sum(rss for _pid, uid, rss in self.tasks if uid == self.killed_uid)
        other = max((rss for _pid, uid, rss in self.tasks if uid != self.killed_uid), default=0)
        return other > own > 0 or (other > 0 and own == 0)


def _columns(head: str) -> list[str]:
    return head.replace("[", " ").replace("]", " ").split()[1:]  # (without "pid")


def read_blocks(source: str, lines: Iterable[LogLine]) -> list[OomBlock]:
    """The OOM reports in one node file, in order."""
    blocks: list[OomBlock] = []
    current: OomBlock | None = None
    columns: list[str] = []
    for entry in lines:
        text = entry.text
        reaped = _REAPED.search(text)
        if reaped is not None and blocks and blocks[-1].killed_pid == int(reaped["pid"]):
            blocks[-1].last = entry.line_no  # the reaper freeing the victim's memory after
            continue
        if _START.search(text):
            current = OomBlock(source, entry.line_no, entry.line_no)
            blocks.append(current)
            columns = []
            continue
        if current is None:
            if (killed := _KILLED.search(text)) is not None:
                # (A kill whose report the file does not hold: the kernel's one-line summary.)
                lone = OomBlock(source, entry.line_no, entry.line_no)
                lone.killed_pid = int(killed["pid"])
                lone.killed_uid = int(killed["uid"]) if killed["uid"] is not None else None
                lone.memcg = killed[0].startswith("Memory cgroup")
                lone.killed_rss_kib = int(killed["rss"]) if killed["rss"] else None
                blocks.append(lone)
            continue
        if (head := _TABLE_HEAD.search(text)) is not None:
            columns = _columns(text[head.start() :])
        elif (row := _TABLE_ROW.search(text)) is not None and "uid" in columns:
            values = row["rest"].split()
            if "rss" in columns and len(values) >= len(columns):
                uid = int(values[columns.index("uid")])
                rss = int(values[columns.index("rss")])
                current.tasks.append((int(row["pid"]), uid, rss))
        elif (stats := _STATS_FOR.search(text)) is not None:
            current.jobs.update(int(j) for j in _CGROUP_JOB.findall(stats["path"]))
        elif (summary := _SUMMARY.search(text)) is not None:
            current.constraint = summary["constraint"]
            current.memcg = current.memcg or summary["constraint"] == "CONSTRAINT_MEMCG"
            rest = summary["rest"]
            for key in ("oom_memcg=", "task_memcg="):
                if key in rest:
                    path = rest.split(key, 1)[1].split(",", 1)[0]
                    current.jobs.update(int(j) for j in _CGROUP_JOB.findall(path))
            if (who := _SUMMARY_UID.search(rest)) is not None:
                current.killed_pid, current.killed_uid = int(who["pid"]), int(who["uid"])
        elif (killed := _KILLED.search(text)) is not None:
            current.killed_pid = int(killed["pid"])
            if killed["uid"] is not None:
                current.killed_uid = int(killed["uid"])
            current.memcg = current.memcg or killed[0].startswith("Memory cgroup")
            current.killed_rss_kib = int(killed["rss"]) if killed["rss"] else None
            current.last = entry.line_no
            current = None  # the report ends with the kill
            continue
        current.last = entry.line_no
    return blocks


def oom_blocks(node_logs: Mapping[str, list[LogLine]]) -> list[OomBlock]:
    out: list[OomBlock] = []
    for lines in node_logs.values():
        if lines:
            out.extend(read_blocks(lines[0].source, lines))
    return out


def block_of(blocks: Iterable[OomBlock], line: LogLine) -> OomBlock | None:
    return next((b for b in blocks if b.holds(line)), None)


# The registry's id of the kernel's OOM-kill lines (patterns.json).
KERNEL_OOM_ID = "host_oom_kill"


def without_other_jobs_ooms(
    events: list[Event], node_logs: Mapping[str, list[LogLine]], job_id: int | None
) -> list[Event]:
    """The node events less the kernel OOM kills whose report names only other jobs' cgroups
    (a shared node: another job ran out of its own memory)."""
    if job_id is None or not any(e.match.id == KERNEL_OOM_ID for e in events):
        return events
    blocks = oom_blocks(node_logs)
    out = []
    for e in events:
        if e.match.id == KERNEL_OOM_ID:
            block = block_of(blocks, e.line)
            if block is not None and block.of_another_job(job_id):
                continue
        out.append(e)
    return out
