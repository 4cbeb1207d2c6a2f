"""Parsers for Slurm's text output, tested against captured real output (tests/fixtures/slurm).

Slurm prints `Key=Value` records where values may contain spaces (Command, WorkDir, Comment) and
user-controlled text (Comment) may itself look like `Key=Value`. Values are therefore split only
at keys Slurm really prints, and the comment is cut out by its exact text before splitting.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import hostlist
from pydantic import BaseModel

from resurgo.contracts import JobObservation, NodeObservation
from resurgo.slurm.errors import ParseError

log = logging.getLogger(__name__)

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


# A node list is user text in places (`--exclude`, names, log lines): bound what it may cost.
MAX_HOSTLIST_NAMES = 100_000
MAX_HOSTLIST_CHARS = 256 * 1024
MAX_HOSTLIST_GROUPS = 16


def expand_hostlist(expr: str, limit: int = MAX_HOSTLIST_NAMES) -> list[str]:
    """Expand a Slurm hostlist like `node[1-3,7],rack[1-2]-gpu[01-02]` into names, in order.

    The kept library (python-hostlist) does the expansion; duplicates are dropped. Anything it
    rejects, or a list of more than `limit` names, is a ParseError (never a huge list)."""
    expr = expr.strip()
    if expr in _NULLS:
        return []
    if len(expr) > MAX_HOSTLIST_CHARS:
        raise ParseError(f"hostlist of {len(expr)} characters refused (limit {MAX_HOSTLIST_CHARS})")
    names: dict[str, None] = {}
    # Part by part, so that the total is checked before the next part is expanded: the library
    # bounds one range (and one part), not a list of many parts.
    for part in _split_top_level(expr):
        if part.count("[") > MAX_HOSTLIST_GROUPS:
            # The library recurses once per bracket group: refuse before that gets deep.
            raise ParseError(f"hostlist {_short(expr)} has too many bracket groups; refused")
        try:
            got = hostlist.expand_hostlist(part, allow_duplicates=True)
        except (hostlist.BadHostlist, RecursionError) as exc:
            raise ParseError(f"bad hostlist {_short(expr)}: {exc or type(exc).__name__}") from None
        names.update(dict.fromkeys(got))
        if len(names) > limit:
            raise ParseError(f"hostlist {_short(expr)} names more than {limit} nodes; refused")
    return list(names)


def compress_hostlist(names: Iterable[str]) -> str:
    """`node1,node2,node3,gpu7` → `gpu7,node[1-3]` (Slurm's notation), for messages and args."""
    unique = sorted(set(names))
    try:
        return str(hostlist.collect_hostlist(unique))
    except (hostlist.BadHostlist, RecursionError, ValueError):
        return ",".join(unique)


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _split_top_level(expr: str) -> list[str]:
    """Top-level comma parts (commas inside brackets belong to ranges)."""
    parts: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(expr):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(expr[start:index])
            start = index + 1
    parts.append(expr[start:])
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
    state = fields["JobState"].split()
    if not state:
        raise ParseError(f"job record without a state: {line[:200]!r}")
    exit_code, _, exit_signal = fields.get("ExitCode", "0:0").partition(":")
    user = fields.get("UserId", "")
    return JobObservation(
        job_id=_int(fields["JobId"]),
        name=name if name is not None else fields.get("JobName", ""),
        user=user.split("(", 1)[0],
        partition=fields.get("Partition", ""),
        state=state[0],
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


_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_NODE_STATE = re.compile(r"^\S{1,200}$")
# Newer Slurm prints these after Reason; they follow Slurm's own `[user@time]` of the reason.
_AFTER_REASON = re.compile(
    r"^(.*\[[^\[\]@]*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\])"
    r"(?: (?:Comment|Extra|InstanceId|InstanceType|ReservationName)=.*)?$",
    re.DOTALL,
)


def check_node_name(name: str) -> str:
    """Node names reach scontrol arguments; refuse anything that is not a plain hostname."""
    if not _NODE_NAME.match(name):
        raise ValueError(f"refusing suspicious node name {name!r}")
    return name


def node_observation(
    name: str, state: str, reason: str, partitions: Iterable[str] = ()
) -> NodeObservation:
    """The one way a node record becomes a NodeObservation, whichever output it was read from
    (`scontrol show -o node` here, `--json` in `node_records`). A name that could not be passed
    back to scontrol, or an empty or blank-holding state, is a ParseError."""
    try:
        check_node_name(name)
    except ValueError as exc:
        raise ParseError(str(exc)) from None
    if not _NODE_STATE.match(state):
        raise ParseError(f"node {name}: unexpected state {state[:80]!r}")
    reason = reason.strip()
    return NodeObservation(
        name=name,
        state=state,
        reason="" if reason in _NULLS else reason,
        partitions=[p for p in partitions if p],
    )


def parse_node(line: str) -> NodeObservation:
    """One `scontrol show -o node` line. Reason comes after every field read here, and it is
    the one field that may hold a job's text (Resurgo's own drain reasons quote job output):
    fields are split only before it, and the reason runs to the end of the line (less the
    fields newer Slurm prints after Slurm's `[user@time]`), so nothing in it poses as a field."""
    record = line.strip()
    head, found, reason = record.partition(" Reason=")
    fields = split_record(head)
    if "NodeName" not in fields or "State" not in fields:
        raise ParseError(f"not a node record: {line[:200]!r}")
    if found and (tail := _AFTER_REASON.match(reason)) is not None:
        reason = tail.group(1)
    return node_observation(
        fields["NodeName"], fields["State"], reason, fields.get("Partitions", "").split(",")
    )


def parse_nodes(output: str) -> list[NodeObservation]:
    """Every record of `scontrol show -o node`; one that does not fit is logged and left out.
    Only "\n" ends a record: a reason may hold a job's \x0b, \u2028, ..."""
    nodes: list[NodeObservation] = []
    for line in output.split("\n"):
        if line.startswith("NodeName="):
            try:
                nodes.append(parse_node(line))
            except ParseError as exc:
                log.error("node listing: skipping a record: %s", exc)
    return nodes


SQUEUE_SEP = "\x1f"
SQUEUE_END = "\x1e"
# Comment last: it is free user text and may contain anything, including the separators. Each
# row ends with SQUEUE_END + the newline squeue adds; rows are split there and nowhere else
# (`str.splitlines()` also splits at \x0b, \x0c, \x1c-\x1e, \x85, \u2028, \u2029 and \r).
SQUEUE_DISCOVERY_FORMAT = (
    SQUEUE_SEP.join(["%i", "%V", "%T", "%e", "%u", "%P", "%j", "%k"]) + SQUEUE_END
)


class DiscoveredJob(BaseModel):
    job_id: int
    submit_time: datetime | None
    state: str
    end_time: datetime | None
    user: str
    partition: str
    name: str
    comment: str
    # A task of a job array (`squeue --json` only): its array and task ids; the record of
    # the tasks that never started has no task id and their expression in `array_tasks`.
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_tasks: str = ""
    # A component of a heterogeneous job: the leader's job id, and its offset (`squeue --json`).
    het_job_id: int | None = None
    het_job_offset: int | None = None
    restarts: int = 0
    # Why this row cannot be followed (an array task in text output); "" when it can.
    unreadable: str = ""


def parse_squeue_discovery(output: str) -> list[DiscoveredJob]:
    """Rows printed with SQUEUE_DISCOVERY_FORMAT (Slurm without `--json` only).

    A comment holding the row terminator can make a row of its own: it then carries the id of a
    job that has its own, real row too. A job id seen twice is dropped altogether (and logged);
    rows that do not fit are skipped. A forged row for an id absent from the listing cannot be
    told apart here: discovery re-reads each candidate's comment on its own (`job_comment`).
    """
    rows: list[DiscoveredJob] = []
    seen: dict[int, int] = {}
    for raw in output.split(SQUEUE_END + "\n"):
        parts = raw.split(SQUEUE_SEP, 7)
        array = _TEXT_ARRAY_ID.match(parts[0].strip()) if len(parts) == 8 else None
        if array is not None:
            # `12_3`, `12_[4-9%2]`: text output has no per-task job id to act on. Each array
            # is reported once (as its array id) as one discovery cannot follow.
            rows.append(_unreadable_array(int(array.group(1)), parts))
            continue
        if len(parts) != 8 or not parts[0].strip().isdigit():
            continue
        job_id, submit, state, end, user, partition, name, comment = parts
        seen[int(job_id)] = seen.get(int(job_id), 0) + 1
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
    rows = list({(r.job_id, r.unreadable != ""): r for r in rows}.values())
    twice = sorted(j for j, n in seen.items() if n > 1)
    if twice:
        log.error("squeue listing: job id(s) %s printed more than once (a forged row in some "
                  "job's comment); left out", twice[:20])  # fmt: skip
    return [row for row in rows if row.unreadable or seen[row.job_id] == 1]


_TEXT_ARRAY_ID = re.compile(r"^(\d{1,10})_(?:\d{1,10}|\[[0-9,%:\-]{1,4096}\])$")


def _unreadable_array(array_id: int, parts: list[str]) -> DiscoveredJob:
    _, submit, state, end, user, partition, name, comment = parts
    return DiscoveredJob(
        job_id=array_id, submit_time=parse_time(submit.strip()), state=state.strip(),
        end_time=parse_time(end.strip()), user=user.strip(), partition=partition.strip(),
        name=name, comment="" if comment == "(null)" else comment,
        unreadable="this Slurm has no `squeue --json`: the tasks of array jobs cannot be told "
        "apart safely in text output, so the array is not monitored",
    )  # fmt: skip
