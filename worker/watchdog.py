"""Fail-open watchdog: release Resurgo holds whose deadline has passed, needing only Slurm.

If Resurgo stalls while a job is held (worker, controller, Temporal or the database gone), the
job must not stay held. Every Resurgo hold carries its deadline in the job's AdminComment
(`resurgo:hold key=... deadline=...`, written by `SlurmActions`). This process lists jobs with
Slurm's own commands (locally or over SSH), and for each held job with that tag whose deadline
passed: `scontrol release`, `scontrol update StartTime=now` (a requeued job otherwise waits
~2 minutes, see FOOTGUNS 1), then rewrites the AdminComment to
`resurgo:released-by-watchdog key=... at=...`. Each release is printed as one JSON line, logged,
and appended to a local JSON-lines file (there is no database to rely on).

Act mode is the default: a Resurgo-tagged hold past its deadline is released (the tag is written
before the hold, so every hold Resurgo starts carries one). `--observe` only reports what it
would release. Jobs without a Resurgo hold tag (an operator's own hold), holds without a deadline
and holds whose deadline is ahead are never touched.
An unreachable Slurm is logged and retried next round.

Where the tag is read from matters: AdminComment is written by root, but job names, comments,
paths and commands are user text that `scontrol show -o` prints unquoted next to it, so a user
could make a held job *look* tagged there. The tag is therefore read from `squeue --json`
(proper JSON strings) and nothing else; a Slurm without JSON output gets an error every round
rather than a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from resurgo.config import MetricsSettings
from resurgo.contracts import JobObservation
from resurgo.metrics.exporter import start_process_metrics
from resurgo.slurm.actions import parse_hold_comment
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import (
    CommandFailed,
    CommandTimeout,
    JobGone,
    ParseError,
    SchedulerError,
    SchedulerUnavailable,
)
from resurgo.slurm.json_records import NO_VAL
from resurgo.slurm.targets import slurm_ref

log = logging.getLogger("resurgo.watchdog")

WATCHDOG_TAG = "resurgo:released-by-watchdog"
DEFAULT_RECORD = Path("~/.resurgo/watchdog.jsonl")
LIST_TIMEOUT = 60.0


@dataclass(frozen=True)
class TaggedJob:
    """A job whose AdminComment is a Resurgo hold tag."""

    job_id: int
    state: str
    held: bool
    admin_comment: str
    key: str
    deadline: datetime | None
    user: str = ""
    name: str = ""
    # What scontrol must be given: `<array id>_<task id>` for an array task (targets.slurm_ref).
    ref: str = ""

    @property
    def target(self) -> str:
        return self.ref or str(self.job_id)


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _state(raw: object) -> str:
    """`job_state` is a string in Slurm 22.05 and a list of flags from 23.02 on."""
    if isinstance(raw, list):
        return str(raw[0]) if raw else ""
    return str(raw or "")


def _number(raw: object) -> int | None:
    """Integers are plain in 22.05 and `{"set": .., "number": ..}` from 23.02 on."""
    if isinstance(raw, dict):
        return int(raw["number"]) if raw.get("set") and "number" in raw else None
    return int(raw) if isinstance(raw, int | float) else None


def tagged_from_json(text: str) -> list[TaggedJob]:
    """Jobs with a Resurgo hold tag in `squeue --json` output."""
    found = []
    for job in json.loads(text).get("jobs", []):
        admin = job.get("admin_comment") or ""
        parsed = parse_hold_comment(admin) if isinstance(admin, str) else None
        if parsed is None:
            continue
        state = _state(job.get("job_state"))
        reason = str(job.get("state_reason") or "")
        held = state == "PENDING" and (_number(job.get("priority")) == 0 or "Held" in reason)
        job_id = int(job["job_id"])
        task = _number(job.get("array_task_id"))
        task = task if task is not None and task < NO_VAL else None
        array_job = _number(job.get("array_job_id")) or None
        found.append(
            TaggedJob(
                job_id=job_id,
                ref=slurm_ref(job_id, array_job, task),
                state=state,
                held=held,
                admin_comment=admin,
                key=parsed[0],
                deadline=parsed[1],
                user=str(job.get("user_name") or ""),
                name=str(job.get("name") or ""),
            )
        )
    return found


class Watchdog:
    def __init__(
        self,
        cluster: str,
        slurm: SlurmClient,
        *,
        act: bool = True,
        record: Path | None = None,
        out: Any = None,
    ) -> None:
        self.cluster = cluster
        self.slurm = slurm
        self.act = act
        self.record = (record or DEFAULT_RECORD).expanduser()
        self.out = out if out is not None else sys.stdout
        self._reported: set[tuple[int, str, str]] = set()

    async def tagged_jobs(self) -> list[TaggedJob]:
        shown = await self.slurm._run(["squeue", "--json"], timeout=LIST_TIMEOUT)
        try:
            return tagged_from_json(shown.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise ParseError(f"squeue --json printed something unexpected: {exc}") from exc

    async def round(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """One pass over the cluster; returns the records written in it."""
        now = now or datetime.now(UTC)
        records = []
        for job in await self.tagged_jobs():
            if job.deadline is None or job.deadline > now or job.state != "PENDING":
                # Not due, no deadline to enforce, or already running/finished: not ours to move.
                continue
            try:
                record = await self._handle(job, now)
            except JobGone:
                continue
            except SchedulerError as exc:
                record = self._record(job, now, "release_failed", error=str(exc)[:500])
            if record is not None:
                records.append(record)
        return records

    async def _handle(self, job: TaggedJob, now: datetime) -> dict[str, Any] | None:
        if not self.act:
            return self._record(job, now, "would_release" if job.held else "would_start")
        # Decide on a fresh look (Resurgo itself may have released it a moment ago), from the
        # same JSON source: `scontrol show` text can be spoofed by the job's name.
        fresh = {j.job_id: j for j in await self.tagged_jobs()}.get(job.job_id)
        if fresh is None or fresh.admin_comment != job.admin_comment or fresh.state != "PENDING":
            log.info("job %s changed since listed; leaving it for the next round", job.job_id)
            return None
        if fresh.held:
            await self.slurm.release(job.target)
            action = "released"
        else:
            action = "start_completed"  # released earlier (by us or by hand), tag still there
        try:
            await self.slurm.update_job(job.target, StartTime="now")
        except CommandFailed as exc:  # started on release already: nothing to hurry
            log.info("job %s: StartTime=now not applied: %s", job.job_id, exc)
        tag = f"{WATCHDOG_TAG} key={job.key} at={_stamp(now)}"
        await self.slurm.update_job(job.target, AdminComment=tag)
        after = await self.slurm.show_job(job.job_id)
        return self._record(job, now, action, after=after)

    def _record(
        self,
        job: TaggedJob,
        now: datetime,
        action: str,
        *,
        after: JobObservation | None = None,
        error: str | None = None,
    ) -> dict[str, Any] | None:
        marker = (job.job_id, job.key, action)
        if marker in self._reported and action != "released":
            return None  # report a pending decision once, not every round
        self._reported.add(marker)
        record: dict[str, Any] = {
            "at": _stamp(now),
            "cluster": self.cluster,
            "job_id": job.job_id,
            "key": job.key,
            "deadline": _stamp(job.deadline) if job.deadline else None,
            "overdue_seconds": round((now - job.deadline).total_seconds()) if job.deadline else 0,
            "action": action,
            "mode": "act" if self.act else "observe",
            "user": job.user,
            "job_name": job.name,
        }
        if after is not None:
            record["state_after"] = after.state
            record["held_after"] = after.held
        if error is not None:
            record["error"] = error
        line = json.dumps(record, sort_keys=True)
        print(line, file=self.out, flush=True)
        log.warning("watchdog %s job %s (hold %s, deadline %s)", action, job.job_id, job.key,
                    record["deadline"])  # fmt: skip
        try:
            self.record.parent.mkdir(parents=True, exist_ok=True)
            with self.record.open("a") as handle:
                handle.write(line + "\n")
        except OSError as exc:
            log.error("cannot append to %s: %s", self.record, exc)
        return record

    async def run(self, interval: float, stop: asyncio.Event | None = None) -> None:
        """Rounds every `interval` seconds until `stop` is set; nothing here is fatal."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            await self.safe_round()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def safe_round(self) -> bool:
        try:
            await self.round()
            return True
        except (SchedulerUnavailable, CommandTimeout) as exc:
            log.warning("Slurm unreachable on %s, retrying next round: %s", self.cluster, exc)
        except SchedulerError as exc:
            log.error("Slurm command failed on %s, retrying next round: %s", self.cluster, exc)
        except Exception:
            log.exception("watchdog round failed on %s; retrying next round", self.cluster)
        return False


async def run_watchdog(
    cluster: str,
    slurm: SlurmClient,
    *,
    act: bool,
    interval: float,
    record: Path | None,
    once: bool = False,
    metrics: MetricsSettings | None = None,
) -> int:
    dog = Watchdog(cluster, slurm, act=act, record=record)
    log.info("watchdog for %s: %s mode, every %.0fs, records in %s", cluster,
             "act" if act else "observe", interval, dog.record)  # fmt: skip
    if once:
        return 0 if await dog.safe_round() else 1
    metrics = metrics or MetricsSettings()  # its Slurm command errors (no audit store here)
    start_process_metrics(
        f"watchdog/{cluster}", None, port=metrics.watchdog_port, host=metrics.host
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await dog.run(interval, stop)
    return 0
