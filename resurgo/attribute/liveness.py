"""Is a job that has not ended still training? Its progress against how long it has been silent.

A job whose output ends in steady progress with nothing wrong after it is running fine: a
hang needs evidence that progress stopped for longer than the job's rhythm allows. The "now"
that silence is measured to comes from the scheduler's record (a `date` printed with it,
StartTime + RunTime, squeue's TIME from the log's first time stamp) or from an operator's note
stating when the job was seen running (`# job still running at 2025-06-11 10:01:14`). Without
any such "now" the silence is unknown, and an unknown silence is not a hang.

Progress is a new iteration (`detect.progress`) or, for formats that print no step number,
any periodic series the straggler reader recognises (throughput, epoch summaries).
"""

from __future__ import annotations

import itertools
import re
import statistics
from datetime import datetime, timedelta

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.bundle import stamp_in
from resurgo.attribute.retried import retried_ok
from resurgo.attribute.series import last_sample_order, read_series
from resurgo.attribute.stragglers import stragglers
from resurgo.attribute.yearless_stamps import yearless_time
from resurgo.contracts import Category
from resurgo.detect.lines import strip_prefixes

# A running job is hung when its progress lines stop for this many of their usual intervals
# (and at least the floor): a collective timeout is 10 minutes by default.
HANG_SILENCE_FACTOR = 10.0
HANG_SILENCE_FLOOR_SECONDS = 600.0
# Start-up before the first printed step (imports, rendezvous, loading a large checkpoint,
# compiling) that an estimate of the silence grants the job.
STARTUP_ALLOWANCE_SECONDS = 1800.0
# An operator's note that the job was seen alive, and when (`# job still running at <time>`,
# `# ... (squeue: R ...), collector snapshot <time>`).
_ALIVE_NOTE = re.compile(r"(?i)\b(?:still running|running normally|squeue:? R\b|snapshot)")
_TQDM_ELAPSED = re.compile(
    r"\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[(?:(?P<h>\d{1,4}):)?(?P<m>\d\d):(?P<s>\d\d)<"
)
# Lightning's and HF's evaluation loops label their bars (`Validation DataLoader 0:`,
# `Evaluating:`, `Testing DataLoader 0:`, `Predicting DataLoader 0:`).
# Lightning's training bar is per epoch (`Epoch 78: 100%|...| 1563/1563 [19:38<00:00, ...]`):
# its clock restarts with each epoch.
_EPOCH_BAR = re.compile(r"\bEpoch (\d{1,9})\b")
_EVAL_BAR = re.compile(r"(?i)\b(?:validation|validating|evaluat\w*|eval|testing|predicting)\b")
_HF_LOG_DICT = re.compile(r"\{'loss': [-\d.e+naif]+,.*'epoch': \d+(?:\.\d+)?\}")
_RUNNING_NOTE = re.compile(r"(?i)\b(?:still running|running normally|squeue:? R\b)")


def noted_running(a: Analysis) -> bool:
    """An operator's note (a `#` line) says the job was still running when collected."""
    # Operators head a pasted log with it as often as they end it.
    noted = [*a.header, *a.lines[-20:]]
    return any(e.text.startswith("#") and _RUNNING_NOTE.search(e.text) for e in noted)


def observed_at(a: Analysis) -> datetime | None:
    """When the job was last seen: the scheduler's record, else an operator's note."""
    observed = a.facts.observed_at()
    if observed is None:
        for entry in reversed(a.lines[-20:]):
            noted = entry.text.startswith("#") and _ALIVE_NOTE.search(entry.text)
            if noted and (t := stamp_in(entry.text) or _clock_in_note(a, entry.text)):
                return t
    # (A log that starts mid-run, far past its first or resumed step, is a tail: its first
    # time stamp is not the job's start, so the run time cannot place the last sighting.)
    tail = (a.scan.first_iteration or 0) > (a.scan.resumed_from or 0) + 10
    if observed is None and not tail and (run := a.facts.run_time()) is not None:
        first = next((t for e in a.lines[:200] if (t := stamp_in(e.text))), None)
        observed = first + run if first is not None else None
    return observed


# A clock time alone in an alive note (`# job still running at 13:05 (squeue R)`): the day is
# the last progress line's. (`at` before it: a note's `TIME 6:44:51` is a duration.)
_NOTED_CLOCK = re.compile(r"\bat (\d{1,2}):(\d\d)(?::(\d\d))?\b(?!:)")


def _clock_in_note(a: Analysis, text: str) -> datetime | None:
    m = _NOTED_CLOCK.search(text[:400])
    times = progress_times(a) if m is not None else []
    if m is None or not times or int(m[1]) > 23 or int(m[2]) > 59:
        return None
    seen = times[-1].replace(hour=int(m[1]), minute=int(m[2]), second=int(m[3] or 0))
    # (noted past midnight after the last progress line of the day before)
    return seen + timedelta(days=1) if seen < times[-1] - timedelta(hours=12) else seen


def _logged_dicts(a: Analysis) -> int | None:
    """Order of the last of several HF Trainer log dicts (`{'loss': 2.37, 'learning_rate':
    0.001, 'epoch': 0.5}`, transformers' ProgressCallback.on_log): training advancing, though
    they carry no step number."""
    orders = [i for i, e in enumerate(a.lines) if _HF_LOG_DICT.search(e.text[:400])]
    return orders[-1] if len(orders) >= 2 else None


def last_progress(a: Analysis) -> int | None:
    """Order of the last line that showed the job advancing (an iteration or a series sample).
    Computed once per analysis: it reads only what the analysis fixed when it was made (the
    scan's advances, the series, the lines), and several stages ask."""
    cached: tuple[int | None] | None = getattr(a, "_last_progress", None)
    if cached is None:
        cached = a._last_progress = (_last_progress(a),)  # type: ignore[attr-defined]
    return cached[0]


def _last_progress(a: Analysis) -> int | None:
    candidates = [a.scan.advances[-1]] if a.scan.advances else []
    if (sample := last_sample_order(a)) is not None:
        candidates.append(sample)
    if (logged := _logged_dicts(a)) is not None:
        candidates.append(logged)
    return max(candidates) if candidates else None


def progress_times(a: Analysis) -> list[datetime]:
    orders = list(a.scan.advances)
    times = [t for o in orders if o < len(a.lines) and (t := stamp_in(a.lines[o].text))]
    if len(times) >= 2:
        return times
    if len(a.scan.progress_times) >= 2:
        return list(a.scan.progress_times)
    # No iteration counter the scanner knows (`it  6000  loss 0.44 ... 0.92 s/it`): the
    # longest periodic series with clock times shows the job advancing just as well.
    longest = max(read_series(a).values(), key=len, default=[])
    sampled = [
        t for s in longest if s.order < len(a.lines) and (t := stamp_in(a.lines[s.order].text))
    ]
    if len(sampled) >= 2:
        return sampled
    clocked = _clock_times(a, orders or [s.order for s in longest])
    return clocked if len(clocked) >= 2 else list(a.scan.progress_times)


_CLOCK = re.compile(r"^(\d\d):(\d\d):(\d\d)(?:[.,]\d+)?$")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)[T ]\d\d:\d\d:\d\d\b")


def _clock_times(a: Analysis, orders: list[int]) -> list[datetime]:
    """Progress lines stamped with the time of day only (`[g0033] 10:37:26 rank0: it 23225`):
    dated from the job's start (Slurm's record, else the first dated line of the output, a
    kill line), a day later each time the clock goes back past midnight; or with a month and
    day but no year (glog's `I0519 10:54:30.600`), in the start's year."""
    start = a.job.start_time if a.job is not None else None
    if start is None:
        dated = next((m for e in a.lines if (m := _ISO_DATE.search(e.text[:200]))), None)
        if dated is None:
            return []
        start = datetime(int(dated[1]), int(dated[2]), int(dated[3]))
    day = start.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    out: list[datetime] = []
    for o in orders:
        if o >= len(a.lines):
            continue
        clock = strip_prefixes(a.lines[o].text).time
        m = _CLOCK.match(clock) if clock else None
        if m is None:
            # (a month and day without a year, glog's or vLLM's: dated from the start's year)
            if (stamped := yearless_time(a.lines[o].text, start)) is not None:
                out.append(stamped)
            continue
        h, mi, sec = int(m[1]), int(m[2]), int(m[3])
        if h > 23 or mi > 59 or sec > 59:
            continue
        t = day.replace(hour=h, minute=mi, second=sec)
        if out and (out[-1] - t).total_seconds() > 12 * 3600:
            day = day + timedelta(days=1)  # (past midnight)
            t = t + timedelta(days=1)
        out.append(t)
    return out


# An operator's note of when the job last advanced (`# last progress line at
# 2023-03-07T03:54:44`, `# progress stopped at 2025-06-16 23:43`): the output itself may carry
# no time at all.
_LAST_PROGRESS_NOTE = re.compile(
    r"(?i)\b(?:last (?:progress|training step|step|iteration)(?: line| output| printed)?"
    r"|progress (?:stopped|stalled|froze))\b[^#]{0,30}?\bat\b"
)


def noted_last_progress(a: Analysis) -> datetime | None:
    for entry in [*a.header, *a.lines[:50], *a.lines[-50:], *a.facts.lines]:
        text = entry.text
        m = _LAST_PROGRESS_NOTE.search(text) if text.startswith("#") and "at" in text else None
        if m is not None and (t := stamp_in(text[m.end() :])) is not None:
            return t
    return None


def progress_silence(a: Analysis) -> tuple[float, float] | None:
    """(seconds from the last progress line to when the job was last seen, the silence that
    would be a hang), where both are known."""
    times = progress_times(a)
    if len(times) < 2:
        noted = noted_last_progress(a)  # (an operator's word where the lines carry no clock)
        observed = observed_at(a) if noted is not None else None
        if noted is None or observed is None:
            return None
        return (observed - noted).total_seconds(), HANG_SILENCE_FLOOR_SECONDS
    observed = observed_at(a)
    if observed is None:
        return None
    gaps = [(b - a_).total_seconds() for a_, b in itertools.pairwise(times) if b > a_]
    typical = statistics.median(gaps) if gaps else 0.0
    silence = (observed - times[-1]).total_seconds()
    return silence, max(HANG_SILENCE_FACTOR * typical, HANG_SILENCE_FLOOR_SECONDS)


def estimated_silence(a: Analysis) -> float | None:
    """Without times on progress lines: how long the job has run beyond what its printed
    iterations (from the attempt's first steps, at their printed time per iteration) and a
    generous start-up account for. A lower bound of the silence, where one can be had."""
    from resurgo.attribute.series import read_series

    run = a.facts.run_time()
    bar = _bar_silence(a)
    if bar is not None:
        return None if isinstance(bar, str) else bar  # ("eval": a validation pass's clock)
    first, last = a.scan.first_iteration, a.scan.max_iteration
    per_iteration = read_series(a).get("iteration_ms", [])
    if run is None or first is None or last is None or len(per_iteration) < 2:
        return None
    if first > (a.scan.resumed_from or 0) + 10:
        return None  # the log is a tail: its iterations do not account for the whole run
    # The time the printed iterations took: their mean time per iteration (samples come every
    # N iterations, so the mean integrates a rhythm that changed halfway, where the median
    # takes one half's), trimmed of the extremes (a first step's compilation, a save).
    values = sorted(s.value for s in per_iteration)
    trim = len(values) // 20
    typical = statistics.mean(values[trim : len(values) - trim]) / 1000.0
    return run.total_seconds() - (last - first + 1) * typical - STARTUP_ALLOWANCE_SECONDS


def bar_silence(a: Analysis) -> float | None:
    """How long the job ran beyond its last tqdm bar's own clock (the time since its loop
    started) and a generous start-up: a lower bound of the silence read off a clock, where
    the last progress line is such a bar (not a validation pass's)."""
    found = _bar_silence(a)
    return None if isinstance(found, str) else found


def _bar_silence(a: Analysis) -> float | str | None:
    run = a.facts.run_time()
    last = last_progress(a)
    if run is not None and last is not None:
        # tqdm bars print the time since the loop started: `[4:12:11<2 days, 13:08:28, ...]`.
        # The last bar, wherever it is: the last step line may be another format (a
        # checkpoint callback's `global step N`), printed between bars.
        bars = (
            _TQDM_ELAPSED.search(e.text) for e in reversed(a.lines[max(0, last - 50) : last + 1])
        )
        # (A finished bar, `23/23`, is a loop that ended: a model load's, a CUDA graph
        # capture's; its clock stopped with it and says nothing about the training loop.)
        m = next((b for b in bars if b is not None and b["n"] != b["total"]), None)
        if m is not None and _EVAL_BAR.search(m.string[: m.start()]):
            return "eval"  # a validation loop's bar: its clock started with the pass
        if m is not None and (e := _EPOCH_BAR.search(m.string[: m.start()])) and int(e[1]) > 0:
            return "eval"  # Lightning's per-epoch bar: its clock started with this epoch
        if m is not None:
            h, mi, sec = int(m["h"] or 0), int(m["m"]), int(m["s"])
            clock = h * 3600 + mi * 60 + sec
            # The bar prints when an iteration ends: the next print is due one iteration (its
            # mean, off its own clock) after the last, and a slow loop (RL episodes of 40
            # minutes) is silent that long while it works.
            per_iteration = clock / int(m["n"]) if int(m["n"]) > 0 else 0.0
            return run.total_seconds() - clock - per_iteration - STARTUP_ALLOWANCE_SECONDS
    return None


def still_progressing(a: Analysis) -> bool:
    """The job has not ended, its output shows progress, and no evidence says it went silent."""
    if not a.running or last_progress(a) is None:
        return False
    measured = progress_silence(a)
    if measured is None:
        guess = estimated_silence(a)
        return guess is None or guess <= HANG_SILENCE_FLOOR_SECONDS
    return measured[0] <= measured[1]


def running_fine(a: Analysis) -> Verdict | None:
    """A running job whose output shows training advancing, with nothing failing after it."""
    if not still_progressing(a) or stragglers(a) is not None:
        return None
    # A kill line that training went on past belongs to an earlier run of the job (Slurm
    # requeued it after a preemption and it resumed): Slurm says it runs now.
    # (Progress may be a series' samples with no step counter: the last of either.)
    last = last_progress(a)
    assert last is not None
    resumed = a.state == "RUNNING" and a.kill_order is not None and last > a.kill_order
    if not resumed and (a.kill_order is not None or a.scheduler_outcome() is not None):
        return None  # Slurm ended (or is ending) this attempt: a time limit, a preemption
    if any(
        e.serious and (e.root or e.cascade) and e.order >= last and not retried_ok(a, e)
        for e in a.events
    ):
        # Something failed after the last progress line (and was not retried past), or on it:
        # `generation failed at step 0/25: CUDA_ERROR_ILLEGAL_ADDRESS` counts no step.
        return None
    last_time = next((t for e in reversed(a.lines[: last + 1]) if (t := stamp_in(e.text))), None)
    for e in a.node_events:
        # A fatal node fault after the last progress line (an Xid 79, a panic) stops the job.
        fatal = e.root and e.match.severity == "fatal" and a.in_job(e.node)
        seen = last_time or (_glog_before(a, last, e.when.year) if e.when is not None else None)
        if fatal and e.when is None and _restarted_before(a, last):
            continue  # (undated, and the job restarted its workers and went on: recovered)
        if fatal and (seen is None or e.when is None or e.when > seen):
            return None
    measured = progress_silence(a)
    when = f" {max(measured[0], 0.0):.0f}s before it was last seen" if measured is not None else ""
    at = f" at iteration {a.scan.max_iteration}" if a.scan.max_iteration is not None else ""
    return Verdict(
        Category.NONE, "none", f"job running, training{at}{when}", 0.8,
        evidence=[a.lines[last]], kind="none",
    )  # fmt: skip


# glog stamps (`W0511 02:56:01.000000 40112 torch/distributed/elastic/...`): no year, so dated
# with the node event's own.
_GLOG = re.compile(r"\b[IWEF](?P<mon>[01]\d)(?P<day>[0-3]\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)")


def glog_time(text: str, year: int) -> datetime | None:
    """The glog stamp heading a line, dated in `year`; None without one (or an invalid date)."""
    if (m := _GLOG.search(text[:200])) is None:
        return None
    try:
        return datetime(year, int(m["mon"]), int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"]))
    except ValueError:
        return None


def _glog_before(a: Analysis, last: int, year: int) -> datetime | None:
    """The latest glog stamp at or before the last progress line (torchrun's agent restarting
    the workers dates the recovery that the progress after it shows)."""
    for entry in reversed(a.lines[: last + 1]):
        if _GLOG.search(entry.text[:200]) is not None:
            return glog_time(entry.text, year)
    return None


# torchrun's agent restarting its workers after a failure (torch/distributed/elastic/agent/
# server/api.py: `Worker group FAILED. 3/3 attempts left; will restart worker group`).
_RESTARTED = re.compile(r"\bwill restart worker group\b")


def _restarted_before(a: Analysis, last: int) -> bool:
    return any(_RESTARTED.search(e.text) for e in a.lines[:last])


def still_starting(a: Analysis) -> Verdict | None:
    """A running job that has not printed a training step yet, seen within
    HANG_SILENCE_FLOOR_SECONDS of its start, with nothing failing: still starting up (a model
    load, a container import, a rendezvous waiting for the last nodes within its join
    timeout), not a hang. The labels' hang is a job whose steps never started *and* idled on."""
    if not a.running or last_progress(a) is not None:
        return None
    run = a.facts.run_time()
    if run is None or run.total_seconds() > HANG_SILENCE_FLOOR_SECONDS:
        return None
    if any(e.serious and (e.root or e.cascade) for e in a.events):
        return None
    return Verdict(
        Category.NONE, "none", f"job running for {run.total_seconds():.0f}s, still starting up "
        "(no training step yet, nothing failed)", 0.6,
        evidence=a.lines[-1:], kind="none",
    )  # fmt: skip
