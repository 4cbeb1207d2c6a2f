"""A typed client over Slurm's CLI: one command path, errors mapped once.

Jobs are read from `squeue --json` wherever this Slurm has it (21.08 on; decided at the first
read and kept): there no user text can pose as another field or another job. Slurm without it
is read from text output, with the defences of `parsers` and `snapshot`.

Nodes follow the same decision: with `squeue --json` they are read from `scontrol --json show
node` (23.02 on, by the version that listing reports) or `sinfo --json` (21.08-22.05), the first
of them this Slurm answers with a node list (decided at the first node read and kept); without
it, and when neither answers, from `scontrol show -o node` text (`parsers.parse_node`)."""

from __future__ import annotations

import logging
import re
import shlex
from typing import Literal

from resurgo.contracts import JobObservation, NodeObservation
from resurgo.slurm import node_records
from resurgo.slurm.errors import (
    CommandFailed,
    JobGone,
    ParseError,
    SchedulerUnavailable,
)
from resurgo.slurm.json_records import Listing
from resurgo.slurm.parsers import (
    SQUEUE_DISCOVERY_FORMAT,
    SQUEUE_SEP,
    DiscoveredJob,
    check_node_name,
    parse_job,
    parse_nodes,
    parse_squeue_discovery,
)
from resurgo.slurm.runner import CommandResult, CommandRunner
from resurgo.slurm.targets import JobRef, job_target

log = logging.getLogger(__name__)

_UNAVAILABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|slurm_load_\w+ error: Unable to contact",
    re.IGNORECASE,
)
_GONE = re.compile(r"Invalid job id specified|Invalid job id|Job has already finished", re.I)
# What an old squeue says to `--json` (no such option, or no JSON serializer plugin).
_NO_JSON = re.compile(r"unrecognized option|invalid option|unknown option|serializ|plugin", re.I)
# 22.05 ignores -t/-j with --json (every job is printed); later versions honour them.
SQUEUE_JSON = ["squeue", "--json", "-t", "all"]
LISTING_TIMEOUT = 60.0
__all__ = ["SlurmClient", "check_node_name", "job_target"]

NodeSource = Literal["scontrol-json", "sinfo-json", "text"]
# `scontrol --json` (23.02 on) takes node names; `sinfo --json` of 22.05 ignores -n (every
# node is printed), so it lists all and the names are picked here.
_NODE_ARGV: dict[NodeSource, list[str]] = {
    "scontrol-json": ["scontrol", "--json", "show", "node"],
    "sinfo-json": ["sinfo", "--json"],
    "text": ["scontrol", "show", "-o", "node"],
}


class SlurmClient:
    def __init__(self, runner: CommandRunner, *, structured: bool | None = None) -> None:
        """`structured`: read jobs from `squeue --json` (True), from text (False), or decide
        at the first read (None, the default)."""
        self.runner = runner
        self._kill_wait: float | None = None
        self._structured = structured
        self._version = (0, 0)
        self._node_source: NodeSource | None = None

    async def structured(self) -> bool:
        """Whether jobs are read from `squeue --json` (asks Slurm once if not yet known)."""
        if self._structured is None:
            await self.squeue_json()
        return bool(self._structured)

    async def squeue_json(self, job_id: int | None = None) -> Listing | None:
        """`squeue --json` (all jobs, or `job_id`'s where Slurm filters), None without JSON."""
        if self._structured is False:
            return None
        argv = SQUEUE_JSON + (["-j", str(job_id)] if job_id is not None else [])
        try:
            shown = await self._run(argv, timeout=LISTING_TIMEOUT)
        except CommandFailed as exc:
            if self._structured is None and _NO_JSON.search(str(exc)):
                self._decide(False, str(exc))
                return None
            raise
        if self._structured is None:
            # An squeue that ignores the option prints its table: no JSON here.
            self._decide(shown.stdout.lstrip().startswith("{"), shown.stdout[:200])
            if not self._structured:
                return None
        listing = Listing(shown.stdout)
        self._version = listing.version
        return listing

    def _decide(self, structured: bool, evidence: str) -> None:
        self._structured = structured
        if structured:
            log.info("reading jobs from squeue --json")
        else:
            log.warning(
                "this Slurm has no squeue --json (%r): reading jobs from text output", evidence
            )

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
        """A fresh observation of one job, or None when slurmctld no longer knows it.

        ParseError when that job's record cannot be read: it costs that job, no other."""
        try:
            listing = await self.squeue_json(job_id)
        except JobGone:
            return None
        if listing is not None:
            return listing.observation(job_id)
        try:
            shown = await self._run(["scontrol", "show", "-o", "job", str(job_id)])
        except JobGone:
            return None
        # A newline in the job's own text can start a line posing as a record: only lines
        # headed by this job's id count, and two of them make the answer unreadable.
        head = f"JobId={job_id} "
        lines = [ln for ln in shown.stdout.split("\n") if ln.startswith(head)]
        if not lines:
            if "No jobs" in shown.stdout:
                return None
            raise ParseError(f"scontrol show job {job_id} printed no job: {shown.stdout[:200]!r}")
        if len(lines) > 1:
            raise ParseError(f"scontrol show job {job_id} printed {len(lines)} records for it")
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
        """Every job slurmctld holds, for discovery."""
        listing = await self.squeue_json()
        if listing is not None:
            return listing.discovered()
        shown = await self._run(["squeue", "-h", "-t", "all", "-o", SQUEUE_DISCOVERY_FORMAT])
        return parse_squeue_discovery(shown.stdout)

    async def all_jobs(self, want: set[int] | None = None) -> dict[int, JobObservation]:
        """Every job slurmctld holds (or those of `want`), as observations; a job whose record
        cannot be read is logged and left out (ask about it on its own to get its error)."""
        listing = await self.squeue_json()
        if listing is not None:
            return listing.observations(want)
        shown = await self._run(["scontrol", "show", "-o", "job"], timeout=LISTING_TIMEOUT)
        listed = {job.job_id: job for job in await self.list_jobs()}
        lines: dict[int, list[str]] = {}
        for line in shown.stdout.split("\n"):
            if line.startswith("JobId="):
                head = line.split(None, 1)[0].removeprefix("JobId=")
                if head.isdigit() and (want is None or int(head) in want):
                    lines.setdefault(int(head), []).append(line)
        jobs: dict[int, JobObservation] = {}
        for job_id, found in lines.items():
            # A job id squeue does not know, or printed twice, is user text posing as a record.
            if job_id not in listed or len(found) != 1:
                continue
            texts = listed[job_id]
            try:
                jobs[job_id] = parse_job(found[0], texts.comment or None, texts.name or None)
            except ParseError as exc:
                log.error("job listing: skipping job %s: %s", job_id, exc)
        return jobs

    async def node_source(self) -> NodeSource:
        """Where nodes are read from (asks Slurm once if not yet known)."""
        if self._node_source is None:
            await self.show_nodes()
        assert self._node_source is not None
        return self._node_source

    async def _node_sources(self) -> list[NodeSource]:
        if self._node_source is not None:
            return [self._node_source]
        if not await self.structured():
            return ["text"]
        if (0, 0) < self._version < (23, 2):
            return ["sinfo-json", "text"]
        return ["scontrol-json", "sinfo-json", "text"]

    async def show_nodes(self, names: list[str] | None = None) -> list[NodeObservation]:
        """These nodes (all without `names`) as slurmctld shows them; an unknown name is left
        out. A node record that does not fit is logged and left out (`node_observation`)."""
        wanted = [check_node_name(n) for n in names] if names else []
        for source in await self._node_sources():
            argv = list(_NODE_ARGV[source])
            if wanted and source != "sinfo-json":
                argv.append(",".join(wanted))
            try:
                shown = await self._run(argv)
            except CommandFailed as exc:
                if self._node_source is None and source != "text" and _NO_JSON.search(str(exc)):
                    log.info("node read: %s has no --json here (%s)", argv[0], str(exc)[:200])
                    continue
                if not wanted:
                    raise
                # One unknown name fails the whole command (`Node x not found`, on stdout after
                # the others' records): list all, pick the known ones.
                shown = await self._run(_NODE_ARGV[source])
            if source == "text":
                nodes = parse_nodes(shown.stdout)
            else:
                records = node_records.node_list(shown.stdout)
                if records is None:
                    if self._node_source is None:
                        log.info("node read: %s printed no node list", argv[0])
                        continue
                    raise ParseError(f"{shlex.join(argv)} printed no node list: "
                                     f"{shown.stdout[:200]!r}")  # fmt: skip
                nodes = node_records.observations(records)
            self._decide_nodes(source)
            return [n for n in nodes if n.name in wanted] if wanted else nodes
        raise AssertionError("the text source always answers or raises")

    def _decide_nodes(self, source: NodeSource) -> None:
        if self._node_source is None:
            self._node_source = source
            if source == "text":
                log.warning("reading nodes from scontrol show -o node text output")
            else:
                log.info("reading nodes from %s", shlex.join(_NODE_ARGV[source]))

    async def kill_wait(self) -> float:
        """slurm.conf KillWait in seconds (read once; Slurm's default 30 if unreadable)."""
        if self._kill_wait is None:
            self._kill_wait = 30.0
            try:
                shown = await self._run(["scontrol", "show", "config"])
            except (CommandFailed, SchedulerUnavailable):
                return self._kill_wait
            for line in shown.stdout.split("\n"):
                key, _, value = line.partition("=")
                if key.strip() == "KillWait":
                    match = re.match(r"\s*(\d+)", value)
                    if match:
                        self._kill_wait = float(match.group(1))
        return self._kill_wait

    async def requeue_hold(self, job: JobRef) -> None:
        await self._run(["scontrol", "requeuehold", job_target(job)])

    async def update_job(self, job: JobRef, **fields: str) -> None:
        argv = ["scontrol", "update", f"JobId={job_target(job)}"]
        argv += [f"{key}={value}" for key, value in fields.items()]
        await self._run(argv)

    async def release(self, job: JobRef) -> None:
        await self._run(["scontrol", "release", job_target(job)])

    async def hold_tasks(self, target: str) -> None:
        """`scontrol hold 12_[4-9]`: hold these (pending) tasks of an array."""
        await self._run(["scontrol", "hold", target])

    async def update_tasks(self, target: str, **fields: str) -> None:
        """`scontrol update JobId=12_[4-9] ...` (pending tasks of an array) or `JobId=70+1` (one
        component of a heterogeneous job): update exactly these."""
        argv = ["scontrol", "update", f"JobId={target}"]
        await self._run(argv + [f"{key}={value}" for key, value in fields.items()])

    async def cancel(self, job: JobRef) -> None:
        await self._run(["scancel", job_target(job)])

    async def drain_node(self, node: str, reason: str) -> None:
        await self._run(
            ["scontrol", "update", f"NodeName={check_node_name(node)}", "State=DRAIN",
             f"Reason={reason}"]
        )  # fmt: skip
