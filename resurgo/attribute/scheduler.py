"""Slurm facts for attribution: job and node records, sacct/sinfo rows, slurmctld lines.

Accepts whatever an operator pasted into `scheduler.txt` (or what the controller observed):
`scontrol show job`/`node` records in one-line (`-o`) or multi-line form, `sacct` tables
(fixed-width or `-P`), `sinfo -R` (default or `%N|%t|%H|%E`), slurmctld log lines. Unknown lines
are kept as text for the pattern registry. Pure; never raises on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from resurgo.attribute.sacct_rows import job_from_sacct, sacct_row
from resurgo.contracts import JobObservation, LogLine, NodeObservation
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import (
    expand_hostlist,
    parse_duration,
    parse_job,
    parse_node,
    parse_time,
    split_record,
)

# Node states that mean the node itself failed (as opposed to an operator's drain).
FAILED_NODE_STATES = ("DOWN", "FAIL", "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN", "REBOOT")

_CTLD_NODE_FAILED = re.compile(
    r"(?:\bNodes? (?P<a>[\w.\[\],-]+) not responding\b(?!.*\bnow responding)"
    r"|\bfailure of node (?P<b>[\w.-]+)"
    r"|\bon failed node (?P<c>[\w.-]+)"
    r"|\bsrun: error: Node failure on (?P<d>[\w.\[\],-]+)"
    r"|\bnode (?P<e>[\w.-]+) (?:set to|is) DOWN\b"
    r"|\bsetting node (?P<f>[\w.-]+) DOWN\b)",
    re.IGNORECASE,
)
# slurmctld's log of `scontrol suspend` (src/slurmctld/proc_req.c: `_slurm_rpc_suspend(%s) for
# %u`), and sacct/squeue's SUSPENDED state.
_CTLD_SUSPEND = re.compile(r"\b_slurm_rpc_suspend\(suspend\) for \d+|\bJobState=SUSPENDED\b")
_CANCELLED_BY = re.compile(r"\bCANCELLED(?:\+)? by (?P<who>\w+)")
_KILL_RPC = re.compile(r"\bREQUEST_KILL_JOB(?:\S*)? JobId=(?P<job>\d+) uid (?P<uid>\d+)")
# squeue's table, default or `-o` with the usual headers in any order (JOBID first).
_SQUEUE_HEADER = re.compile(r"^JOBID\s.*\b(?:ST|STATE)\b.*\bTIME\b")
# `date -Is` / `date` printed next to the records: when they were taken.
_DATE_LINE = re.compile(
    r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?$"
)
_SQUEUE_STATES = {"R": "RUNNING", "PD": "PENDING", "CG": "COMPLETING", "S": "SUSPENDED"}
_NAMED_UID = re.compile(
    r"\bUserId=(?P<n1>[\w.-]+)\((?P<u1>\d+)\)|\buid=(?P<u2>\d+)\((?P<n2>[\w.-]+)\)"
)
_UID = re.compile(r"^(?P<name>[^(]*)\((?P<uid>\d+)\)$")


@dataclass
class SinfoReason:
    node: str
    state: str
    reason: str


@dataclass
class SchedulerFacts:
    """What the scheduler said about the job and its nodes."""

    job: JobObservation | None = None
    job_fields: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, NodeObservation] = field(default_factory=dict)
    node_fields: dict[str, dict[str, str]] = field(default_factory=dict)
    reasons: list[SinfoReason] = field(default_factory=list)
    failed_nodes: dict[str, LogLine] = field(default_factory=dict)
    """Nodes slurmctld/srun reported failed or not responding, with the line saying so."""
    cancelled_by: str | None = None
    job_states: list[str] = field(default_factory=list)
    """The job's own sacct rows (`sacct -D` prints one per requeued run), oldest first."""
    step_states: dict[str, str] = field(default_factory=dict)
    """Step id (`5520114.0`) → its sacct State."""
    step_rows: dict[str, tuple[dict[str, str], LogLine]] = field(default_factory=dict)
    """Step id → its whole sacct row and line (where it ran, what it used: `step_usage`)."""
    suspended: LogLine | None = None
    """A line saying the job was suspended (slurmctld `_slurm_rpc_suspend(suspend)`, sacct's
    Suspended column, scontrol's SuspendTime)."""
    elapsed: str | None = None
    """squeue's TIME or sacct's Elapsed for the job, as printed."""
    earlier_nodes: list[str] = field(default_factory=list)
    """Nodes of the job's earlier runs (`sacct -D`) that its last run did not have."""
    sacct_jobs: dict[str, dict[str, str]] = field(default_factory=dict)
    """Job id → its job-level sacct row, for every job the tables list (this one's earlier
    runs and others' too: an operator's note may name them)."""
    lines: list[LogLine] = field(default_factory=list)

    @property
    def num_tasks(self) -> int | None:
        value = self.job_fields.get("NumTasks", "")
        return int(value) if value.isdigit() and int(value) > 0 else None

    @property
    def owner(self) -> tuple[str, str]:
        """(user name, uid) of the job's owner, as far as known."""
        raw = self.job_fields.get("UserId", "")
        m = _UID.match(raw)
        if m:
            return m.group("name"), m.group("uid")
        if raw:
            # A name alone (sacct's User): its uid where the pasted text says it
            # (`UserId=alice(1001)` in a partial record, `uid=1001(alice)` from `id`).
            for entry in self.lines:
                u = _NAMED_UID.search(entry.text) if raw in entry.text else None
                if u is not None and raw in (u.group("n1"), u.group("n2")):
                    return raw, u.group("u1") or u.group("u2")
        return raw, ""

    def boot_time(self, node: str) -> datetime | None:
        return parse_time(self.node_fields.get(node, {}).get("BootTime"))

    def run_time(self) -> timedelta | None:
        """How long the job had run when the scheduler was asked (scontrol RunTime, squeue TIME,
        sacct Elapsed)."""
        return parse_duration(self.job_fields.get("RunTime") or self.elapsed or "")

    def observed_at(self) -> datetime | None:
        """When the scheduler's record was taken: a `date` printed with it, else StartTime +
        RunTime, where both are known."""
        stamps = [m["iso"] for e in self.lines if (m := _DATE_LINE.match(e.text.strip()))]
        if stamps:
            return datetime.fromisoformat(stamps[-1])
        start = self.job.start_time if self.job is not None else None
        run = self.run_time()
        if start is None or run is None:
            return None
        return start.replace(tzinfo=None) + run

    def host_aliases(self) -> dict[str, str]:
        """NodeHostName/NodeAddr → NodeName, where that mapping is unambiguous."""
        seen: dict[str, set[str]] = {}
        for name, fields in self.node_fields.items():
            for key in ("NodeHostName", "NodeAddr"):
                value = fields.get(key, "")
                if value and value != name:
                    seen.setdefault(value, set()).add(name)
        return {alias: next(iter(names)) for alias, names in seen.items() if len(names) == 1}


def _records(lines: list[LogLine]) -> list[tuple[str, LogLine]]:
    """Join multi-line `scontrol show` records; every other line stays on its own."""
    out: list[tuple[str, LogLine]] = []
    current: list[str] = []
    first: LogLine | None = None
    for entry in lines:
        text = entry.text
        stripped = text.strip()
        starts = stripped.startswith(("JobId=", "NodeName="))
        if starts:
            if current and first is not None:
                out.append((" ".join(current), first))
            current, first = [stripped], entry
            continue
        if current and text[:1].isspace() and "=" in stripped:
            current.append(stripped)
            continue
        if current and first is not None:
            out.append((" ".join(current), first))
            current, first = [], None
        out.append((text, entry))
    if current and first is not None:
        out.append((" ".join(current), first))
    return out


def _squeue_row(facts: SchedulerFacts, row: dict[str, str]) -> None:
    """squeue's default table: the job's state and how long it has run."""
    if row.get("TIME"):
        facts.elapsed = row["TIME"]
    state = _SQUEUE_STATES.get(row.get("ST", ""), row.get("STATE", ""))
    if facts.job is None and state in _SQUEUE_STATES.values():
        try:
            nodes = expand_hostlist(row.get("NODELIST(REASON)", "").strip("()"))
        except ParseError:
            nodes = []
        facts.job = JobObservation(
            job_id=int(row["JOBID"].split("_")[0]),
            state=state,
            node_list=nodes if state != "PENDING" else [],
            user=row.get("USER", ""),
        )
        facts.job_fields = {"JobId": row["JOBID"], "JobState": facts.job.state}


def _job_of(job_id: str) -> str:
    return re.split(r"[._+]", job_id, maxsplit=1)[0]


_SINFO_DATED_ROW = re.compile(
    r"^(?P<reason>.+?)\s+(?P<user>\S+)\s+(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown)\s+"
    r"(?P<nodes>\S+)\s*$"
)
# The sacct command as the bundle quotes it, with the columns it asked for: `$ sacct -j 993071
# --format=JobID,State,ExitCode,Elapsed,NodeList` (widths like `NodeList%28` dropped).
_SACCT_FORMAT = re.compile(
    r"^(?:\$ )?sacct\b.{0,200}?(?:--format[= ]|-o ?)['\"]?"
    r"(?P<cols>JobID(?:%\d+)?(?:,\w+(?:%\d+)?)+)"
)


def _sacct_format(text: str) -> list[str] | None:
    m = _SACCT_FORMAT.match(text)
    if m is None:
        return None
    return [c.split("%", 1)[0] for c in m["cols"].split(",")]


def parse_scheduler(
    lines: list[LogLine], job_id: int | None = None, array_task: str | None = None
) -> SchedulerFacts:
    """Parse the scheduler's text (scheduler.txt or observed records) into facts.

    `job_id`, where the job's own output states it, picks the job's sacct rows over other
    jobs' rows in the same table; `array_task` (`3301870_12`) its own task's rows over the
    other tasks' of its array."""
    facts = SchedulerFacts(lines=list(lines))
    own = str(job_id) if job_id is not None and _mentions(lines, job_id) else None
    sacct_header: list[str] | None = None
    sacct_rows: list[dict[str, str]] = []
    sinfo_header = False
    squeue_header: list[str] | None = None
    for text, entry in _records(lines):
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("JobId="):
            try:
                job = parse_job(stripped)
            except (ParseError, ValueError):
                continue
            fields = split_record(stripped)
            # The batch job (not a step or an array element) wins; the last record is freshest.
            if facts.job is None or job.job_id == facts.job.job_id or "." not in fields["JobId"]:
                facts.job, facts.job_fields = job, fields
            continue
        if stripped.startswith("NodeName="):
            try:
                node = parse_node(stripped)
            except (ParseError, ValueError):
                continue
            facts.nodes[node.name] = node
            facts.node_fields[node.name] = split_record(stripped)
            continue
        if re.match(r"^JobID\b", stripped):
            sacct_header = [h.strip() for h in re.split(r"\||\s+", stripped) if h.strip()]
            continue
        if "sacct" in stripped and (columns := _sacct_format(stripped)) is not None:
            # (`sacct -n` prints no header: the command's own --format names the columns)
            sacct_header = columns
            continue
        if re.match(r"^-{4,}", stripped):
            continue
        if re.match(r"^REASON\s+USER\s+TIMESTAMP\s+NODELIST", stripped):
            sinfo_header = True
            continue
        if _SQUEUE_HEADER.match(stripped):
            squeue_header = stripped.split()
            continue
        if squeue_header is not None and re.match(r"^\d+(?:_\d+)?\s", stripped):
            _squeue_row(facts, dict(zip(squeue_header, stripped.split(), strict=False)))
            continue
        if sacct_header is not None and re.match(r"^\d+(?:[._+]\w+)?(?:\s|\|)", stripped):
            row = sacct_row(stripped, sacct_header)
            if row and row.get("JobID", "").isdigit():
                facts.sacct_jobs[row["JobID"]] = row  # (any job's: notes name earlier runs)
            if row and own is not None and _job_of(row.get("JobID", "")) != own:
                continue  # another job's row (an earlier run, a namesake)
            if row and array_task is not None and _other_task(row.get("JobID", ""), array_task):
                continue  # another task of the job's array
            if row:
                sacct_rows.append(row)
                _sacct_facts(facts, stripped, sacct_header, row, entry)
            continue
        parts = stripped.split("|")
        if len(parts) == 4 and re.fullmatch(r"[A-Za-z][\w.\[\],-]*", parts[0]):
            # sinfo -R -o '%N|%t|%H|%E'
            _add_reasons(facts, parts[0], parts[1], parts[3])
            continue
        if sinfo_header:
            # (A reason filling sinfo's 20-character column stands one blank from the user;
            # the time stamp's own shape places the columns then.)
            m = _SINFO_DATED_ROW.match(text) or re.match(
                r"^(?P<reason>.+?)\s{2,}(?P<user>\S+)\s+(?P<ts>\S+)\s+(?P<nodes>\S+)$", text
            )
            if m:
                _add_reasons(facts, m.group("nodes"), "", m.group("reason"))
                continue
        if m := _CANCELLED_BY.search(stripped):
            facts.cancelled_by = m.group("who")
        if facts.suspended is None and _CTLD_SUSPEND.search(stripped):
            facts.suspended = entry
        if m := _KILL_RPC.search(stripped):
            job_id = facts.job.job_id if facts.job else None
            if job_id is None or int(m.group("job")) == job_id:
                facts.cancelled_by = m.group("uid")
        for m in _CTLD_NODE_FAILED.finditer(stripped):
            expr = next(g for g in m.groups() if g)
            try:
                names = expand_hostlist(expr.rstrip(",."))
            except ParseError:
                names = [expr]
            for name in names:
                facts.failed_nodes.setdefault(name, entry)
    completing = facts.job is not None and facts.job.state == "COMPLETING"
    if (facts.job is None or completing) and sacct_rows:
        # squeue's CG says the job has ended and Slurm is still cleaning up (a slow epilog,
        # an unkillable process); sacct's row says how it ended.
        facts.job, facts.job_fields, facts.earlier_nodes = job_from_sacct(sacct_rows)
    if facts.job is None:
        facts.job, facts.job_fields = _job_from_fragments(lines, job_id)
    if facts.job is None and (preempted := _ctld_preempted(lines, job_id)) is not None:
        facts.job = JobObservation(job_id=preempted, state="PREEMPTED")
        facts.job_fields = {"JobId": str(preempted), "JobState": "PREEMPTED"}
    suspend_time = facts.job_fields.get("SuspendTime", "None")
    if facts.suspended is None and suspend_time not in ("", "None", "Unknown") and facts.job:
        facts.suspended = next((e for e in lines if "SuspendTime=" in e.text), None)
    if sacct_rows and facts.cancelled_by is None:
        for row in sacct_rows:
            if m := _CANCELLED_BY.search(row.get("State", "")):
                facts.cancelled_by = m.group("who")
    return facts


# `$ scontrol show job 5521901 | grep -E 'JobState|Restarts'`: the command names the job, the
# indented `Key=Value` lines below it are the record's fields that grep kept.
_SHOW_JOB_CMD = re.compile(r"\bscontrol\s+show\s+job\s+(?P<job>\d+)\b")
_FRAGMENT = re.compile(r"^\s+[A-Z]\w*=\S")


def _job_from_fragments(
    lines: list[LogLine], job_id: int | None
) -> tuple[JobObservation | None, dict[str, str]]:
    """The job's state from a grep'd `scontrol show job` (no `JobId=` line survived the grep)."""
    shown: str | None = None
    kept: list[str] = []
    for entry in lines:
        if (m := _SHOW_JOB_CMD.search(entry.text)) is not None:
            shown, kept = m["job"], []
        elif shown is not None and _FRAGMENT.match(entry.text):
            kept.append(entry.text.strip())
        elif kept:
            break
    if shown is None or not any(k.startswith("JobState=") for k in kept):
        return None, {}
    if job_id is not None and int(shown) != job_id:
        return None, {}
    record = f"JobId={shown} " + " ".join(kept)
    try:
        return parse_job(record), split_record(record)
    except (ParseError, ValueError):
        return None, {}


# slurmctld's preemption of a job (SchedMD/slurm src/slurmctld/job_mgr.c, slurm_job_preempt):
# `preempted JobId=5521901 has been requeued to reclaim resources for JobId=5521999` (or
# `has been killed`).
_CTLD_PREEMPTED = re.compile(
    r"\bpreempted JobId=(?P<job>\d+) has been (?:requeued|killed|suspended|checkpointed)"
    r" to reclaim resources for JobId=\d+"
)


def _ctld_preempted(lines: list[LogLine], job_id: int | None) -> int | None:
    """The job slurmctld says it preempted (this job's, where the output names it)."""
    for entry in lines:
        m = _CTLD_PREEMPTED.search(entry.text) if "preempted" in entry.text else None
        if m is not None and (job_id is None or int(m["job"]) == job_id):
            return int(m["job"])
    return None


def _other_task(job_id: str, array_task: str) -> bool:
    array, _, _task = array_task.partition("_")
    task_ref = re.split(r"[.+]", job_id, maxsplit=1)[0]
    return task_ref.startswith(f"{array}_") and task_ref != array_task


def _mentions(lines: list[LogLine], job_id: int) -> bool:
    """The scheduler text has a sacct row of this job (so other jobs' rows can be left out)."""
    pattern = re.compile(rf"^\s*{job_id}(?:[._+]\w+)?(?:\s|\|)")
    return any(pattern.match(e.text) for e in lines)


def _sacct_facts(
    facts: SchedulerFacts, text: str, header: list[str], row: dict[str, str], entry: LogLine
) -> None:
    """Per-run job states, step states and a non-zero Suspended time from one sacct row."""
    job_id, state = row.get("JobID", ""), row.get("State", "").split(" ")[0]
    if not state:
        return
    if re.fullmatch(r"\d+(?:_\d+)?", job_id):
        facts.job_states.append(state)
        # How long the run lasted (the last run's, `sacct -D` lists them in order): what tells
        # a job that idled until its time limit from one cut short, where the log has no clock.
        elapsed = _all_cells(text, header, row).get("Elapsed", "")
        if parse_duration(elapsed) is not None:
            facts.elapsed = elapsed
    elif re.fullmatch(r"\d+(?:_\d+)?\.\d+", job_id):
        row = _all_cells(text, header, row)
        facts.step_states[job_id], facts.step_rows[job_id] = state, (row, entry)
    if "Suspended" in header and facts.suspended is None:
        cells = [c.strip() for c in text.split("|")] if "|" in text else text.split()
        at = header.index("Suspended")
        if len(cells) == len(header) and (spent := parse_duration(cells[at])) and spent.seconds:
            facts.suspended = entry


def _all_cells(text: str, header: list[str], row: dict[str, str]) -> dict[str, str]:
    """A fixed-width row's every column, where its cells line up with the header (no blank
    cell, `CANCELLED by 0` one cell); else the columns `sacct_row` could place."""
    if "|" in text:
        return row
    cells = _CANCELLED_BY_CELL.sub("CANCELLED", text).split()
    if len(cells) != len(header):
        return row
    return {**dict(zip(header, cells, strict=True)), **row}


_CANCELLED_BY_CELL = re.compile(r"\bCANCELLED by \S+")


def _add_reasons(facts: SchedulerFacts, nodes: str, state: str, reason: str) -> None:
    try:
        names = expand_hostlist(nodes)
    except ParseError:
        names = [nodes]
    for name in names:
        facts.reasons.append(SinfoReason(name, state.strip(), reason.strip()))


def node_failed(node: NodeObservation) -> bool:
    state = node.state.upper()
    return any(s in state for s in FAILED_NODE_STATES) or state.endswith("*")


def owner_cancelled(facts: SchedulerFacts) -> bool | None:
    """True: cancelled by its owner; False: by someone else (an admin); None: unknown."""
    who = facts.cancelled_by
    if who is None:
        return None
    name, uid = facts.owner
    if who in (name, uid) and who:
        return True
    if who in ("0", "root"):
        # Root cancelling a job that is not root's own (or whose owner is unknown) is an
        # operator. (On the test cluster jobs run as root: their owner is known.)
        return False
    if not name and not uid:
        return None
    if (who.isdigit() and not uid) or (not who.isdigit() and not name):
        return None  # a uid against a name (or the reverse): cannot tell
    return False
