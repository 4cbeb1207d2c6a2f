"""Circuit breaker, per-node remediation caps and cross-job memory for one cluster's controller.

Workflows are per job and cannot see each other; the controller can. Everything here is derived
from Slurm itself, so it survives controller restarts and holds across several controller
replicas. The facts (`Remediation`) are read from:

- jobs (all jobs slurmctld still remembers) whose AdminComment carries a
  Resurgo tag (`resurgo:hold`, `resurgo:released`, `resurgo:released-by-watchdog`) with a key of
  this cluster: every node of their ExcNodeList counts as excluded by Resurgo for that job, at
  the tag's `at=` time (older tags without it: the job's SubmitTime, which requeue resets);
- nodes (`SlurmClient.show_nodes`: JSON where Slurm has it) in a DRAIN state whose Reason
  starts with `resurgo`, at the time Slurm appends to the reason (`[user@time]`; from JSON it
  is Slurm's `reason_changed_at`, so no text inside the reason can pose as it).

The AdminComment is read from structured records (`squeue --json`, see `SlurmClient.all_jobs`):
only root can write it, and no user text (a name, a work dir) can pose as one there.

Approximations (documented, all on the conservative side except the last two):
- a user's own `--exclude` on a job Resurgo later held counts as a Resurgo exclusion;
- a new hold re-stamps the whole ExcNodeList of that job (older exclusions look newer);
- a finished job is forgotten after slurmctld's MinJobAge, a RESUMEd node at once;
- check-then-act is not atomic: concurrent steps on several replicas may overshoot by the
  number of steps in flight.

The functions below are pure; `SlurmActions` gathers the facts and enforces the verdicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from resurgo.contracts import JobObservation, NodeObservation
from resurgo.slurm.parsers import compress_hostlist

TAG_PREFIX = "resurgo:"
DRAIN_PREFIX = "resurgo"
# `resurgo:<cluster>:<job id>:<submit>`, or `<array id>_<task id>` for a task of an array
# (owned by the array's id: the task's own exclusions count by the job that carries them).
_KEY = re.compile(r"resurgo:([^:\s]+):(\d+)(?:_\d+)?:\d+")
_AT = re.compile(r"(?:^|\s)at=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")
_REASON_TIME = re.compile(r"\[[^\[\]@]*@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]\s*$")


class BreakerSettings(BaseModel):
    """The cluster's limits on remediation (from ClusterSettings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_seconds: float = Field(default=3600.0, gt=0)
    max_excluded_share: float = Field(default=0.1, ge=0.0, le=1.0)
    max_remediations_per_node: int = Field(default=3, ge=1)
    drain_after_jobs: int = Field(default=3, ge=1)
    allow_drain: bool = False

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)


@dataclass(frozen=True)
class Remediation:
    """One observed fact: `node` was excluded (for `job_id`) or drained by Resurgo at `at`."""

    node: str
    kind: Literal["exclude", "drain"]
    job_id: int | None
    at: datetime | None  # None: unknown, treated as now


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_owner(text: str) -> tuple[str, int] | None:
    """(cluster, job id) of the first Resurgo idempotency key in `text`."""
    match = _KEY.search(text)
    return (match.group(1), int(match.group(2))) if match else None


def _tag_time(comment: str) -> datetime | None:
    match = _AT.search(comment)
    if not match:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _reason_time(reason: str) -> datetime | None:
    match = _REASON_TIME.search(reason)
    if not match:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def remediations_from_jobs(jobs: Iterable[JobObservation], cluster: str) -> list[Remediation]:
    """Exclusions Resurgo made on `cluster`, from jobs whose AdminComment carries our tag."""
    found: list[Remediation] = []
    for job in jobs:
        comment = job.admin_comment
        if not comment.startswith(TAG_PREFIX):
            continue
        owner = key_owner(comment)
        if owner is None or owner[0] != cluster:
            continue
        at = _tag_time(comment) or job.submit_time
        found.extend(Remediation(n, "exclude", job.job_id, at) for n in job.exc_node_list)
    return found


def remediations_from_nodes(nodes: Iterable[NodeObservation], cluster: str) -> list[Remediation]:
    """Nodes Resurgo drained: DRAIN with a Reason starting `resurgo` (another cluster's key: not
    ours; no key at all: counted, conservatively)."""
    found: list[Remediation] = []
    for node in nodes:
        if "DRAIN" not in node.state or not node.reason.startswith(DRAIN_PREFIX):
            continue
        owner = key_owner(node.reason)
        if owner is not None and owner[0] != cluster:
            continue
        job_id = owner[1] if owner else None
        found.append(Remediation(node.name, "drain", job_id, _reason_time(node.reason)))
    return found


def _recent(facts: Iterable[Remediation], window: timedelta, now: datetime) -> list[Remediation]:
    return [f for f in facts if f.at is None or now - f.at <= window]


def remediated_nodes(facts: Iterable[Remediation], window: timedelta, now: datetime) -> set[str]:
    """Distinct nodes Resurgo excluded or drained in the window."""
    return {f.node for f in _recent(facts, window, now)}


def remediation_events(
    facts: Iterable[Remediation], window: timedelta, now: datetime
) -> dict[str, set[str]]:
    """Per node, the distinct remediations in the window: one per job (its exclusion and any
    drain carrying its key are one remediation), one per drain of unknown origin."""
    events: dict[str, set[str]] = {}
    for f in _recent(facts, window, now):
        event = f"job:{f.job_id}" if f.job_id is not None else f"drain:{f.node}"
        events.setdefault(f.node, set()).add(event)
    return events


def implicated_jobs(
    facts: Iterable[Remediation], window: timedelta, now: datetime
) -> dict[str, set[int]]:
    """Per node, the distinct jobs that excluded it (named it a culprit) in the window."""
    jobs: dict[str, set[int]] = {}
    for f in _recent(facts, window, now):
        if f.kind == "exclude" and f.job_id is not None:
            jobs.setdefault(f.node, set()).add(f.job_id)
    return jobs


def nodes_to_drain(
    facts: Iterable[Remediation], k: int, window: timedelta, now: datetime
) -> dict[str, int]:
    """Cross-job memory: nodes implicated in failures of at least `k` distinct jobs in the
    window and not already drained by Resurgo, with the number of jobs."""
    facts = list(facts)
    drained = {f.node for f in facts if f.kind == "drain"}
    return {
        node: len(jobs)
        for node, jobs in sorted(implicated_jobs(facts, window, now).items())
        if len(jobs) >= k and node not in drained
    }


def breaker_limit(total_nodes: int, share: float) -> int:
    """How many distinct nodes may be remediated per window (at least 1)."""
    return max(1, math.floor(share * total_nodes + 1e-9))


def open_until(
    facts: Iterable[Remediation], *, total_nodes: int, settings: BreakerSettings, now: datetime
) -> datetime | None:
    """Until when the breaker refuses any new node (`breaker_limit` distinct nodes already
    remediated in the window), None when it is closed: it closes once enough of those nodes'
    latest remediations age out of the window to leave fewer than the limit."""
    limit = breaker_limit(total_nodes, settings.max_excluded_share)
    latest: dict[str, datetime] = {}
    for f in _recent(facts, settings.window, now):
        at = f.at or now
        latest[f.node] = max(latest.get(f.node, at), at)
    if len(latest) < limit:
        return None
    return sorted(latest.values())[len(latest) - limit] + settings.window


def refusal(
    facts: Iterable[Remediation],
    *,
    cluster: str,
    job_id: int,
    requested: Iterable[str],
    total_nodes: int,
    settings: BreakerSettings,
    now: datetime,
) -> str | None:
    """Why remediating `requested` for `job_id` must be refused, or None when it may go ahead.

    Per-node cap: a node already remediated for `max_remediations_per_node` other jobs in the
    window is refused (what this job did already is not counted again). Circuit breaker: new
    nodes must not push the distinct remediated nodes past `breaker_limit`."""
    facts = list(facts)
    wanted = set(requested)
    window = settings.window
    events = remediation_events(facts, window, now)
    own = f"job:{job_id}"
    for node in sorted(wanted):
        others = events.get(node, set()) - {own}
        if own not in events.get(node, set()) and len(others) >= settings.max_remediations_per_node:
            return (
                f"per-node cap: node {node} was already remediated for {len(others)} job(s) on "
                f"cluster {cluster} in the last {settings.window_seconds:.0f}s "
                f"(max_remediations_per_node={settings.max_remediations_per_node})"
            )
    current = remediated_nodes(facts, window, now)
    new = wanted - current
    limit = breaker_limit(total_nodes, settings.max_excluded_share)
    after = current | wanted
    if new and len(after) > limit:
        return (
            f"circuit breaker: remediating {compress_hostlist(new)} would make {len(after)} "
            f"distinct node(s) excluded/drained by Resurgo on cluster {cluster} in the last "
            f"{settings.window_seconds:.0f}s, over max_excluded_share="
            f"{settings.max_excluded_share:g} of {total_nodes} node(s) (limit {limit})"
        )
    return None
