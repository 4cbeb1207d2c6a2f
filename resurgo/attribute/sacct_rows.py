"""sacct's rows as `scheduler.txt` holds them, fixed-width or `-P`, and the job they describe.

A fixed-width row is split on blanks: the columns left of State line up with the header (State
itself may read `CANCELLED by 0`); the node list is its column when it stands there, else the
hostlist the row ends with. `sacct -D` lists every run of a requeued job under its one id; a
heterogeneous job's components (`9911220+0`, `9911220+1`) are one job on all of their nodes.
"""

from __future__ import annotations

import re

from resurgo.contracts import JobObservation
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

# A hostlist at the end of a row: names, bracket ranges with a suffix (`g530[5-8]cc`), joined.
_HOSTS = r"[A-Za-z][\w.-]*(?:\[[\d,-]+\][\w.-]*)*"
_LAST_HOSTLIST = re.compile(rf"\b({_HOSTS}(?:,{_HOSTS})*)\s*$")
_ONE_HOSTLIST = re.compile(rf"{_HOSTS}(?:,{_HOSTS})*")


def sacct_row(text: str, header: list[str] | None) -> dict[str, str] | None:
    if header is None:
        return None
    cells = text.split("|") if "|" in text else text.split()
    if len(cells) < 2:
        return None
    row: dict[str, str] = {}
    if "|" in text:
        row = {h: c.strip() for h, c in zip(header, cells, strict=False)}
    else:
        # Fixed width: match by position only for the columns we need (JobID first).
        row["JobID"] = cells[0]
        # Columns left of State line up with the header (State may read "CANCELLED by 0").
        if "User" in header and "State" in header and header.index("User") < header.index("State"):
            at = header.index("User")
            row["User"] = cells[at] if at < len(cells) else ""
        joined = " ".join(cells)
        m = re.search(
            r"\b(COMPLETED|FAILED|CANCELLED(?: by \w+)?|TIMEOUT|NODE_FAIL|PREEMPTED|"
            r"OUT_OF_ME\w*|BOOT_FAIL|DEADLINE|RUNNING|PENDING|REQUEUED|SUSPENDED)\+?",
            joined,
        )
        if m:
            row["State"] = m.group(0).rstrip("+")
        # `code:signal`, never part of a time (Elapsed `01:34:12` holds `01:34` too).
        ec = re.findall(r"(?<![\d:-])(\d+:\d+)(?![\d:])", joined)
        codes = [h for h in header if h in ("ExitCode", "DerivedExitCode")]
        at = codes.index("ExitCode") if "ExitCode" in codes else 0
        if len(ec) > at:
            row["ExitCode"] = ec[at]
        nodes = _LAST_HOSTLIST.search(joined)
        if nodes and "NodeList" in header and nodes.group(1) not in ("None", "assigned"):
            row["NodeList"] = nodes.group(1)
        # (NodeList left of State, `JobID JobName Partition NodeList Start End State`, lines
        # up with the header like the columns before it.)
        at = header.index("NodeList") if "NodeList" in header else -1
        state_at = header.index("State") if "State" in header else -1
        # (A job name with a blank in it shifts the cells: a node list names a numbered host
        # or a bracket range, a partition or a job name rarely does; and the row's cells must
        # count as many as the header's, State's `CANCELLED by 0` aside.)
        if 0 <= at < state_at and len(cells) - len(header) in (0, 2):
            cell = cells[at]
            if _ONE_HOSTLIST.fullmatch(cell) and any(ch.isdigit() for ch in cell):
                row["NodeList"] = cell
    return row


def _hostlist(text: str) -> list[str]:
    try:
        return expand_hostlist(text)
    except ParseError:
        return []


def job_from_sacct(
    rows: list[dict[str, str]],
) -> tuple[JobObservation | None, dict[str, str], list[str]]:
    first = next((r for r in rows if r.get("JobID", "").isdigit()), rows[0])
    # `sacct -D` lists every run of a requeued job under its one id, earliest first: the last
    # is the run this output ends with. (Not a restart count: a requeue by the job's own
    # wrapper leaves no mark in the output to split it at.)
    # (A run is a row with a state; the same run listed by two sacct commands counts once.)
    seen: dict[tuple[str, ...], dict[str, str]] = {}
    for r in rows:
        if r.get("JobID") == first.get("JobID") and r.get("State"):
            key = tuple(r.get(k, "") for k in ("Start", "End", "NodeList", "State", "ExitCode"))
            seen.setdefault(key, r)
    runs = list(seen.values()) or [first]
    # (the requeued job waiting again, `PENDING ... None assigned`, has no run in the output)
    started = [
        r for r in runs
        if r.get("Start", "x") not in ("", "Unknown", "None") and r.get("State") != "PENDING"
    ]  # fmt: skip
    main = (started or runs)[-1]
    state_text = main.get("State", "")
    state = state_text.split()[0].rstrip("+") if state_text else "UNKNOWN"
    if state.startswith("OUT_OF_ME"):
        state = "OUT_OF_MEMORY"
    code, _, sig = main.get("ExitCode", "0:0").partition(":")
    nodes = _hostlist(main.get("NodeList", ""))
    # (A heterogeneous job's components, `9911220+0` and `9911220+1`, are one job: its nodes
    # are all of theirs.)
    if het := re.fullmatch(r"(\d+)\+\d+", main.get("JobID", "")):
        for r in rows:
            if r is not main and re.fullmatch(rf"{het[1]}\+\d+", r.get("JobID", "")):
                nodes += [n for n in _hostlist(r.get("NodeList", "")) if n not in nodes]
    job_id = re.match(r"\d+", main.get("JobID", "0"))
    try:
        obs = JobObservation(
            job_id=int(job_id.group()) if job_id else 0,
            state=state,
            exit_code=int(code) if code.isdigit() else 0,
            exit_signal=int(sig) if sig.isdigit() else 0,
            node_list=nodes,
            user=main.get("User", ""),
        )
    except ValueError:
        return None, {}, []
    fields = {"JobId": str(obs.job_id), "JobState": state}
    # (its owner, and how long it ran: sacct's Elapsed is scontrol's RunTime)
    fields |= {k: main[s] for s, k in (("User", "UserId"), ("Elapsed", "RunTime")) if main.get(s)}
    earlier: list[str] = []
    for run in runs[: runs.index(main)]:
        try:
            earlier += [n for n in expand_hostlist(run.get("NodeList", "")) if n not in nodes]
        except ParseError:
            continue
    return obs, fields, list(dict.fromkeys(earlier))
