"""A typed client over Slurm's CLI: one command path, errors mapped once."""

from __future__ import annotations

import logging
import re
import shlex

from resurgo.contracts import JobObservation, NodeObservation
from resurgo.slurm.errors import (
    CommandFailed,
    JobGone,
    ParseError,
    SchedulerUnavailable,
)
from resurgo.slurm.parsers import (
    SQUEUE_DISCOVERY_FORMAT,
    SQUEUE_SEP,
    DiscoveredJob,
    parse_job,
    parse_node,
    parse_squeue_discovery,
)
from resurgo.slurm.runner import CommandResult, CommandRunner

log = logging.getLogger(__name__)

_UNAVAILABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|slurm_load_\w+ error: Unable to contact",
    re.IGNORECASE,
)
_GONE = re.compile(r"Invalid job id specified|Invalid job id|Job has already finished", re.I)
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_node_name(name: str) -> str:
    """Node names reach scontrol arguments; refuse anything that is not a plain hostname."""
    if not _NODE_NAME.match(name):
        raise ValueError(f"refusing suspicious node name {name!r}")
    return name


class SlurmClient:
    def __init__(self, runner: CommandRunner) -> None:
        self.runner = runner
        self._kill_wait: float | None = None

    async def _run(self, argv: list[str], *, timeout: float = 30.0) -> CommandResult:
        result = await self.runner.run(argv, timeout=timeout)
        if result.returncode != 0:
            text = (result.stderr or result.stdout).strip()
            if _UNAVAILABLE.search(text):
                raise SchedulerUnavailable(f"{shlex.join(argv)}: {text[:500]}")
            if _GONE.search(text):
                raise JobGone(f"{shlex.join(argv)}: {text[:500]}")
            raise CommandFailed(f"{shlex.join(argv)} exited {result.returncode}: {text[:500]}")
        return result

    async def show_job(self, job_id: int) -> JobObservation | None:
        """A fresh observation of one job, or None when slurmctld no longer knows it."""
        try:
            shown = await self._run(["scontrol", "show", "-o", "job", str(job_id)])
        except JobGone:
            return None
        lines = [ln for ln in shown.stdout.splitlines() if ln.startswith("JobId=")]
        if not lines:
            if "No jobs" in shown.stdout:
                return None
            raise ParseError(f"scontrol show job {job_id} printed no job: {shown.stdout[:200]!r}")
        name, comment = await self.job_texts(job_id)
        return parse_job(lines[0], comment, name)

    async def job_texts(self, job_id: int) -> tuple[str | None, str | None]:
        """The job's name and comment exactly (user text, read apart from `scontrol`)."""
        got = await self._squeue_field(job_id, "%j" + SQUEUE_SEP + "%k")
        if got is None:
            return None, None
        if got.count(SQUEUE_SEP) != 1:
            # The separator inside user text: ask for each field on its own.
            return await self._squeue_field(job_id, "%j"), await self._squeue_field(job_id, "%k")
        name, comment = got.split(SQUEUE_SEP)
        return name, None if comment in ("", "(null)") else comment

    async def job_comment(self, job_id: int) -> str | None:
        text = await self._squeue_field(job_id, "%k")
        return None if text in (None, "", "(null)") else text

    async def _squeue_field(self, job_id: int, fmt: str) -> str | None:
        try:
            shown = await self._run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", fmt])
        except (JobGone, CommandFailed):
            return None
        return shown.stdout.rstrip("\n") or None

    async def all_job_records(self) -> str:
        """`scontrol show -o job` for every job slurmctld holds (one record per line, mostly)."""
        return (await self._run(["scontrol", "show", "-o", "job"])).stdout

    async def squeue_rows(self, job_ids: list[int], fmt: str) -> str:
        """`squeue -o fmt` for these jobs, any state; empty when none of them exists any more."""
        argv = ["squeue", "-h", "-t", "all", "-j", ",".join(map(str, job_ids)), "-o", fmt]
        try:
            return (await self._run(argv)).stdout
        except JobGone:
            return ""

    async def list_jobs(self) -> list[DiscoveredJob]:
        shown = await self._run(["squeue", "-h", "-t", "all", "-o", SQUEUE_DISCOVERY_FORMAT])
        return parse_squeue_discovery(shown.stdout)

    async def show_nodes(self, names: list[str] | None = None) -> list[NodeObservation]:
        argv = ["scontrol", "show", "-o", "node"]
        if names:
            argv.append(",".join(check_node_name(n) for n in names))
        shown = await self._run(argv)
        return [parse_node(ln) for ln in shown.stdout.splitlines() if ln.startswith("NodeName=")]

    async def kill_wait(self) -> float:
        """slurm.conf KillWait in seconds (read once; Slurm's default 30 if unreadable)."""
        if self._kill_wait is None:
            self._kill_wait = 30.0
            try:
                shown = await self._run(["scontrol", "show", "config"])
            except (CommandFailed, SchedulerUnavailable):
                return self._kill_wait
            for line in shown.stdout.splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "KillWait":
                    match = re.match(r"\s*(\d+)", value)
                    if match:
                        self._kill_wait = float(match.group(1))
        return self._kill_wait

    async def requeue_hold(self, job_id: int) -> None:
        await self._run(["scontrol", "requeuehold", str(job_id)])

    async def update_job(self, job_id: int, **fields: str) -> None:
        argv = ["scontrol", "update", f"JobId={job_id}"]
        argv += [f"{key}={value}" for key, value in fields.items()]
        await self._run(argv)

    async def release(self, job_id: int) -> None:
        await self._run(["scontrol", "release", str(job_id)])

    async def cancel(self, job_id: int) -> None:
        await self._run(["scancel", str(job_id)])

    async def drain_node(self, node: str, reason: str) -> None:
        await self._run(
            ["scontrol", "update", f"NodeName={check_node_name(node)}", "State=DRAIN",
             f"Reason={reason}"]
        )  # fmt: skip
