"""A job whose output had stopped long before Slurm ended it: a hang, however it ended (a time
limit, an owner's or an admin's cancel; attribution-labels.md). What dates the silence, in
order of trust: the progress lines' own clock, the last output line's stamp, the output file's
mtime (`stat`) or an operator's note of it, a tqdm bar's own clock against the run time, and,
for a run that never printed a step, its start.
"""

from __future__ import annotations

import itertools
import re
import statistics
from datetime import datetime, timedelta

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.bundle import stamp_in
from resurgo.attribute.liveness import (
    HANG_SILENCE_FACTOR,
    HANG_SILENCE_FLOOR_SECONDS,
    STARTUP_ALLOWANCE_SECONDS,
    bar_silence,
    last_progress,
    noted_last_progress,
    progress_times,
)
from resurgo.attribute.series import read_series
from resurgo.attribute.step_usage import idle_step_nodes
from resurgo.attribute.yearless_stamps import yearless_time
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.policy.decide import AGENT_NEVER_STARTED_KEY

_KILLED_AT = re.compile(r"\bCANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def killed_at(kill: list[LogLine]) -> str | None:
    """The time Slurm's kill lines give for the kill (`CANCELLED AT <time> DUE TO ...`)."""
    return next((m.group(1) for e in kill if (m := _KILLED_AT.search(e.text))), None)


def never_progressed(
    a: Analysis, kill: list[LogLine], until: str = "the time limit", outcome: str | None = "timeout"
) -> Verdict | None:
    """The time limit ended a job that never printed a training step, its output silent for
    longer than the start-up the engine grants any job (STARTUP_ALLOWANCE_SECONDS: imports,
    rendezvous, loading a large checkpoint, compiling): it idled, a hang (attribution-labels.md:
    a job whose training step never started and idled until the time limit is a hang)."""
    if a.scan.advances or last_progress(a) is not None or read_series(a):
        return None
    killed = killed_at(kill)
    if killed is None:
        return None
    # The last time the output shows; without one, when Slurm started the job (the whole
    # run then passed without a step).
    before = a.lines[: a.kill_order] if a.kill_order is not None else a.lines
    stamps = [t for e in before if (t := stamp_in(e.text)) is not None]
    end = datetime.fromisoformat(killed)
    if not stamps and outcome != "timeout":
        # A cancel of a job whose output carries no dates: a format of progress not read here
        # (epoch summaries, a simulation's table) would pass for a whole run without a step.
        # A time limit is the run's own length; a cancel came whenever someone chose.
        return None
    if a.job is not None and a.job.start_time is not None:
        stamps.append(a.job.start_time.replace(tzinfo=None))
    elif (run := a.facts.run_time()) is not None:
        stamps.append(end - run)  # (sacct's Elapsed back from the kill: when it started)
    last = max((t for t in stamps if t <= end), default=None)
    if last is None or (end - last).total_seconds() <= STARTUP_ALLOWANCE_SECONDS:
        return None
    # The nodes whose own step used nothing all along: their agent never started, and the
    # others waited for it (attribution-labels.md names such a node, category unknown).
    idle, rows = idle_step_nodes(a.facts)
    where = f"; the step on {', '.join(idle)} used no CPU or memory (it never started)"
    if not idle and (unlaunched := _not_launched_by_srun(a)) is not None:
        # The framework itself said its processes were not started by srun inside a Slurm
        # allocation: it waits for members the launch never started. The launch, not the
        # limit, decides (no scheduler outcome): stop.
        return Verdict(
            Category.APPLICATION, "hang|not_launched_by_srun", "no training step was ever "
            f"printed, from {last} until {until} at {end}, and the framework warned that the "
            "job was not launched with srun", 0.8,
            evidence=[unlaunched, *a.lines[-1:], *kill[:1]], kind=AnomalyKind.HANG,
        )  # fmt: skip
    return Verdict(
        Category.UNKNOWN, AGENT_NEVER_STARTED_KEY if idle else "hang|never_started",
        "no training step was ever printed, from "
        f"{last} (its last time stamp, else its start) until {until} at {end}"
        f"{where if idle else ''}", 0.6, culprits=idle,
        evidence=[*a.lines[-2:], *kill[:1], *rows], kind=AnomalyKind.HANG, outcome=outcome,
    )  # fmt: skip


def hung_until_time_limit(
    a: Analysis, kill: list[LogLine], until: str = "its time limit", outcome: str | None = "timeout"
) -> Verdict | None:
    """A time-limit kill long after the last progress line: the job was hung, not cut short."""
    times = progress_times(a)
    last = last_progress(a)
    killed = killed_at(kill)
    if len(times) < 2 and last is not None and killed is not None:
        # Progress lines without clock times (tqdm bars): `stat` of the job's output file
        # says when it was last written, or an operator's note when it last advanced.
        written = _output_written(a) or noted_last_progress(a)
        silence = (datetime.fromisoformat(killed) - written).total_seconds() if written else 0
        if written is not None and silence > OUTPUT_SILENCE_SECONDS:
            return Verdict(
                Category.UNKNOWN, "hang|time_limit", f"the job's output last advanced at "
                f"{written} and it stayed silent {silence / 3600:.1f} h until {until}",
                0.6, evidence=[a.lines[last], *kill[:2]], kind=AnomalyKind.HANG,
                outcome=outcome,
            )  # fmt: skip
    if len(times) < 2 and last is not None and killed is not None:
        # No clock on the progress lines, but the last tqdm bar's own clock accounts for less
        # of the run than Slurm's run time, by more than a start-up and a silence that would
        # be a hang: it stopped long before the kill. (Not the iterations at their printed
        # pace: an excerpt of a log prints fewer of them than ran.)
        guess = bar_silence(a)
        if guess is not None and guess > HANG_SILENCE_FLOOR_SECONDS:
            return Verdict(
                Category.UNKNOWN, "hang|time_limit", "its progress accounts for the run "
                f"until at least {guess / 60:.0f} min before {until} (after a "
                f"{STARTUP_ALLOWANCE_SECONDS / 60:.0f} min allowance for start-up), then "
                "nothing", 0.6, evidence=[a.lines[last], *kill[:2]], kind=AnomalyKind.HANG,
                outcome=outcome,
            )  # fmt: skip
    if len(times) < 2 or last is None or killed is None:
        return None
    gaps = [(y - x).total_seconds() for x, y in itertools.pairwise(times) if y > x]
    allowed = max(HANG_SILENCE_FACTOR * statistics.median(gaps or [0.0]),
                  HANG_SILENCE_FLOOR_SECONDS)  # fmt: skip
    silence = (datetime.fromisoformat(killed) - times[-1]).total_seconds()
    if silence <= allowed:
        return None
    return Verdict(
        Category.UNKNOWN, "hang|time_limit", f"progress stopped at {times[-1]} and the job "
        f"stayed silent {silence / 3600:.1f} h until {until}", 0.6,
        evidence=[a.lines[last], *kill[:2]], kind=AnomalyKind.HANG, outcome=outcome,
    )  # fmt: skip


def silent_until_time_limit(
    a: Analysis, kill: list[LogLine], until: str = "its time limit", outcome: str | None = "timeout"
) -> Verdict | None:
    """The job's last line of output before a time-limit kill came after its last progress
    line and carries a time more than OUTPUT_SILENCE_SECONDS before the kill: whatever it
    started then (a save, a weight sync, draining requests) never finished, and it printed
    nothing more. Progress lines without a clock leave only that line to date the silence."""
    last = last_progress(a)
    killed = killed_at(kill)
    cut = a.kill_order if a.kill_order is not None else len(a.lines)
    if last is None or killed is None or last >= cut:
        return None
    # (an operator's note after it is no output of the job's: the line before it is its last)
    final = next(
        (e for e in reversed(a.lines[last + 1 : cut])
         if e.text.strip() and not e.text.lstrip().startswith("#")),
        None,
    )  # fmt: skip
    if final is None:
        return None
    end = datetime.fromisoformat(killed)
    at = stamp_in(final.text) or yearless_time(final.text, end)
    if at is None or at > end or (end - at).total_seconds() <= OUTPUT_SILENCE_SECONDS:
        return None
    return Verdict(
        Category.UNKNOWN, "hang|time_limit", f"after its last progress line the job printed "
        f"its last output at {at} and stayed silent {(end - at).total_seconds() / 3600:.1f} h "
        f"until {until}", 0.6, evidence=[a.lines[last], final, *kill[:1]],
        kind=AnomalyKind.HANG, outcome=outcome,
    )  # fmt: skip


# `stat -c '%y %n' FILE` of the job's output (coreutils stat: `%y` is the modification time).
_STAT_MTIME = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?(?: [+-]\d{4})? \S+\.(?:out|log|err|txt)\s*$"
)
OUTPUT_SILENCE_SECONDS = 3600.0


# An operator's note of the same fact: `# last progress line written 2026-07-04 10:41 (job
# log mtime)`, `# job.out last modified 2026-07-04T10:41:07`, `# last line above at
# 2026-12-02T03:12`.
_NOTED_WRITTEN = re.compile(
    r"^#.*?\b(?:last (?:\w+ )?(?:line )?(?:written|modified)|last (?:\w+ )?line above at"
    r"|mtime)\b\D{0,40}?"
    r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d(?::\d\d)?)\b"
)


def _output_written(a: Analysis) -> datetime | None:
    for entry in reversed(a.facts.lines):
        if (m := _STAT_MTIME.match(entry.text.strip())) is not None:
            return datetime.fromisoformat(m.group(1))
    for entry in [*reversed(a.facts.lines), *reversed(a.lines[-20:])]:
        if entry.text.startswith("#") and (n := _NOTED_WRITTEN.search(entry.text)) is not None:
            try:
                return datetime.fromisoformat(f"{n.group(1)} {n.group(2)}")
            except ValueError:
                continue
    return None


def hung_before_the_cancel(a: Analysis) -> Verdict | None:
    """A cancel (its owner's or an admin's) long after the job's progress, or all its output,
    had stopped: it ended a hang (attribution-labels.md: a hang, however it ended: ... a
    cancel). The same silences as before a time limit. The hang, not the cancel, decides
    what happens next (no scheduler outcome): whoever cancelled a stuck job did not mean to
    end a working one."""
    return a.once("hung_before_the_cancel", lambda: _hung_before(a))


def _hung_before(a: Analysis) -> Verdict | None:
    lines = [e.line for e in a.events if e.match.id == "slurm_job_cancelled"][:3]
    if not lines:
        # (sacct's CANCELLED with no kill line in the output: only a note can date the hang)
        return noted_silence(a, [], "the cancel", None) if a.state == "CANCELLED" else None
    return (
        hung_until_time_limit(a, lines, "the cancel", None)
        or silent_until_time_limit(a, lines, "the cancel", None)
        or never_progressed(a, lines, "the cancel", None)
        or noted_silence(a, lines, "the cancel", None)
    )


# An operator's note of how long the job printed nothing before it ended (a fact, per
# attribution-labels.md): `# no further output for 3h50m; job hit its wall time`, `# note: no
# further output for 40 minutes`, `# job cancelled by owner at 11:40 after 90 minutes without
# output`, `# ... after 4 h 20 min without a log line`.
def _duration(tag: str) -> str:
    """`3h50m`, `11 h`, `4 h 20 min`, `40 minutes`, `90 min`: named groups h/hm/m + tag."""
    return (
        rf"(?:(?P<h{tag}>\d{{1,4}})\s*h(?:ours?)?(?:\s*(?P<hm{tag}>\d{{1,2}})\s*m(?:in(?:utes?)?)?)?"
        rf"|(?P<m{tag}>\d{{1,5}})\s*min(?:utes?)?)\b"
    )


_NOTED_SILENCE = re.compile(
    r"(?i)^\s*#.*?(?:\b(?:no (?:further |more |new )?(?:output|progress|log lines?)|"
    r"(?:printed|logged|wrote) nothing)\b[^;.]{0,40}?\bfor (?:about |~)?"
    + _duration("1")
    + r"|\bafter "
    + _duration("2")
    + r"\s+without (?:a |any )?(?:log line|output|progress))"
)
# A note that the job was stuck, with no time to it: `# no iteration was ever logged; ...
# cancelled by the user after 2 h`, `# the process is still alive but makes no progress`.
_NOTED_STUCK = re.compile(
    r"(?i)^\s*#.*?\b(?:makes? no (?:further )?progress|no (?:iteration|step|training step) "
    r"(?:was|has been) ever (?:logged|printed))\b"
)


def noted_silence(
    a: Analysis, kill: list[LogLine], until: str = "its time limit", outcome: str | None = "timeout"
) -> Verdict | None:
    """An operator's note that the job printed nothing for longer than a collective's timeout
    (HANG_SILENCE_FLOOR_SECONDS) before Slurm ended it: it was stuck, not cut short."""
    for entry in itertools.chain(a.lines, a.facts.lines):  # (a note in either file)
        if "#" not in entry.text[:8]:
            continue
        said = _noted_stall(entry.text, killed_at(kill))
        if said is not None:
            return Verdict(
                Category.UNKNOWN, "hang|noted_silence", f"an operator's note says the job "
                f"{said} before {until}", 0.6,
                evidence=[entry, *kill[:1]], kind=AnomalyKind.HANG, outcome=outcome,
            )  # fmt: skip
    return None


def _noted_stall(text: str, killed: str | None) -> str | None:
    """What a note says of the job's stall (`printed nothing for 1.8 h`, `was stuck`), when it
    says one longer than a collective's timeout or one with no time to it."""
    since = _silent_since(text, killed)
    if since is None and (m := _NOTED_SILENCE.search(text)) is not None:
        hours = m["h1"] or m["h2"]
        minutes = (m["hm1"] or m["hm2"]) if hours else (m["m1"] or m["m2"])
        since = 3600.0 * int(hours or 0) + 60.0 * int(minutes or 0)
    if since is not None:
        return (
            f"printed nothing for {since / 3600:.1f} h"
            if since > HANG_SILENCE_FLOOR_SECONDS
            else None
        )
    return "was stuck" if _NOTED_STUCK.search(text) else None


# The clock time the output stopped at, as a note gives it (`# no output after 19:24; the step
# was still running at 21:05`): silent from then until the kill, on the kill's day (or the day
# before when the time is later than the kill's).
_NOTED_SINCE = re.compile(
    r"(?i)^\s*#.*?\bno (?:further |more |new )?(?:output|progress|log lines?) "
    r"(?:after|since) (?P<h>[01]?\d|2[0-3]):(?P<m>[0-5]\d)\b"
)


def _silent_since(text: str, killed: str | None) -> float | None:
    """Seconds from the clock time a note says the output stopped at to the kill."""
    if killed is None or "no " not in text.lower() or (m := _NOTED_SINCE.search(text)) is None:
        return None
    end = datetime.fromisoformat(killed)
    since = end.replace(hour=int(m["h"]), minute=int(m["m"]), second=0, microsecond=0)
    if since > end:
        since -= timedelta(days=1)
    return (end - since).total_seconds()


# Lightning's SLURM environment (lightning/fabric/plugins/environments/slurm.py,
# `_validate_srun_used`): the job runs in an allocation but its command was not started by srun,
# so the members of a multi-process world on the other tasks are never launched.
_SRUN_NOT_USED = "command is available on your system but is not used"


def _not_launched_by_srun(a: Analysis) -> LogLine | None:
    return next((e for e in a.lines if _SRUN_NOT_USED in e.text and "srun" in e.text), None)
