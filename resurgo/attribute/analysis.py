"""One attempt's facts for attribution, and what a stage concludes from them.

`Analysis` gathers everything once (the attempt's lines, who ran where, the events the pattern
registry found, srun's verdicts, node logs, metrics, Slurm's facts); the stages in `rules`,
`stragglers` and `liveness` read it and return a `Verdict`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

from resurgo.attribute.events import Event, JobScan
from resurgo.attribute.job_log import scan_job, split_attempt
from resurgo.attribute.link_recovery import failure_time, without_recovered_flaps
from resurgo.attribute.metrics import Finding, findings
from resurgo.attribute.node_logs import scan_node_logs
from resurgo.attribute.oom_blocks import without_other_jobs_ooms
from resurgo.attribute.scheduler import SchedulerFacts, owner_cancelled
from resurgo.attribute.topology import Topology, addresses_in_node_files, learn_topology
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.registry import Registry

Kind = AnomalyKind | Literal["none"]
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"})
# New iterations after an error that show training went on past it (a finished job's output).
SURVIVED_ADVANCES = 2
_T = TypeVar("_T")
_TOTAL = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# pdsh reports a remote command that ended with a non-zero status (`pdsh@ml-a100-31: ml-a100-33:
# ssh exited with exit code 250`; pdsh's exec module, as DeepSpeed's multi-node launcher runs
# it): that node's part of the job is over, so the job is not still running.
_PDSH_REMOTE_EXIT = re.compile(r"\bpdsh@\S+: \S+: \w+ exited with exit code [1-9]\d*\b")
_KILL_REASON = re.compile(r"CANCELLED AT \S+ DUE TO (?P<why>[A-Z][A-Z ]+?)(?:,| \*\*\*)")


_PREEMPTED = re.compile(r"\bpreempted JobId=(\d+) has been requeued to reclaim resources\b")
# The state a kill line's reason leaves a job in (sacct's names; a bare cancel: CANCELLED).
_ENDED_BY = {
    "TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL",
    "JOB REQUEUE": "REQUEUED",
}  # fmt: skip


def fingerprint(category: Category, key: str) -> str:
    digest = hashlib.sha256(f"{category.value}|{key}".encode()).hexdigest()[:12]
    return f"{category.value}:{digest}"


@dataclass
class Verdict:
    """What a stage concluded (turned into an Attribution at the end)."""

    category: Category
    key: str
    summary: str
    confidence: float
    culprits: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    evidence: list[LogLine] = field(default_factory=list)
    kind: Kind | None = None
    outcome: str | None = None

    def copy(self) -> Verdict:
        """A copy whose lists the caller may amend (stages add culprits and evidence)."""
        return replace(
            self, culprits=[*self.culprits], ranks=[*self.ranks], gpus=[*self.gpus],
            evidence=[*self.evidence],
        )  # fmt: skip


class Analysis:
    """All facts about one attempt, gathered once; the stages read them."""

    def __init__(
        self,
        registry: Registry,
        lines: list[LogLine],
        facts: SchedulerFacts,
        node_list: list[str],
        node_logs: Mapping[str, list[LogLine]],
        metrics: list[LogLine],
    ) -> None:
        self.registry = registry
        self.facts = facts
        job = facts.job
        self.job = job
        self.node_list = list(node_list) or (list(job.node_list) if job else [])
        restarts = job.restarts if job is not None else None
        self.header = lines[:20]  # (the whole output's head: an operator's notes on the job)
        self.lines = split_attempt(lines, restarts, job.state if job is not None else None)
        if len(self.lines) == len(lines) and not node_list:
            # (the output holds the earlier runs too: their nodes ran part of what it shows)
            self.node_list += [n for n in facts.earlier_nodes if n not in self.node_list]
        self.topo: Topology = learn_topology(
            self.lines,
            self.node_list,
            num_tasks=facts.num_tasks,
            aliases={**addresses_in_node_files(node_logs), **facts.host_aliases()},
        )
        self.scan: JobScan = scan_job(registry, self.lines, self.topo)
        boot = {n: t for n in facts.node_fields if (t := facts.boot_time(n)) is not None}
        window = (job.start_time, job.end_time) if job is not None else (None, None)
        self.node_logs = node_logs  # (diagnostic files: why a straggler's node is slow)
        self.node_events = without_other_jobs_ooms(
            scan_node_logs(registry, node_logs, self.topo.hosts, window=window, boot=boot),
            node_logs,
            job.job_id if job is not None else None,
        )
        self.metric_lines = metrics  # (the job's own per-rank timer tables, `rank_phases`)
        self.metric_findings = [
            Finding(h, f.category, f.severity, f.what, f.line, f.gpu)
            for f in findings(metrics)
            if (h := self.topo.hosts.canonical(f.host)) is not None
        ]
        self.state = job.state if job is not None else None
        self.events = self.scan.events
        self.kill_order = self._kill_order()
        if self.state == "PENDING" and self._preempted():
            self.state = "PREEMPTED"  # (requeued after its preemption: this attempt is over)
        if self.state == "COMPLETING" and self.kill_order is not None:
            # (Completing after Slurm's own kill line, however long it stays in CG: the job
            # ended as that line says, it does not run.)
            why = _KILL_REASON.search(self.lines[self.kill_order].text)
            self.state = _ENDED_BY.get(why.group("why").strip() if why else "", "CANCELLED")
        self.offline = False
        if not self.running:
            # (a running job slowed since a flap ran over the port as it came back: degraded)
            failed_at = failure_time(window[1], self.lines[-50:], self.node_events)
            self.node_events = without_recovered_flaps(self.node_events, node_logs, failed_at)

    def forget_survived(self) -> None:
        """Errors training went on past were handled, not the job's failure: those before the
        last advance when Slurm says the job still runs; otherwise those followed by at least
        SURVIVED_ADVANCES new iterations (one more progress line can be output buffered
        before a peer's fatal error). Hardware errors stay (a degraded GPU or link can still
        be why it stalls or dies later), and so do straggler reports: a detector's report is
        printed while training goes on, not an error it survived."""
        advances = self.scan.advances
        if not advances:
            return
        if self.state in RUNNING_STATES:
            self.events = [
                e for e in self.events if e.hardware or _slow(e) or e.order > advances[-1]
            ]
            return
        if len(advances) < SURVIVED_ADVANCES:
            return
        cut = advances[-SURVIVED_ADVANCES]
        self.events = [e for e in self.events if e.hardware or _slow(e) or e.order > cut]

    def once(self, key: str, compute: Callable[[], _T]) -> _T:
        """`compute()` the first time `key` is asked for in this analysis, then its result:
        several stages ask the same question, and each answer reads every line."""
        memo = self.__dict__.setdefault("_once", {})
        if key not in memo:
            memo[key] = compute()
        found: _T = memo[key]
        return found

    # ------------------------------------------------------------------ facts
    @property
    def running(self) -> bool:
        if self.state is not None:
            return self.state in RUNNING_STATES or self.state == "PENDING"
        return (
            not self.scan.ended
            and self._completion() is None
            and not any(_PDSH_REMOTE_EXIT.search(e.text) for e in self.lines[-200:])
        )

    @property
    def terminal(self) -> bool:
        return self.state is not None and not self.running

    def _completion(self) -> LogLine | None:
        if self.scan.completed_line is not None:
            return self.scan.completed_line
        for entry in reversed(self.lines[-50:]):
            m = _TOTAL.search(entry.text)
            if m:
                return entry if int(m.group(1)) >= int(m.group(2)) > 0 else None
        return None

    def completed(self) -> bool:
        job = self.job
        if job is not None and job.state not in RUNNING_STATES:
            if job.state == "FAILED" and job.exit_signal == 0 and self.finished_before_exit():
                return True
            return job.state == "COMPLETED" and job.exit_code == 0 and job.exit_signal == 0
        failing = [x for x in self.scan.exit_order if x.status != "exit" or x.code]
        if failing or (self.scan.srun_rc not in (None, 0)):
            return False
        fatal = [e for e in self.events if e.root and e.match.severity == "fatal"]
        done = self._completion()
        if done is None:
            return self.scan.srun_rc == 0 and not fatal
        return not [e for e in fatal if e.order > self.lines.index(done)]

    def finished_before_exit(self) -> bool:
        """The output says training finished, and all that failed after it is tasks exiting
        with a code and no message (no error, no signal): the launcher's teardown, the work
        done (a resubmission would only repeat it)."""
        done = self._completion()
        if done is None or not self.scan.exit_order:
            return False
        if any(x.status != "exit" for x in self.scan.exit_order):
            return False
        # (by identity, from the end where the line is: comparing pydantic lines is slow)
        back = next((i for i, e in enumerate(reversed(self.lines)) if e is done), None)
        if back is None:
            return False
        after = len(self.lines) - 1 - back
        return not any(
            e.order > after and e.match.severity in ("fatal", "error") for e in self.events
        ) and all(x.order > after for x in self.scan.exit_order)

    def _preempted(self) -> bool:
        """slurmctld's own line that it requeued this job to make room (src/slurmctld's
        preemption: `preempted JobId=N has been requeued to reclaim resources for JobId=M`)."""
        job = self.job
        if job is None:
            return False
        return any(
            "preempted JobId=" in e.text and (m := _PREEMPTED.search(e.text)) is not None
            and int(m.group(1)) == job.job_id
            for e in self.facts.lines
        )  # fmt: skip

    def _kill_order(self) -> int | None:
        """Where the scheduler started killing the job (time limit, preemption, cancel)."""
        for e in self.events:
            if e.match.id in (
                "slurm_cancelled_time_limit",
                "slurm_cancelled_preemption",
                "slurm_cancelled_other",
                "slurm_job_cancelled",
            ):
                return e.order
        return None

    def actors(self) -> set[str]:
        out = set(self.topo.actors())
        out |= {e.actor for e in self.events if e.actor}
        out |= set(self.scan.exits)
        world = self.topo.world_size()
        if world and out and all(a.startswith("t") for a in out):
            out |= {f"t{i}" for i in range(world)}
        return out

    def node_of_actor(self, actor: str) -> str | None:
        if actor in self.scan.exits and self.scan.exits[actor].node:
            return self.scan.exits[actor].node
        if actor.startswith("h"):
            return self.topo.hosts.canonical(actor[1:])
        number = int(actor[1:])
        if actor.startswith("t"):
            return self.topo.node_of(number, None)
        return self.topo.node_of(None, number)

    def first_events(self) -> dict[str, Event]:
        first: dict[str, Event] = {}
        for e in self.events:
            if e.actor is not None and e.serious and (e.root or e.cascade):
                first.setdefault(e.actor, e)
        return first

    def victims(self) -> set[str]:
        """Actors whose first error is a cascade: they reacted to somebody else's failure."""
        return {a for a, e in self.first_events().items() if e.cascade}

    def in_job(self, node: str | None) -> bool:
        return node is not None and (not self.node_list or node in self.node_list)

    def job_nodes(self) -> list[str]:
        """Slurm's node list, else the nodes srun reported the job's tasks on."""
        return list(self.node_list) or sorted({x.node for x in self.scan.exit_order if x.node})

    def scheduler_outcome(self) -> str | None:
        why = None
        for e in self.events:
            if m := _KILL_REASON.search(e.line.text):
                reason = m.group("why").strip()
                if reason != "JOB REQUEUE":
                    why = reason
        state = self.state or ""
        if state == "TIMEOUT" or why == "TIME LIMIT":
            return "timeout"
        if state == "PREEMPTED" or why == "PREEMPTION":
            return "preempted"
        if state in ("NODE_FAIL", "BOOT_FAIL") or (why or "").startswith("NODE FAIL"):
            return "node_fail"
        if state == "DEADLINE":
            return "timeout"
        cancelled = state == "CANCELLED" or (
            not state and any(e.match.id == "slurm_job_cancelled" for e in self.events)
        )
        if cancelled:
            return "admin_cancelled" if owner_cancelled(self.facts) is False else "owner_cancelled"
        return None


def actor_node(a: Analysis, actor: str | None) -> str | None:
    return a.node_of_actor(actor) if actor else None


def event_node(a: Analysis, e: Event) -> str | None:
    """Where an event happened: its own host, else its rank's or task's node."""
    return e.node or actor_node(a, e.actor)


def _slow(e: Event) -> bool:
    """A straggler detector's report (not an error a job could survive)."""
    return e.match.kind == AnomalyKind.STRAGGLER and e.match.role == "root"
