"""Job records from `squeue --json`: every field is its own JSON value.

`scontrol show -o job` and `squeue -o` print user text (names, comments, work dirs, output
paths) raw between the fields, so that text can pose as other fields or as other jobs' records.
In `squeue --json` a field is a JSON string: nothing a user writes can leave it. This module
reads the shapes of Slurm 21.08-22.05 (plain numbers, `job_state` a string, `exit_code` a raw
wait status, `standard_output` as submitted) and of 23.02 on (`{"set", "number"}` numbers,
`job_state` a list of flags, `exit_code` an object, `standard_output` already expanded).

Every record is read on its own: a record that does not fit costs that job (logged, and a
ParseError when that very job is asked about), never the listing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from resurgo.contracts import JobObservation
from resurgo.slurm.errors import ParseError
from resurgo.slurm.hetjobs import whole_job
from resurgo.slurm.parsers import DiscoveredJob, expand_hostlist

log = logging.getLogger(__name__)

Record = dict[str, Any]
# Slurm's NO_VAL for an unset array task id, as `scontrol` prints it in file names.
NO_VAL = 4294967294
# Epoch seconds beyond this are not times (and would not fit a datetime).
_MAX_EPOCH = 253402300799
_SURROGATE = re.compile("[\ud800-\udfff]")
_BLANK = re.compile(r"\s")


class Listing:
    """One parsed `squeue --json` answer: the Slurm version and the raw job records by id."""

    def __init__(self, text: str) -> None:
        try:
            doc = json.loads(text, strict=False)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"squeue --json printed no JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
            raise ParseError("squeue --json printed no job list")
        errors = doc.get("errors")
        if isinstance(errors, list) and errors:
            log.warning("squeue --json reported errors: %s", repr(errors)[:500])
        self.version = _version(doc.get("meta"))
        self.records: dict[int, Record] = {}
        twice: set[int] = set()
        for record in doc["jobs"]:
            job_id = record.get("job_id") if isinstance(record, dict) else None
            if not isinstance(job_id, int) or isinstance(job_id, bool):
                log.error("squeue --json: skipping a record without a job id")
                continue
            if job_id in self.records:
                twice.add(job_id)
            self.records[job_id] = record
        for job_id in twice:
            # Not seen in practice (federation siblings?): neither copy is trusted.
            log.error("squeue --json: job %s printed twice; left out", job_id)
            del self.records[job_id]

    def observation(self, job_id: int) -> JobObservation | None:
        """The job, None when it is not listed; ParseError when its record does not fit."""
        record = self.records.get(job_id)
        if record is None:
            return None
        try:
            return self._whole(observation(record, self.version), record)
        except Exception as exc:  # one job's data, whatever it holds, costs only that job
            raise ParseError(f"job {job_id}: unreadable squeue --json record: {_why(exc)}") from exc

    def components(self, leader: int) -> list[Record]:
        """A heterogeneous job's component records by offset (the leader first); [] if none."""
        parts = [r for r in self.records.values() if number(r.get("het_job_id")) == leader]
        return sorted(parts, key=lambda r: number(r.get("het_job_offset")) or 0)

    def _whole(self, obs: JobObservation, record: Record) -> JobObservation:
        """A heterogeneous job's leader speaks for every component (resurgo/slurm/hetjobs)."""
        if number(record.get("het_job_id")) != obs.job_id:
            return obs
        parts = [observation(r, self.version) for r in self.components(obs.job_id)]
        return whole_job(obs, parts)

    def observations(self, want: Collection[int] | None = None) -> dict[int, JobObservation]:
        """The listed jobs (of `want`, when given); a record that does not fit is logged and
        left out, so the job is asked about on its own (and fails on its own)."""
        ids = self.records if want is None else [j for j in want if j in self.records]
        jobs: dict[int, JobObservation] = {}
        for job_id in ids:
            try:
                record = self.records[job_id]
                jobs[job_id] = self._whole(observation(record, self.version), record)
            except Exception as exc:  # one job's data, whatever it holds, costs only that job
                log.error("squeue --json: skipping job %s: %s", job_id, _why(exc))
        return jobs

    def discovered(self) -> list[DiscoveredJob]:
        """Every job discovery considers (array tasks and heterogeneous components included)."""
        jobs: list[DiscoveredJob] = []
        for job_id, record in self.records.items():
            try:
                job = discovered(record)
            except Exception as exc:  # one job's data, whatever it holds, costs only that job
                log.error("squeue --json: skipping job %s: %s", job_id, _why(exc))
                continue
            if job is not None:
                jobs.append(job)
        return jobs


def _why(exc: BaseException) -> str:
    # repr: the text may be a user's, with newlines that would forge log lines.
    return f"{type(exc).__name__}: {repr(str(exc))[:300]}"


def _version(meta: object) -> tuple[int, int]:
    """(major, minor) from `meta.Slurm.version` (22.05) or `meta.slurm.version` (23.02+)."""
    if isinstance(meta, dict):
        slurm = meta.get("Slurm") or meta.get("slurm")
        version = slurm.get("version") if isinstance(slurm, dict) else None
        if isinstance(version, dict):
            major, minor = version.get("major"), version.get("minor")
            try:
                return int(str(major)), int(str(minor))
            except ValueError:
                pass
    return (0, 0)


def number(raw: object) -> int | None:
    """Plain in 22.05, `{"set": .., "infinite": .., "number": ..}` from 23.02 on."""
    if isinstance(raw, dict):
        if not raw.get("set", True) or raw.get("infinite"):
            return None
        raw = raw.get("number")
    if isinstance(raw, bool):
        return int(raw)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if raw is None:
        return None
    raise ParseError(f"not a number: {repr(raw)[:80]}")


def text(raw: object) -> str:
    """A string field; lone surrogates (never valid UTF-8) become U+FFFD so the value can be
    serialised wherever it travels."""
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise ParseError(f"not a string: {repr(raw)[:80]}")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", raw)
    return raw


def _time(raw: object) -> datetime | None:
    seconds = number(raw)
    if not seconds or seconds < 0 or seconds > _MAX_EPOCH:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def job_state(raw: object) -> str:
    """`RUNNING` (22.05) or `["RUNNING", ...flags]` (23.02+); COMPLETING wins, as in scontrol."""
    if isinstance(raw, list):
        states = [text(s) for s in raw]
        if "COMPLETING" in states:
            return "COMPLETING"
        return states[0] if states else ""
    return text(raw)


def _exit(raw: object) -> tuple[int, int]:
    """(exit code, signal) like scontrol's ExitCode=a:b."""
    if isinstance(raw, dict):  # 23.02+
        code = number(raw.get("return_code")) or 0
        signal = raw.get("signal")
        sig = number(signal.get("id")) if isinstance(signal, dict) else number(signal)
        return code, sig or 0
    status = number(raw) or 0
    low = status & 0x7F
    if low and low != 0x7F:  # WIFSIGNALED
        return 0, low
    return (status >> 8) & 0xFF, 0


def _std_out(record: Record, version: tuple[int, int], job_id: int, name: str, user: str) -> str:
    """StdOut as `scontrol show job` prints it. 23.02 on: Slurm fills it in itself. Before: the
    path as submitted, with %A %a %j %u %x expanded, relative to the work dir; unset: the batch
    default `slurm-%j.out` (arrays `slurm-%A_%a.out`) in the work dir."""
    raw = text(record.get("standard_output"))
    if version >= (23, 2):
        return raw
    work_dir = text(record.get("current_working_directory"))
    array_job = number(record.get("array_job_id")) or 0
    task = number(record.get("array_task_id"))
    if not raw:
        if not record.get("batch_flag"):
            return ""
        if array_job:
            return f"{work_dir}/slurm-{array_job}_{task if task is not None else NO_VAL}.out"
        return f"{work_dir}/slurm-{job_id}.out"
    path = raw.replace("%A", str(array_job if task is not None else job_id))
    path = path.replace("%a", str(task if task is not None else NO_VAL))
    path = path.replace("%j", str(job_id)).replace("%u", user).replace("%x", name)
    return path if path.startswith("/") else f"{work_dir}/{path}"


def _user(record: Record) -> str:
    name = text(record.get("user_name"))
    if name:
        return name
    uid = number(record.get("user_id"))
    return str(uid) if uid is not None else ""


def _reason(record: Record) -> str:
    """scontrol prints the state description when there is one (blanks made `_`)."""
    desc = text(record.get("state_description"))
    if desc:
        return _BLANK.sub("_", desc)
    return text(record.get("state_reason"))


def observation(record: Record, version: tuple[int, int] = (0, 0)) -> JobObservation:
    """One job as `SlurmClient.show_job` reports it."""
    job_id = number(record.get("job_id"))
    if job_id is None:
        raise ParseError("record without a job id")
    name = text(record.get("name"))
    user = _user(record)
    exit_code, exit_signal = _exit(record.get("exit_code"))
    state = job_state(record.get("job_state"))
    if not state:
        raise ParseError("record without a job state")
    return JobObservation(
        job_id=job_id,
        name=name,
        user=user,
        partition=text(record.get("partition")),
        state=state,
        reason=_reason(record),
        restarts=number(record.get("restart_cnt")) or 0,
        requeue=bool(record.get("requeue", True)),
        priority=number(record.get("priority")) or 0,
        node_list=expand_hostlist(text(record.get("nodes"))),
        exc_node_list=expand_hostlist(text(record.get("excluded_nodes"))),
        exit_code=exit_code,
        exit_signal=exit_signal,
        comment=text(record.get("comment")),
        admin_comment=text(record.get("admin_comment")),
        std_out=_std_out(record, version, job_id, name, user),
        submit_time=_time(record.get("submit_time")),
        start_time=_time(record.get("start_time")),
        end_time=_time(record.get("end_time")),
        num_nodes=number(record.get("node_count")) or 0,
        batch_flag=1 if record.get("batch_flag", True) else 0,
    )


def discovered(record: Record) -> DiscoveredJob | None:
    """The discovery row of a job. Array tasks carry their array and task ids (the record of
    the tasks that never started: no task id, their expression instead); heterogeneous job
    components their leader's id. Discovery decides what to do with them."""
    job_id = number(record.get("job_id"))
    if job_id is None:
        raise ParseError("record without a job id")
    array_job = number(record.get("array_job_id")) or None
    task = number(record.get("array_task_id")) if array_job else None
    if task is not None and task >= NO_VAL:
        task = None
    return DiscoveredJob(
        array_job_id=array_job,
        array_task_id=task,
        array_tasks=text(record.get("array_task_string")) if array_job and task is None else "",
        het_job_id=number(record.get("het_job_id")) or None,
        het_job_offset=number(record.get("het_job_offset")) if record.get("het_job_id") else None,
        restarts=number(record.get("restart_cnt")) or 0,
        job_id=job_id,
        submit_time=_time(record.get("submit_time")),
        state=job_state(record.get("job_state")),
        end_time=_time(record.get("end_time")),
        user=_user(record),
        partition=text(record.get("partition")),
        name=text(record.get("name")),
        comment=text(record.get("comment")),
    )
