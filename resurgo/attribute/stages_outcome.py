"""Attribution stages that read how the job ended rather than what failed in it.

1. healthy: the job completed (exit 0), or finished with one node holding everybody back;
2. cancelled by its owner → `scheduler`, nothing to recover;
6. scheduler outcomes (time limit, preemption, an admin's cancel) when nothing failed before;
8. no failure in sight: a hang while running, else an exit with no recognised error.

(Numbers are the stages' places in `rules.analyse`.)
"""

from __future__ import annotations

import itertools
import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.collective_stalls import mismatched_collectives, stall_reports
from resurgo.attribute.liveness import (
    running_fine,
    still_starting,
)
from resurgo.attribute.scheduler import owner_cancelled
from resurgo.attribute.silent_until_end import (
    hung_before_the_cancel,
    hung_until_time_limit,
    never_progressed,
    noted_silence,
    silent_until_time_limit,
)
from resurgo.attribute.stack_dumps import deadlocked_in_job_code, diverged_collective
from resurgo.attribute.stragglers import stragglers
from resurgo.contracts import AnomalyKind, Category

# A checkpoint written (Megatron `successfully saved checkpoint`, HF Trainer `Saving model
# checkpoint to`, Lightning `saving model to`, NeMo `Async checkpoint save`, DeepSpeed
# `Saving ... global_step`): the next attempt can resume.
_SAVED = re.compile(
    r"(?i)\b(?:sav(?:e|ed|ing))\b[^|]{0,60}\b(?:checkpoint|ckpt|model|global_step\d+)"
    r"|\bcheckpoint\b[^|]{0,40}\b(?:saved|written|save for)\b"
)
# An operator's (or the job's) statement that no checkpoint exists.
_NO_CHECKPOINT = re.compile(
    r"(?i)\bno (?:checkpoint|ckpt)s?\b|\b(?:checkpoint|ckpt)s?\b[^.;]{0,40}\b(?:never|not)\b"
    r"[^.;]{0,20}\b(?:written|saved|created)\b|\bnever (?:saved|wrote|written)\b[^.;]{0,30}"
    r"\b(?:checkpoint|ckpt)"
)


def refine_outcome(a: Analysis, outcome: str | None) -> str | None:
    """Slurm's outcome from the finer facts: the state of each run in `sacct -D` (a PREEMPTED
    or REQUEUED run followed by PENDING), a step's own TIMEOUT while the job COMPLETED, and a
    time limit reached with no checkpoint ever written (a resubmission would start over)."""
    runs = [s for s in a.facts.job_states if s != "PENDING"]
    if outcome is None and runs and runs[-1] == "PREEMPTED":
        outcome = "preempted"
    if outcome is None and a.offline and runs and runs[-1] == "REQUEUED":
        outcome = "requeued"  # requeued by Slurm (or by the job itself: `scontrol requeue`)
    if outcome is None and a.offline and a.state in (None, "PENDING") and _killed_to_requeue(a):
        # Slurm killed the run `DUE TO JOB REQUEUE` and the job waits to run again (or no
        # state says otherwise): requeued (scontrol requeue, or the job's own signal handler),
        # whatever sacct's rows say.
        outcome = "requeued"
    if outcome is None and a.state is None and a.facts.cancelled_by is not None:
        # Slurm's record says who cancelled the job (`CANCELLED by 31007`, a kill RPC's uid)
        # though no job state was kept: cancelled, by its owner unless that is known otherwise
        # (the job's output may only show its step's `*** STEP ... CANCELLED AT` line).
        outcome = "admin_cancelled" if owner_cancelled(a.facts) is False else "owner_cancelled"
    if outcome is None and "TIMEOUT" in a.facts.step_states.values():
        outcome = "timeout"  # the step's own time limit (`srun -t`), the batch script went on
    if outcome == "timeout" and _never_checkpointed(a):
        outcome = "timeout_no_checkpoint"
    return outcome


def _killed_to_requeue(a: Analysis) -> bool:
    # slurmstepd's `*** JOB 7712301 ON gpu-f01 CANCELLED AT ... DUE TO JOB REQUEUE ***` ends
    # the output of the run it killed.
    return any("DUE TO JOB REQUEUE" in e.text for e in a.lines[-50:])


def _never_checkpointed(a: Analysis) -> bool:
    if a.scan.resumed_from is not None or any(_SAVED.search(e.text) for e in a.lines):
        return False
    stated = itertools.chain(a.lines, a.facts.lines)
    return any(e.text.lstrip().startswith("#") and _NO_CHECKPOINT.search(e.text) for e in stated)


def _healthy(a: Analysis, outcome: str | None = None) -> Verdict | None:
    if not a.completed() or outcome in ("timeout", "timeout_no_checkpoint", "preempted"):
        return None  # (a step killed by Slurm while the batch script went on to exit 0)
    slow = stragglers(a, timings_only=True)
    if slow is not None and slow.culprits:
        return slow  # it finished, but one node held everybody back
    done = a._completion()
    return Verdict(
        Category.NONE, "none", "job completed", 1.0,
        evidence=[done] if done is not None else [], kind="none",
    )  # fmt: skip


def _owner_cancel(a: Analysis, outcome: str | None) -> Verdict | None:
    if outcome != "owner_cancelled" or _timed_out_before_the_kill(a):
        return None  # (stuck first: a cancel ends a hang, however it ended; the timeouts decide)
    if diverged_before_the_kill(a):
        return None  # (the owner stopped a run whose loss had diverged: the divergence decides)
    if failed_before_the_cancel(a):
        return None  # (the owner stopped a run that had already failed: the failure decides)
    if hung_before_the_cancel(a) is not None:
        return None  # (stuck long before: the node evidence, else `_scheduler`, decides)
    lines = [e.line for e in a.events if e.match.id == "slurm_job_cancelled"][:3]
    return Verdict(
        Category.SCHEDULER, "owner_cancelled", "the job was cancelled by its owner", 0.95,
        evidence=lines, kind=AnomalyKind.CRASH, outcome=outcome,
    )  # fmt: skip


# The loss or the gradients turned NaN/Inf (Megatron's `grad norm: nan`, `lm loss: nan`).
NONFINITE_IDS = frozenset({"loss_nan", "nonfinite_values"})


def failed_before_the_cancel(a: Analysis) -> bool:
    """A root failure before the owner's cancel, with no training step after it: a rank's
    serious error in the job's output, a fatal fault of one of the job's nodes, or a
    collective reported stalled after the last step. Owners
    cancel jobs that died without exiting (a rank crashed while its peers wait in a
    collective); the failure, not the cancel, is what happened to the job."""
    cut = a.kill_order
    last = a.scan.advances[-1] if a.scan.advances else -1
    for e in a.events:
        if not (e.root and e.serious) or (cut is not None and e.order >= cut) or e.order < last:
            continue
        if e.origin == "job" or (e.match.severity == "fatal" and a.in_job(e.node)):
            return True
    # Horovod's stall inspector still reporting ranks missing from a collective after the
    # last step: the job hung, and the owner ended the hang.
    after = a.lines[last + 1 : cut] if last >= 0 else []
    return any(entry for entry, _ in stall_reports(after))


def diverged_before_the_kill(a: Analysis) -> bool:
    """Training turned non-finite before the job was killed and never printed a finite step
    again: a run cancelled because it diverged (a transient spike it recovered from is not)."""
    cut = a.kill_order
    nan = [e for e in a.events if e.match.id in NONFINITE_IDS and (cut is None or e.order < cut)]
    if not nan:
        return False
    flagged = {e.order for e in nan}
    later = [o for o in a.scan.advances if o > nan[0].order and (cut is None or o < cut)]
    return all(o in flagged for o in later)


def _scheduler(a: Analysis, outcome: str | None) -> Verdict | None:
    cancelled = outcome in ("owner_cancelled", "admin_cancelled")
    if cancelled and not _timed_out_before_the_kill(a) and (hung := hung_before_the_cancel(a)):
        return hung.copy()  # silent long before the cancel: it only ended the hang
    if outcome not in ("timeout", "timeout_no_checkpoint", "preempted", "admin_cancelled",
                       "requeued"):  # fmt: skip
        return None
    lines = [e.line for e in a.events if e.match.id.startswith("slurm_")][:3]
    if outcome == "admin_cancelled" and _timed_out_before_the_kill(a):
        return None  # stuck first: the cancel only ended the hang
    if outcome in ("timeout", "timeout_no_checkpoint"):
        if (own := _step_limit(a)) is not None:
            return own
        if (diverged := ranks_diverged(a)) is not None:
            return diverged  # the job's ranks deadlocked in its own collectives
        if _timed_out_before_the_kill(a):
            return None  # stuck first: the collectives' timeouts decide (cascades)
        if (idle := _finished_then_idle(a) or never_progressed(a, lines)) is not None:
            return idle
    if (
        outcome == "timeout"
        and (
            hung := hung_until_time_limit(a, lines)
            or silent_until_time_limit(a, lines)
            or noted_silence(a, lines)
        )
        is not None
    ):
        if (place := deadlocked_in_job_code(a.node_logs, a.lines)) is not None:
            # Stack dumps of the stuck ranks show every one blocked at the same place in the
            # job's own code, none in a collective: the job deadlocked itself.
            return Verdict(
                Category.APPLICATION, "hang|deadlock_in_job_code", f"{hung.summary}; every "
                f"dumped rank is blocked in the job's own code at {place[-160:]}", 0.8,
                evidence=hung.evidence, kind=AnomalyKind.HANG,
            )  # fmt: skip
        return hung
    what = {
        "timeout": "the job reached its time limit",
        "timeout_no_checkpoint": "the job reached its time limit without ever writing a checkpoint",
        "preempted": "the job was preempted",
        "admin_cancelled": "the job was cancelled by an administrator",
        "requeued": "the job was requeued (by Slurm or by its own time-limit signal handler)",
    }[outcome]
    return Verdict(Category.SCHEDULER, outcome, what, 0.9, evidence=lines,
                   kind=AnomalyKind.CRASH, outcome=outcome)  # fmt: skip


def _finished_then_idle(a: Analysis) -> Verdict | None:
    """The output says training finished, then nothing but the job script's own trace (`+
    wait`) until the time limit: the script did not exit (it waited on helpers it started in
    the background, a process it left running), the job's own doing, a hang."""
    done, cut = a.scan.completed_line, a.kill_order
    if done is None or cut is None:
        return None
    at = next((i for i in range(cut - 1, -1, -1) if a.lines[i] is done), None)
    if at is None:
        return None
    after = [e.text.strip() for e in a.lines[at + 1 : cut]]
    if any(t and not t.startswith(("+", "#")) for t in after):
        return None  # (it went on to do something: evaluating, uploading)
    return Verdict(
        Category.APPLICATION, "hang|finished_not_exited", "training finished "
        f"({done.text.strip()[:80]}) but the job script did not exit until the time limit",
        0.85, evidence=[done, *a.lines[at + 1 : cut][:2], a.lines[cut]], kind=AnomalyKind.HANG,
    )  # fmt: skip


def _step_limit(a: Analysis) -> Verdict | None:
    """A step ended by its own time limit while the job, which went on to fail or finish, had
    time left, and the step saved nothing to resume from: a step's limit is what the job script
    gave srun (`-t`/`--time`; without it a step has the job's), and resubmitting runs the step
    from its start into the same limit (attribution-labels.md tie-breaker 6). A step that
    checkpointed resumes and gets further: the scheduler's time limit, requeued."""
    if a.state not in ("FAILED", "COMPLETED"):
        return None
    kills = [i for i in range(max(len(a.lines) - 200, 0), len(a.lines))
             if "DUE TO TIME LIMIT" in a.lines[i].text]  # fmt: skip
    if not kills or not all("*** STEP " in a.lines[i].text for i in kills):
        return None
    # The killed step's own output: from the job script's last traced srun before the kill.
    start = next((i for i in range(kills[0] - 1, -1, -1)
                  if a.lines[i].text.startswith("+") and "srun" in a.lines[i].text), 0)  # fmt: skip
    if any(_SAVED.search(e.text) for e in a.lines[start : kills[0]]):
        return None
    return Verdict(
        Category.APPLICATION, "step_time_limit", "a job step reached its own time limit (the "
        "job script's srun -t/--time) while the job had time left, with nothing saved to "
        "resume from", 0.85, evidence=[a.lines[i] for i in kills[:2]],
    )  # fmt: skip


def ranks_diverged(a: Analysis) -> Verdict | None:
    """The job stalled with its ranks in different collectives: Horovod's stall report shows
    ranks waiting on tensors the others never submit, or stack dumps show the odd ranks
    blocked in a collective at another place of the job's code than the rest (a
    rank-0-only barrier). The job's own deadlock: application, stop (attribution-labels.md)."""
    stall = mismatched_collectives(a.lines, a.topo.world_size())
    if stall is not None:
        return Verdict(
            Category.APPLICATION, "hang|collective_mismatch|stall_report", "the ranks stalled "
            "submitting different collectives (each waits on tensors the others never "
            "submit)", 0.85, evidence=[stall], kind=AnomalyKind.HANG,
        )  # fmt: skip
    dumps = [*a.lines, *(e for lines in a.node_logs.values() for e in lines)]
    if (place := diverged_collective(dumps)) is not None:
        return Verdict(
            Category.APPLICATION, "hang|collective_mismatch|stack_dumps", "stack dumps show "
            f"some ranks blocked in a collective at {place[-120:]} that the others, stopped "
            "elsewhere in the job's code, never reach", 0.85, evidence=a.lines[-3:],
            kind=AnomalyKind.HANG,
        )  # fmt: skip
    return None


def _timed_out_before_the_kill(a: Analysis) -> bool:
    """Collectives timed out (ranks reported waiting for their peers) before Slurm's time
    limit: the job was stuck first, the limit only ended it."""
    cut = a.kill_order
    return cut is not None and any(
        e.cascade and e.serious and e.match.kind == AnomalyKind.HANG and e.order < cut
        for e in a.events
    )


def _suspended(a: Analysis) -> Verdict | None:
    """Slurm suspended the job and, on resume, its collectives timed out (the watchdog counts
    the suspended time): every failure is a consequence of the suspend."""
    if a.facts.suspended is None or a.running:
        return None
    if any(e.root and e.serious for e in a.events):
        return None
    if not any(e.match.kind == AnomalyKind.HANG for e in a.events):
        return None
    timeouts = [e.line for e in a.events if e.match.kind == AnomalyKind.HANG][:2]
    return Verdict(
        Category.SCHEDULER, "suspended", "the job was suspended by Slurm and its collectives "
        "timed out on resume", 0.75, evidence=[a.facts.suspended, *timeouts],
        kind=AnomalyKind.CRASH,
    )  # fmt: skip


def stuck_in_job_code(a: Analysis) -> Verdict | None:
    """A running job whose ranks' dumps (taken because it stalled) show every one blocked at
    one place in the job's own code: its deadlock, however its output ends."""
    if not a.running or (place := deadlocked_in_job_code(a.node_logs, a.lines)) is None:
        return None
    return Verdict(
        Category.APPLICATION, "hang|deadlock_in_job_code", "no training progress; every dumped "
        f"rank is blocked in the job's own code at {place[-160:]}", 0.8,
        evidence=a.lines[-3:], kind=AnomalyKind.HANG,
    )  # fmt: skip


def _nothing(a: Analysis) -> Verdict:
    if a.running:
        if (stuck := stuck_in_job_code(a)) is not None:
            return stuck
        if a.offline and (fine := running_fine(a) or still_starting(a)) is not None:
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
        # (Slurm's kill ended it: whether it sat stuck before is the output's to say.)
        kind=None if a.kill_order is not None else AnomalyKind.CRASH,
    )  # fmt: skip
