"""Where crash ends and hang begins (attribution-labels.md, `kind`).

- crash: the job ended abnormally while it was making progress (an exception, an NCCL error,
  a Slurm kill such as the time limit); a time limit of a healthy, progressing job is a crash
  with category `scheduler`;
- hang: progress stopped first and the job stayed stuck, however it ended.

Three boundaries the stages otherwise cross:

- a job whose first error (even a timeout, such as a TCPStore client's socket timeout after a
  node's NIC failed) came within one normal step interval of its last progress line did not
  stay stuck: it crashed (`ended_by_error`);
- a job the prolog failed to start (slurmd's `prolog failed`, Slurm's `Prolog error` drain)
  never launched: a crash of its launch, not a hang (`ended_by_error`);
- a job killed at its time limit while still printing steps at its usual rate, with nothing
  failing in its own output, is the time limit's (`progressing_at_time_limit`): a node fault
  it ran on past for hours (a link flap that recovered) did not end it;
- the culprit node's own process ended of its GPU or host fault while only the other nodes'
  ranks timed out waiting for it: a crash (`died_of_node_fault`);
- a job with no recorded state whose output ends in its ranks' raised exceptions crashed; one
  still RUNNING with no step since its fault and no process ended hangs (`running_kind`).
"""

from __future__ import annotations

import itertools
import re
import statistics
from datetime import datetime

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.bundle import stamp_in
from resurgo.attribute.liveness import (
    HANG_SILENCE_FACTOR,
    HANG_SILENCE_FLOOR_SECONDS,
    glog_time,
    progress_times,
    still_progressing,
)
from resurgo.attribute.stages_outcome import _scheduler
from resurgo.contracts import AnomalyKind, Category

# The longest first-error delay that can still be "within one step": beyond it a job that
# printed steps rarely may have been stuck in between.
MAX_STEP_SECONDS = 300.0
PROLOG_FAILED = frozenset({"slurm_prolog_failed"})
# Progress at the time limit: the last step at most this many typical intervals before the kill.
STEADY_GAPS = 1.5


def _when(text: str, year: int) -> datetime | None:
    # (else glog's prefix, PyTorch's C++ warnings and errors: `[W0719 12:06:40.118000 ...]`)
    return stamp_in(text, 200) or glog_time(text, year)


def _typical_gap(times: list[datetime]) -> float | None:
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times) if b > a]
    return statistics.median(gaps) if gaps else None


def ended_by_error(a: Analysis, v: Verdict) -> Verdict:
    """`v` as a crash where the job did not stay stuck before it failed (see the module)."""
    if v.kind is not None or v.category in (Category.NONE, Category.SCHEDULER):
        return v
    times = progress_times(a)
    # (Pending again after the failed launch's requeue: the attempt is over.)
    if (
        not times
        and (a.state == "PENDING" or not a.running)
        and (
            any(e.match.id in PROLOG_FAILED for e in a.node_events)
            or any(e.match.id in PROLOG_FAILED for e in a.events)
            or any("prolog" in r.reason.lower() for r in a.facts.reasons)
            or any(
                m.id in PROLOG_FAILED
                for x in a.facts.lines
                if "rolog" in x.text
                for m in a.registry.scan(x.text)
            )  # (slurmctld's own `prolog_complete: ... prolog failed`)
        )
    ):
        v.kind = AnomalyKind.CRASH  # the launch failed: nothing ever ran to get stuck
        return v
    if len(times) < 2 or a.running:
        return v
    gap = _typical_gap(times)
    last = times[-1].replace(tzinfo=None)
    errors = [
        t for e in a.events
        if e.origin == "job" and e.serious and (e.root or e.cascade) and e.order > _last(a)
        and (t := _when(e.line.text, last.year)) is not None
    ]  # fmt: skip
    if gap is None or not errors:
        return v
    first = min(t.replace(tzinfo=None) for t in errors)
    delay = (first - last).total_seconds()
    if 0 <= delay <= min(gap, MAX_STEP_SECONDS):
        v.kind = AnomalyKind.CRASH
    return v


def _last(a: Analysis) -> int:
    return a.scan.advances[-1] if a.scan.advances else -1


def progressing_at_time_limit(a: Analysis, outcome: str | None) -> Verdict | None:
    """The time limit's crash of a job that was advancing at its usual rate until the kill and
    whose own output shows nothing failing: node faults it ran on past are not its end."""
    if outcome != "timeout":
        return None
    if any(e.origin == "job" and e.serious and (e.root or e.cascade) for e in a.events):
        return None
    times = progress_times(a)
    gap = _typical_gap(times) if len(times) >= 3 else None
    kill = next(
        (t for e in a.events if e.match.id.startswith("slurm_")
         and (t := _when(e.line.text, times[-1].year if times else 1970)) is not None),
        None,
    )  # fmt: skip
    if gap is None or kill is None:
        return None
    last = times[-1].replace(tzinfo=None)
    silence = (kill.replace(tzinfo=None) - last).total_seconds()
    if not 0 <= silence <= STEADY_GAPS * gap:
        return None
    return _scheduler(a, outcome)


_DEVICE_OR_HOST = frozenset({Category.HARDWARE_GPU, Category.HARDWARE_HOST})


def died_of_node_fault(a: Analysis, v: Verdict) -> Verdict:
    """`v` as a crash when the culprit node's own process ended of its GPU or host fault (a
    GPU fallen off the bus, a DIMM's uncorrected error sending SIGBUS) while only the other
    nodes' ranks reported their collectives timing out: the peers waited on a rank that had
    died, the job did not stay stuck (attribution-labels.md kind: a signal is a crash). A
    culprit that went silent without ending (a cancel or Slurm's node failure ended the job)
    stays a hang."""
    if v.kind is not None or v.category not in _DEVICE_OR_HOST or not v.culprits or a.running:
        return v
    culprits = set(v.culprits)
    if a.kill_order is not None or any(e.match.id.startswith("slurm_") for e in a.events):
        return v
    ended = any(
        x.node in culprits and x.status in ("exit", "signal") and not x.after_termination
        for x in a.scan.exit_order
    ) or any(
        e.origin == "job" and e.root and e.serious and e.match.kind == AnomalyKind.CRASH
        and e.node in culprits
        for e in a.events
    )  # fmt: skip
    # (A wait whose node cannot be placed may have been the culprit's own.)
    waited = any(
        e.origin == "job" and e.match.kind == AnomalyKind.HANG
        and (e.node or event_node(a, e)) in (culprits | {None})
        for e in a.events
    )  # fmt: skip
    if ended and not waited:
        v.kind = AnomalyKind.CRASH
    return v


# The last line of a raised Python exception (`torch.distributed.DistStoreError: Connection
# reset by peer`): the process that printed it ended, unless something caught it.
_RAISED = re.compile(r"(?:^|[\]:>] )(?:[\w.]+\.)?\w*(?:Error|Exception): \S")
# nccl-tests' NCCLCHECK/CUDACHECK print this and exit(EXIT_FAILURE) (nccl-tests src/common.h).
_NCCL_TESTS_FAILED = re.compile(r"\bTest (?:NCCL|CUDA) failure \S+:\d+ '")


def running_kind(a: Analysis, v: Verdict) -> Verdict:
    """The kind of a failure in a job that is (or may be) still running.

    - Its output, with no scheduler record of its state, ends in the exceptions its ranks
      raised (a TCPStore's clients reset by its lost host): those processes ended of the error,
      a crash, though nothing shows the job's end;
    - the scheduler (or an operator's note) says it is still RUNNING, no process of it ended
      and no step followed its fault (an IB port error): it is alive and stuck, a hang.
    """
    if v.kind == AnomalyKind.HANG and v.key.startswith("shared|") and still_progressing(a):
        # (a shared file system's trouble while the job still steps, recently: it slows the
        # job's reads, it did not stop them; a straggler)
        v.kind = AnomalyKind.STRAGGLER
        return v
    if v.kind is not None or v.category in (Category.NONE, Category.SCHEDULER) or not a.running:
        return v
    said = [e for e in a.events if e.origin == "job" and e.serious and (e.root or e.cascade)]
    if a.state is None:
        tail = next((x.text for x in reversed(a.lines) if x.text.strip()
                     and not x.text.startswith("#")), "")  # fmt: skip
        last = max(said, key=lambda e: e.order) if said else None
        if (last is None or last.match.kind == AnomalyKind.CRASH) and (
            _RAISED.search(tail) or _NCCL_TESTS_FAILED.search(tail)
        ):
            v.kind = AnomalyKind.CRASH
        return v
    if not said:
        return v
    first = min(e.order for e in said)
    ended = any(x.status != "terminated" for x in a.scan.exit_order)
    if a.state == "RUNNING" and not ended and _last(a) < first:
        v.kind = AnomalyKind.HANG
    return v


def silent_until_killed(a: Analysis) -> bool:
    """Slurm ended the job (a cancel, a time limit) long after the last line its output dated,
    and no process of it had ended before: whatever error it printed, the job stayed stuck
    until it was killed, a hang (attribution-labels.md kind: progress stopped first and the
    job stayed stuck, however it ended; a cancel ends a hang)."""
    cut = a.kill_order
    if cut is None or cut >= len(a.lines):
        return False
    if any(x.order < cut and x.status != "terminated" for x in a.scan.exit_order):
        return False
    last = next((t for e in reversed(a.lines[:cut]) if (t := stamp_in(e.text))), None)
    if last is None:
        # Only glog-style stamps (c10's `[E314 14:33:45.172 ProcessGroupNCCL.cpp:607]`, absl's
        # `I0223 22:58:05.579038`) carry no year: Slurm's dated kill line gives it.
        dated = stamp_in(a.lines[cut].text, 200)
        year = dated.year if dated is not None else None
        stamps = (_when(e.text, year) for e in reversed(a.lines[:cut])) if year else iter(())
        last = next((t for t in stamps if t is not None), None)
        if last is None:
            return False
    kill = _when(a.lines[cut].text, last.year)
    if kill is None:
        return False
    times = progress_times(a)
    gap = _typical_gap(times) if len(times) >= 3 else None
    allowed = max(HANG_SILENCE_FACTOR * gap if gap else 0.0, HANG_SILENCE_FLOOR_SECONDS)
    return (kill - last.replace(tzinfo=None)).total_seconds() > allowed
