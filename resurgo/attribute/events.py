"""Attributable events and what a scan of the job's output yields.

An `Event` is one registry match on one line, tagged with its actor (srun task, else rank,
else host prefix), node and position; srun's per-task verdicts are `TaskExit`s, torchelastic's
`Root Cause`/`Failures` entries `ElasticFailure`s, and `JobScan` holds them all with the
progress/completion markers (`job_log.scan_job` fills it). Kept apart from the scanners so
the job-log and node-log scans and the attribution stages share one set of types, and the
scheduler/teardown ids that decide whether an event counts as a root or a cascade.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.attempt_state import is_checkpoint_failure
from resurgo.detect.lines import parse_nccl_prefix
from resurgo.detect.registry import PatternMatch

# Registry roots that are facts about the scheduler, handled from Slurm's own state.
SCHEDULER_IDS = frozenset(
    {
        "slurm_cancelled_time_limit",
        "slurm_cancelled_node_failure",
        "slurm_cancelled_preemption",
        "slurm_cancelled_other",
        "slurm_job_cancelled",
        "srun_node_failure",
        "srun_task_signal",  # re-derived from the srun task line itself
    }
)
# Cascades that are Slurm/launcher teardown notices, not a rank's own failure.
TEARDOWN_IDS = frozenset(
    {
        "slurm_step_cancelled",
        "srun_job_step_aborted",
        "torchelastic_signal_exception",
        "torchelastic_closing_signal",
    }
)
_NORMALISE = re.compile(
    r"0x[0-9a-fA-F]+|\b\d+(?:\.\d+)*\b|(?:/[\w.@+-]+)+/?|\[[\w.:]+\]:\d+|<\d+>|"
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F-]{27,}\b"
)
_CORRECTED = re.compile(r"(?i)(?<!un)corrected\b")


@dataclass
class Event:
    line: LogLine
    order: int
    origin: str  # "job" | "node" | "metrics" | "scheduler"
    actor: str | None
    task: int | None
    rank: int | None
    node: str | None
    match: PatternMatch
    message: str
    key: str
    in_save: bool = False
    when: datetime | None = None

    @property
    def category(self) -> Category:
        return self.match.category

    @property
    def hardware(self) -> bool:
        return self.match.category.value.startswith("hardware")

    @property
    def root(self) -> bool:
        return self.match.role == "root" and self.match.id not in SCHEDULER_IDS

    @property
    def cascade(self) -> bool:
        return self.match.role == "cascade" and self.match.id not in TEARDOWN_IDS

    @property
    def serious(self) -> bool:
        return self.match.severity in ("fatal", "error")

    @property
    def checkpoint_save(self) -> bool:
        return (
            self.in_save
            or is_checkpoint_failure(self.match.id)
            or "checkpoint_save" in self.match.tags
        )


@dataclass
class TaskExit:
    actor: str
    task: int
    node: str | None
    status: str  # "exit" | "signal" | "killed" | "terminated" | "oom"
    code: int | None
    what: str
    line: LogLine
    order: int
    after_termination: bool


@dataclass
class ElasticFailure:
    rank: int | None
    node: str | None
    exitcode: int | None
    line: LogLine
    order: int
    root: bool
    when: datetime | None = None
    """The block's `time` field: with one agent per node, each names its own first failure."""
    pid: int | None = None
    """The child's process id (`exitcode  : -9 (pid: 48115)`): what a node's kernel log names."""


@dataclass
class JobScan:
    events: list[Event] = field(default_factory=list)
    exits: dict[str, TaskExit] = field(default_factory=dict)
    exit_order: list[TaskExit] = field(default_factory=list)
    elastic: list[ElasticFailure] = field(default_factory=list)
    terminated_at: int | None = None
    """Order of the first line showing srun/Slurm tearing the step down."""
    first_iteration: int | None = None
    max_iteration: int | None = None
    resumed_from: int | None = None
    completed_line: LogLine | None = None
    srun_rc: int | None = None
    ended: bool = False
    """The output shows the step ended (srun verdicts, rc line, teardown)."""
    timings: dict[int, list[tuple[int, float, str]]] = field(default_factory=dict)
    """rank → [(step, ms, node)] from per-rank timing lines."""
    field_times: dict[str, dict[int, list[tuple[int, float, str]]]] = field(default_factory=dict)
    """Per time field (`step_time_s`, `data_time`, `dt`...): rank → [(step, ms, node)], from
    lines in any other format (used where `timings` has none)."""
    slowest: list[tuple[str | None, int, float, LogLine]] = field(default_factory=list)
    """Cross-rank timer summaries: (node, slowest rank, its time over the median, line)."""
    advances: list[int] = field(default_factory=list)
    """Orders of the lines that took training to a new iteration."""
    progress_times: list[datetime] = field(default_factory=list)
    """Wall-clock times progress lines carry, in order (naive, as printed)."""


def normalise(text: str, hosts: Iterable[str] = ()) -> str:
    """Message text without numbers, paths, addresses or host names (for comparison)."""
    out = text
    nccl = parse_nccl_prefix(out)
    if nccl is not None:
        out = nccl.rest
    for host in sorted(set(hosts), key=len, reverse=True):
        if host:
            out = out.replace(host, "<node>")
    return _NORMALISE.sub("#", out).strip()[:240]


def actor_of(task: int | None, rank: int | None, host: str | None = None) -> str | None:
    if task is not None:
        return f"t{task}"
    if rank is not None:
        return f"r{rank}"
    if host is not None:
        return f"h{host}"
    return None


def kind_of(events: Iterable[Event]) -> AnomalyKind:
    """Hang if the decisive events are timeouts, else crash."""
    kinds = {e.match.kind for e in events}
    return AnomalyKind.HANG if kinds == {AnomalyKind.HANG} else AnomalyKind.CRASH
