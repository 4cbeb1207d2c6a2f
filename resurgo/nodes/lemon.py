"""Lemon detection: a node blamed for failures of K distinct jobs within a window gets drain
advice. Pure: the ledger's history in, at most one advice out.

What counts (see `ledger.counted_failures`): failures Resurgo attributed to the node (a culprit
of an `attribution` event of category other than `none` and `application`: a bug in the
training code is not the node's fault), of distinct jobs, within `lemon_window_seconds`
(`PolicyConfig.nodes`) before `now`, and after the node was last cleared (drain advised, or
resumed after a passing validation): so one set of failures yields one advice, and a
validated node starts afresh. A node already drained or under validation gets no new advice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from resurgo.contracts import Frozen, PolicyConfig
from resurgo.nodes.ledger import LedgerEntry, counted_failures, state_of

__all__ = ["LemonAdvice", "lemon_advice", "lemon_reason"]

# Slurm keeps a node's Reason short in practice; the drain step cuts it to this.
MAX_REASON = 250


class LemonAdvice(Frozen):
    """Drain `node` of `cluster`: `jobs` (distinct, ascending) failed on it within the window."""

    cluster: str
    node: str
    jobs: list[int]
    failures: int
    categories: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    reason: str
    window_seconds: float
    first_at: datetime
    last_at: datetime


def lemon_reason(node: str, jobs: list[int], categories: list[str], window: timedelta) -> str:
    """The drain reason: names Resurgo, the evidence (categories) and the jobs. Starts with
    `resurgo` (the circuit breaker counts such drains) and fits Slurm's Reason."""
    hours = window.total_seconds() / 3600
    span = f"{hours:g}h" if hours >= 1 else f"{window.total_seconds():g}s"
    head = f"resurgo lemon: {node} blamed for failures of {len(jobs)} jobs in {span} (jobs "
    cats = "; " + ",".join(categories) + ")" if categories else ")"
    listed = ",".join(str(j) for j in jobs)
    room = MAX_REASON - len(head) - len(cats)
    if len(listed) > room:
        listed = listed[: max(room - 3, 0)].rsplit(",", 1)[0] + ",..."
    return (head + listed + cats)[:MAX_REASON]


def lemon_advice(
    cluster: str,
    node: str,
    history: list[LedgerEntry],
    policy: PolicyConfig,
    *,
    now: datetime,
) -> LemonAdvice | None:
    """Drain advice for the node, or None while it stays under the threshold."""
    if state_of(history) != "in_service":
        return None
    rules = policy.nodes
    window = timedelta(seconds=rules.lemon_window_seconds)
    counted = counted_failures(history, now=now, window=window)
    jobs = sorted({e.job_id for e in counted if e.job_id is not None})
    if len(jobs) < rules.lemon_failures:
        return None
    # An unknown user counts as nobody: it never makes up the distinct users asked for.
    users = {e.user for e in counted if e.user}
    if rules.lemon_min_users > 1 and len(users) < rules.lemon_min_users:
        return None
    categories = sorted({e.category for e in counted if e.category})
    return LemonAdvice(
        cluster=cluster,
        node=node,
        jobs=jobs,
        failures=len(counted),
        categories=categories,
        evidence=[f"job {e.job_id} ({e.category}): {e.summary[:200]}" for e in counted][-10:],
        reason=lemon_reason(node, jobs, categories, window),
        window_seconds=rules.lemon_window_seconds,
        first_at=min(e.at for e in counted),
        last_at=max(e.at for e in counted),
    )
