"""Parsers for Slurm's text output, tested against captured real output (tests/fixtures/slurm).

Slurm prints `Key=Value` records where values may contain spaces (Command, WorkDir, Comment) and
user-controlled text (Comment) may itself look like `Key=Value`. Values are therefore split only
at keys Slurm really prints, and the comment is cut out by its exact text before splitting.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from resurgo.contracts import JobObservation, NodeObservation
from resurgo.slurm.errors import ParseError

# Keys `scontrol show -o job` prints (Slurm 22.05-24.x); others are kept but never split values.
_KEY = re.compile(r"(?:^| )([A-Z][A-Za-z0-9_:/]*)=")
_NULLS = frozenset({"", "(null)", "None", "N/A", "Unknown", "n/a"})


def split_record(line: str) -> dict[str, str]:
    """Split one `scontrol show -o` line into its fields (first occurrence of a key wins)."""
    fields: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        key = match.group(1)
        if key not in fields:
            fields[key] = line[match.end() : end].strip()
    return fields


def _cut_field(line: str, key: str, value: str) -> str:
    """Remove `Key=value` (exact text) so user text cannot pose as other fields."""
    needle = f" {key}={value}"
    return line.replace(needle, f" {key}=", 1) if value and needle in line else line


def parse_time(value: str | None) -> datetime | None:
    """Slurm timestamps are printed in the client's TZ; our commands run with TZ=UTC."""
    if value is None or value in _NULLS:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


_DURATION = re.compile(r"^(?:(?P<d>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)$")


def parse_duration(value: str | None) -> timedelta | None:
    """Slurm's `[days-][hours:]minutes:seconds` (RunTime, squeue TIME, sacct Elapsed)."""
    m = _DURATION.match((value or "").strip())
    if m is None:
        return None
    return timedelta(
        days=int(m["d"] or 0), hours=int(m["h"] or 0), minutes=int(m["m"]), seconds=int(m["s"])
    )


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist like `node[1-3,7],gpu-a[01-02]` into names, in order."""
    expr = expr.strip()
    if expr in _NULLS:
        return []
    names: list[str] = []
    for part in _split_top_level(expr):
        match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if not match:
            if "[" in part or "]" in part:
                raise ParseError(f"unsupported hostlist {expr!r}")
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            if "-" in item:
                lo, hi = item.split("-", 1)
                if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                    raise ParseError(f"bad range {item!r} in hostlist {expr!r}")
                width = len(lo)
                names.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
            else:
                names.append(f"{prefix}{item}{suffix}")
    return names


def _split_top_level(expr: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in expr:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if current:
        parts.append("".join(current))
    return [p for p in (s.strip() for s in parts) if p]


def _int(value: str | None, default: int = 0) -> int:
    if value is None:
        return default
    match = re.match(r"-?\d+", value)
    return int(match.group()) if match else default


def _text(value: str | None) -> str:
    return "" if value is None or value in _NULLS else value


def parse_job(line: str, comment: str | None = None, name: str | None = None) -> JobObservation:
    """Parse one `scontrol show -o job` line.

    Args:
        line: the record.
        comment: the job's comment read separately (`squeue -o %k`); when given, that exact text
            is removed before splitting, so a hostile comment cannot spoof other fields.
        name: the job's name read separately (`squeue -o %j`), removed the same way: it comes
            right after JobId, so a name like `x JobState=COMPLETED Restarts=7` would otherwise
            win over the real fields.
    """
    record = line.strip()
    if comment:
        record = _cut_field(record, "Comment", comment)
    if name:
        record = _cut_field(record, "JobName", name)
    fields = split_record(record)
    if "JobId" not in fields or "JobState" not in fields:
        raise ParseError(f"not a job record: {line[:200]!r}")
    exit_code, _, exit_signal = fields.get("ExitCode", "0:0").partition(":")
    user = fields.get("UserId", "")
    return JobObservation(
        job_id=_int(fields["JobId"]),
        name=name if name is not None else fields.get("JobName", ""),
        user=user.split("(", 1)[0],
        partition=fields.get("Partition", ""),
        state=fields["JobState"].split()[0],
        reason=fields.get("Reason", ""),
        restarts=_int(fields.get("Restarts")),
        requeue=fields.get("Requeue", "1") == "1",
        priority=_int(fields.get("Priority")),
        node_list=expand_hostlist(fields.get("NodeList", "")),
        exc_node_list=expand_hostlist(fields.get("ExcNodeList", "")),
        exit_code=_int(exit_code),
        exit_signal=_int(exit_signal),
        comment=comment if comment is not None else fields.get("Comment", ""),
        admin_comment=_text(fields.get("AdminComment")),
        std_out=fields.get("StdOut", ""),
        submit_time=parse_time(fields.get("SubmitTime")),
        start_time=parse_time(fields.get("StartTime")),
        end_time=parse_time(fields.get("EndTime")),
        num_nodes=_int(fields.get("NumNodes")),
        batch_flag=_int(fields.get("BatchFlag"), 1),
    )


def parse_node(line: str) -> NodeObservation:
    fields = split_record(line.strip())
    if "NodeName" not in fields or "State" not in fields:
        raise ParseError(f"not a node record: {line[:200]!r}")
    reason = fields.get("Reason", "")
    return NodeObservation(
        name=fields["NodeName"],
        state=fields["State"],
        reason="" if reason in _NULLS else reason,
    )


SQUEUE_SEP = "\x1f"
# Comment last: it is free user text and may contain anything, including the separator.
SQUEUE_DISCOVERY_FORMAT = SQUEUE_SEP.join(["%i", "%V", "%T", "%e", "%u", "%P", "%j", "%k"])


class DiscoveredJob(BaseModel):
    job_id: int
    submit_time: datetime | None
    state: str
    end_time: datetime | None
    user: str
    partition: str
    name: str
    comment: str


def parse_squeue_discovery(output: str) -> list[DiscoveredJob]:
    """Rows printed with SQUEUE_DISCOVERY_FORMAT; rows that do not fit are skipped."""
    rows = []
    for raw in output.splitlines():
        parts = raw.split(SQUEUE_SEP, 7)
        if len(parts) != 8 or not parts[0].strip().isdigit():
            # Array jobs print ids like 12_3; they are out of scope here and skipped.
            continue
        job_id, submit, state, end, user, partition, name, comment = parts
        rows.append(
            DiscoveredJob(
                job_id=int(job_id),
                submit_time=parse_time(submit.strip()),
                state=state.strip(),
                end_time=parse_time(end.strip()),
                user=user.strip(),
                partition=partition.strip(),
                name=name,
                comment="" if comment == "(null)" else comment,
            )
        )
    return rows
