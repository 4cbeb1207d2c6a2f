"""Attribution stages that read how the job ended rather than what failed in it.

1. healthy: the job completed (exit 0), or finished with one node holding everybody back;
2. cancelled by its owner → `scheduler`, nothing to recover;
6. scheduler outcomes (time limit, preemption, an admin's cancel) when nothing failed before;
8. no failure in sight: a hang while running, else an exit with no recognised error.

(Numbers are the stages' places in `rules.analyse`.)
"""

from __future__ import annotations

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.liveness import running_fine
from resurgo.attribute.stragglers import stragglers
from resurgo.contracts import AnomalyKind, Category


def _healthy(a: Analysis) -> Verdict | None:
    if not a.completed():
        return None
    slow = stragglers(a, timings_only=True)
    if slow is not None and slow.culprits:
        return slow  # it finished, but one node held everybody back
    done = a._completion()
    return Verdict(
        Category.NONE, "none", "job completed", 1.0,
        evidence=[done] if done is not None else [], kind="none",
    )  # fmt: skip


def _owner_cancel(a: Analysis, outcome: str | None) -> Verdict | None:
    if outcome != "owner_cancelled":
        return None
    lines = [e.line for e in a.events if e.match.id == "slurm_job_cancelled"][:3]
    return Verdict(
        Category.SCHEDULER, "owner_cancelled", "the job was cancelled by its owner", 0.95,
        evidence=lines, kind=AnomalyKind.CRASH, outcome=outcome,
    )  # fmt: skip


def _scheduler(a: Analysis, outcome: str | None) -> Verdict | None:
    if outcome not in ("timeout", "preempted", "admin_cancelled"):
        return None
    lines = [e.line for e in a.events if e.match.id.startswith("slurm_")][:3]
    what = {
        "timeout": "the job reached its time limit",
        "preempted": "the job was preempted",
        "admin_cancelled": "the job was cancelled by an administrator",
    }[outcome]
    return Verdict(Category.SCHEDULER, outcome, what, 0.9, evidence=lines,
                   kind=AnomalyKind.CRASH, outcome=outcome)  # fmt: skip


def _nothing(a: Analysis) -> Verdict:
    if a.running:
        if a.offline and (fine := running_fine(a)) is not None:
            return fine
        return Verdict(
            Category.UNKNOWN, "hang", "no training progress and no error in the output"
            + (f" (last iteration {a.scan.max_iteration})" if a.scan.max_iteration is not None
               else ""),
            0.4, evidence=a.lines[-3:], kind=AnomalyKind.HANG,
        )  # fmt: skip
    job = a.job
    code = f"{job.exit_code}:{job.exit_signal}" if job is not None else "?"
    state = job.state if job is not None else "ended"
    return Verdict(
        Category.UNKNOWN, f"exit|{code}", f"job {state} with exit code {code} and no recognised "
        "error", 0.3, evidence=[x.line for x in a.scan.exit_order[:3]] or a.lines[-3:],
        kind=AnomalyKind.CRASH,
    )  # fmt: skip
