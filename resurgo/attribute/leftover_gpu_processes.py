"""A node whose GPUs are held by processes older than the job: an earlier job's leftovers.

When Slurm cannot kill a job's processes (stuck in uninterruptible sleep on a hung filesystem
or driver: slurmstepd's `STEPD TERMINATED ... DUE TO JOB NOT ENDING WITH SIGNALS`), they stay
on the node holding GPU memory and compute, and the next job there hangs in its first
collective or fails a health check. An operator who looks lists the GPUs' processes
(`nvidia-smi --query-compute-apps=pid,used_memory,... --format=csv`, nvidia-smi's process
table, `amd-smi process`) and asks `ps` how long they have run (`ps -o pid,etime,...`, procps
ps(1): ELAPSED/ETIME `[[dd-]hh:]mm:ss`). A GPU process that has run longer than the job has is
not the job's: the node's state (attribution-labels.md: leftover processes of earlier jobs are
system_software, the node named).
"""

from __future__ import annotations

import re
from datetime import timedelta

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import Category, LogLine

# A GPU process's pid: nvidia-smi's CSV (`2203118, 21404 MiB, 00000000:1A:00.0`, under a
# `pid, used_memory` header), its process table (`|    0   N/A  N/A   2203118    C   python
# 21404MiB |`), amd-smi's `PID: 2291877` under PROCESS_INFO.
_CSV_HEADER = re.compile(r"^\s*pid, used_(?:gpu_)?memory\b")
_CSV_ROW = re.compile(r"^\s*(\d{1,9}), \d+ MiB\b")
_TABLE_ROW = re.compile(
    r"^\|\s+\d+\s+(?:N/A|\d+)\s+(?:N/A|\d+)\s+(\d{1,9})\s+[CGM+]{1,3}\s+\S.*\d+MiB\s*\|"
)
_AMD_PID = re.compile(r"^\s*PID: (\d{1,9})\s*$")
# `ps -o pid,etime,...` (ELAPSED is ps's header for etime): the row's pid, then its elapsed time.
_PS_HEADER = re.compile(r"^\s*PID\s+(?:\w+\s+)*?(?:ELAPSED|ETIME)\b")
_PS_ROW = re.compile(r"^\s*(\d{1,9})\s+(?:\S+\s+)*?((?:\d{1,4}-)?(?:\d{1,2}:)?\d{1,2}:\d\d)\s")
MIN_OLDER = timedelta(minutes=2)  # (a job's own processes start within its first minutes)
# A process's own environment, which names the job it belongs to (`tr '\0' '\n' <
# /proc/2203118/environ | grep SLURM_JOB_ID`, then `SLURM_JOB_ID=55120`).
_ENVIRON = re.compile(r"/proc/(\d{1,9})/environ\b")
_JOB_ID = re.compile(r"^\s*SLURM_JOB_ID=(\d{1,12})\s*$")


def _elapsed(text: str) -> timedelta | None:
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return timedelta(days=int(days or 0), hours=parts[0], minutes=parts[1], seconds=parts[2])


def _gpu_pids(lines: list[LogLine]) -> set[str]:
    pids: set[str] = set()
    csv = False
    for entry in lines:
        text = entry.text
        if _CSV_HEADER.match(text):
            csv = True
            continue
        if csv and (m := _CSV_ROW.match(text)) is not None:
            pids.add(m[1])
            continue
        csv = False
        if (m := _TABLE_ROW.match(text) or _AMD_PID.match(text)) is not None:
            pids.add(m[1])
    return pids


def _older_than(lines: list[LogLine], pids: set[str], run: timedelta) -> list[LogLine]:
    """`ps` rows of those pids that have run longer than the job."""
    found = []
    listing = False
    for entry in lines:
        if _PS_HEADER.match(entry.text):
            listing = True
            continue
        m = _PS_ROW.match(entry.text) if listing else None
        if m is None:
            listing = False
            continue
        if m[1] in pids and (age := _elapsed(m[2])) is not None and age > run + MIN_OLDER:
            found.append(entry)
    return found


def _of_other_jobs(lines: list[LogLine], pids: set[str], job_id: int) -> list[LogLine]:
    """Environment lines of those pids naming another Slurm job."""
    found = []
    asked: str | None = None
    for entry in lines:
        if (m := _ENVIRON.search(entry.text)) is not None:
            asked = m[1]
        elif asked is not None and (j := _JOB_ID.match(entry.text)) is not None:
            if asked in pids and int(j[1]) != job_id:
                found.append(entry)
            asked = None
    return found


def leftover_gpu_processes(a: Analysis, v: Verdict) -> Verdict:
    """`v` (a failure or hang of no known cause) as the node(s) whose GPUs run processes that
    started before the job."""
    if v.category != Category.UNKNOWN:
        return v
    run = a.facts.run_time()
    job_id = a.job.job_id if a.job is not None else None
    held: dict[str, list[LogLine]] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node) or not (pids := _gpu_pids(lines)):
            continue
        rows = _older_than(lines, pids, run) if run is not None else []
        rows += _of_other_jobs(lines, pids, job_id) if job_id is not None else []
        if rows:
            held[node] = rows
    if not held or (v.culprits and not set(v.culprits) <= set(held)):
        return v
    nodes = sorted(held)
    return Verdict(
        Category.SYSTEM_SOFTWARE, "leftover|gpu_processes",
        f"{v.summary}; the GPUs of {', '.join(nodes)} run processes older than this job, or of "
        "another job: an earlier job's leftovers hold them", 0.8,
        culprits=nodes, ranks=v.ranks, evidence=[*v.evidence[:2], *held[nodes[0]][:2]],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
