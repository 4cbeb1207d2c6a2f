"""Scanning the job's output: from raw lines to attributable events, in order.

`scan_job` walks the job's output once: every registry match becomes an `Event` tagged with its
actor (srun task, else rank), node and position; srun's per-task verdicts become `TaskExit`s;
Python tracebacks are followed per actor so an error raised while saving a checkpoint is known
as such; the torchelastic `Root Cause` block and progress/completion markers are recorded.
`split_attempt` keeps the last attempt of an output file several attempts appended to.
"""

from __future__ import annotations

import re
from datetime import datetime

from resurgo.attribute.bundle import line_time
from resurgo.attribute.events import (
    _CORRECTED,
    ElasticFailure,
    Event,
    JobScan,
    TaskExit,
    actor_of,
    normalise,
)
from resurgo.attribute.timer_summaries import slowest_rank
from resurgo.attribute.topology import (
    SRUN_TASK,
    Topology,
    expand_tasks,
    split_host_prefix,
    task_nodes,
)
from resurgo.attribute.tracebacks import _EXC_LINE, TracebackTracker
from resurgo.contracts import Category, LogLine
from resurgo.detect.lines import parse_nccl_prefix, strip_prefixes
from resurgo.detect.literals import gated
from resurgo.detect.progress import ProgressParser, parse_rank_timing
from resurgo.detect.registry import PatternMatch, Registry
from resurgo.detect.timing_fields import SPACED_HINT, timing_fields

# Lines that say the launcher saw the job's processes end.
ENDED_IDS = frozenset(
    {"torchelastic_child_failed", "torchelastic_worker_failed", "torchelastic_root_cause_header"}
)
_STEP_TERMINATING = re.compile(
    r"srun: (?:launch/slurm: _step_signal: Terminating StepId|Job step aborted|"
    r"forcing job termination|Force Terminated)|\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT"
)
_COMPLETED = gated(re.compile(  # (runs on every line without progress)
    r"(?i)\btraining (?:is )?(?:complete|completed|finished|done)\b|\bfinished training\b|"
    r"^Training time \d+:\d\d:\d\d$|"  # torchvision's reference scripts
    r"\bsrun exited rc=0\b|\b(?:exit(?:ed)?|return) (?:code|status)[=: ]+0\b.{0,20}$|"
    # Lightning/NeMo `Trainer.fit` stopped: `max_epochs=16` reached.`; "reached max_steps=N";
    # Megatron's "[after training is done]".
    r"`?Trainer\.fit`? stopped\b|\bmax_(?:steps|epochs|iters?)`?\s*=\s*\d+`? reached\b|"
    r"\breached max_(?:steps|epochs|iters?)\b|\[after training is done\]"
))  # fmt: skip
_SRUN_EXIT_RC = re.compile(r"\bsrun(?: exited)? rc=(?P<rc>\d+)")
# Kaldi's (and ESPnet's) utils/parallel/slurm.pl and run.pl close the log of every command they
# run with `# Accounting: time=6329 threads=1` and `# Ended (code 0) at <date>, elapsed time 6329
# seconds`: the command's own exit status.
_KALDI_ENDED = re.compile(r"^# Ended \(code (?P<rc>\d{1,3})\) at ")
# (both run on every line of the output: gated, so lines without their literals skip them)
_RESTART = gated(
    re.compile(r"\b(?:restart|restarts|restart_count|SLURM_RESTART_COUNT)[=: ]+(?P<n>\d+)\b")
)
_REQUEUE = gated(re.compile(r"CANCELLED AT \S+ DUE TO JOB REQUEUE"))
_WORKERS_RESTART = re.compile(
    r"\bWorker group FAILED\. \d+/\d+ attempts left; will restart worker group"
)
# How a run of the workers ends in failure: the agent's verdict, or the error torchrun raises.
_WORKERS_FAILED = re.compile(r"\bWorker group FAILED\b|\bChildFailedError\b")
# The agents' own lines between the restart decision and the new workers' first output.
_WORKERS_RESTART_NOISE = re.compile(
    r"\bWorker group FAILED\. |\bStopping worker group\b|closing signal SIGTERM|"
    r"will restart worker group"
)
_RESUMED = re.compile(
    r"(?i)(?:resum\w*|loaded checkpoint|restor\w*)\b.{0,80}?\b(?:iteration|iter|step)[\s=:]+(\d+)"
)
# `"rank": 2`, `rank=2`, `[rank 2/4 host=...]`, `rank 2 of 4`.
_RANK_FIELD = re.compile(r"\brank\"?\s*(?:[=:]\s*\"?|\s+)(\d{1,6})\b")


# A launcher's note of the signal Slurm sent with the requeue (submitit's job_environment.py:
# `Bypassing signal SIGTERM`, `Caught signal SIGUSR2 on host: this job is preempted.`): the run
# the requeue ended tearing down, not the next run's output.
_SIGNAL_NOTE = re.compile(r"\bsignal SIG(?:TERM|USR1|USR2|CONT|INT)\b")


def _slurm_only(entry: LogLine) -> bool:
    body = strip_prefixes(entry.text).body
    return body.startswith(("slurmstepd:", "srun:")) or bool(_SIGNAL_NOTE.search(body))


# A kill Slurm requeues after (`--requeue`): the job runs again, appending to the same output.
_REQUEUED_KILL = gated(re.compile(r"CANCELLED AT \S+ DUE TO (?P<why>PREEMPTION|NODE FAILURE)"))
_STATE_OF_KILL = {"PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}
# States a requeued job can be in afterwards (not waiting to run again: then the output's last
# run is the one the kill ended).
_RAN_AGAIN = frozenset(
    {"RUNNING", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "CANCELLED",
     "PREEMPTED"}
)  # fmt: skip


def split_attempt(
    lines: list[LogLine], restarts: int | None, state: str | None = None
) -> list[LogLine]:
    """The lines of the last attempt when one output file holds several (append mode)."""
    marks = [i for i, e in enumerate(lines) if _REQUEUE.search(e.text)]
    start = marks[-1] + 1 if marks else 0
    if state in _RAN_AGAIN:
        # Slurm says the job did not end the way a preemption's or a node failure's kill in its
        # output ends it, and the job's own output goes on after that kill: an earlier run,
        # requeued; the run after it (past the killed run's own teardown lines) is this attempt.
        kills = [
            i for i, e in enumerate(lines) if i >= start and (k := _REQUEUED_KILL.search(e.text))
            and _STATE_OF_KILL[k["why"]] != state
        ]  # fmt: skip
        if kills and any(not _slurm_only(e) for e in lines[kills[-1] + 1 :]):
            start = kills[-1] + 1
            while start < len(lines) and _slurm_only(lines[start]):
                start += 1
    if marks and all(_slurm_only(e) for e in lines[start:]):
        # The run after the requeue has printed nothing yet (the job waits to run again): the
        # output's last run is the one the requeue ended, after any earlier requeue.
        ending = marks[-1]
        while ending > 0 and (ending - 1 in marks or _slurm_only(lines[ending - 1])):
            ending -= 1
        start = max((i + 1 for i in marks if i < ending), default=0)
    restarts_at = [
        (i, int(m.group("n"))) for i, e in enumerate(lines) if (m := _RESTART.search(e.text))
    ]
    if restarts_at:
        target = restarts if restarts is not None else max(n for _, n in restarts_at)
        if target > 0:
            firsts = [i for i, n in restarts_at if n == target]
            if firsts:
                start = max(start, firsts[0])
    # torchrun's agents restarting their workers inside the run (`Worker group FAILED. 1/2
    # attempts left; will restart worker group`, torch/distributed/elastic/agent/server/
    # api.py): the workers' last run is the one that ended the job, when it printed anything.
    restarted = [i for i, e in enumerate(lines) if i >= start and _WORKERS_RESTART.search(e.text)]
    if restarted:
        after = restarted[-1] + 1
        while after < len(lines) and _WORKERS_RESTART_NOISE.search(lines[after].text):
            after += 1
        # (only where that last run failed too: one that trains on recovered, and what the
        # earlier run failed of is what the recovery is judged against)
        if after < len(lines) and any(_WORKERS_FAILED.search(e.text) for e in lines[after:]):
            start = after
    return lines[start:] if start else lines


def scan_job(registry: Registry, lines: list[LogLine], topo: Topology) -> JobScan:
    scan = JobScan()
    hosts = list(topo.hosts.nodes)
    progress = ProgressParser()
    tracebacks = TracebackTracker()
    relayed: dict[str | None, int] = {}  # actor → the peer whose traceback it is printing
    watchdog_abort: dict[str | None, int] = {}  # actor → its watchdog's `what()` line
    elastic_section: str | None = None
    elastic_fields: dict[str, str] = {}
    elastic_line: LogLine | None = None
    # One chunked scan of every line (the same matches as `registry.scan` line by line; the
    # chunk engine skips benign lines without a Python call).
    texts = [entry.text for entry in lines]
    if topo.host_prefixes:
        texts = [split_host_prefix(t, topo.host_prefixes)[1] for t in texts]
    found = dict(registry.scan_chunk(texts))
    for order, entry in enumerate(lines):
        prefix_host, text = split_host_prefix(entry.text, topo.host_prefixes)
        pre = strip_prefixes(text)
        task, rank, body = pre.task, pre.rank, pre.body
        if prefix_host is None:
            prefix_host = pre.host
        if task is None and rank is not None and topo.rank_is_task:
            task = rank
        actor = actor_of(task, rank, prefix_host)
        # srun's verdict on tasks
        if "srun: error" in body and (m := SRUN_TASK.search(body)):
            scan.ended = True
            _task_exit(scan, m, entry, order, topo)
            continue
        if ("srun:" in body or "CANCELLED" in body) and _STEP_TERMINATING.search(body):
            scan.ended = True
            if scan.terminated_at is None:
                scan.terminated_at = order
        exit_rc = _SRUN_EXIT_RC.search(body) if "rc=" in body else None
        if exit_rc is None and body.startswith("# Ended (code"):
            exit_rc = _KALDI_ENDED.match(body)
        if exit_rc is not None:
            scan.ended = True
            scan.srun_rc = int(exit_rc.group("rc"))
        iteration = progress.parse(text, body)
        if iteration is not None:
            if scan.first_iteration is None:
                scan.first_iteration = iteration
            if scan.max_iteration is None or iteration > scan.max_iteration:
                scan.advances.append(order)
            scan.max_iteration = max(scan.max_iteration or -1, iteration)
            if (at := line_time(pre.time or body.lstrip())) is not None:
                scan.progress_times.append(at)
        maybe_resumed = "esum" in body or "estor" in body or "oaded" in body
        if maybe_resumed and scan.resumed_from is None and (r := _RESUMED.search(body)):
            scan.resumed_from = int(r.group(1))
        if ("rank" in body or "r0=" in body) and (slow := slowest_rank(body, topo)):
            scan.slowest.append((*slow, entry))
        if "step_time_ms" in text and (timing := parse_rank_timing(text)):
            where = topo.hosts.canonical(timing.node) or timing.node
            scan.timings.setdefault(timing.rank, []).append((timing.step, timing.ms, where))
        elif (
            "tim" in body
            or "t_" in body
            or "ms" in body
            or "dt" in body
            or SPACED_HINT.search(body) is not None
        ) and (fields := timing_fields(body)):
            # Any per-rank times (`1: iter 40 | step_time 0.52s data_time 0.3s`, JSON lines
            # with a "rank" key): ranks that each report their own make stragglers visible
            # whatever the trainer's format.
            said = _said_rank(body) if rank is None and task is None else None
            who = rank if rank is not None else task if task is not None else said
            on = topo.node_of(task, rank if rank is not None else said) if who is not None else None
            if who is not None and on is not None:
                for key, ms in fields.items():
                    samples = scan.field_times.setdefault(key, {}).setdefault(who, [])
                    samples.append((iteration if iteration is not None else len(samples), ms, on))
        if iteration is None and _COMPLETED.search(body):
            scan.completed_line = entry
        # A peer's traceback relayed by this one (torch.distributed.checkpoint's
        # CheckpointException prints each failed rank's as `Traceback ...: (RANK 10)`): the
        # error under it is that rank's, on that rank's node.
        if body.endswith(")") and (relay := _RELAYED.match(body)) is not None:
            relayed[actor] = int(relay.group(1))
        # tracebacks, per actor (a frame and its source line are code, not messages)
        if tracebacks.feed(actor, body):
            continue
        # torchelastic blocks
        if "Root Cause (first observed failure)" in body:
            elastic_section, elastic_fields, elastic_line = "root", {}, entry
        elif "Failures:" in body and re.match(r"^\s*Failures:\s*$", body):
            elastic_section, elastic_fields, elastic_line = "other", {}, entry
        elif elastic_section is not None:
            if fm := re.match(
                r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$", body
            ):
                elastic_fields[fm.group(1)] = fm.group(2).strip()
                if fm.group(1) == "traceback":
                    _elastic_failure(scan, elastic_fields, elastic_section, elastic_line or entry,
                                     order, topo)  # fmt: skip
                    elastic_fields = {}
                    if fm.group(2).startswith("Signal "):
                        # The agent's summary of a child's death (kept as an ElasticFailure,
                        # with its time): not that child's own crash report.
                        continue
            elif re.match(r"^\s*=+\s*$", body) and elastic_fields:
                _elastic_failure(scan, elastic_fields, elastic_section, elastic_line or entry,
                                 order, topo)  # fmt: skip
                elastic_fields = {}
        known = found.get(order)
        ended = False
        matches: list[PatternMatch] = []
        if known:  # (most lines match no entry: nothing to sort out)
            ended = any(m.id in ENDED_IDS for m in known)
            if ended:
                scan.ended = True
            matches = [m for m in known if m.role in ("root", "cascade")]
            if any(m.role == "root" and m.category != Category.UNKNOWN for m in matches):
                # One line, its most specific reading: `CUDA error: no kernel image ...` is the
                # catalogue's application entry, not also a CUDA error of unknown class.
                matches = [m for m in matches if m.role != "root" or m.category != Category.UNKNOWN]
                # Nor a generic cascade besides (`NCCL WARN Cuda failure 'out of memory'` is
                # NCCL's allocation failing, not a reaction to an earlier CUDA error).
                matches = [m for m in matches if m.role == "root"]
        if "what()" in body and _WATCHDOG_WHAT.search(body):
            watchdog_abort[actor] = order
        elif matches and "Abort" in body and order - watchdog_abort.get(actor, -99) <= 8:
            # The watchdog's own abort of the process it found stuck (ProcessGroupNCCL throws
            # from its thread and std::terminate raises SIGABRT): the hang's consequence.
            matches = [
                m.model_copy(update={"role": "cascade"}) if m.id in _ABORT_IDS else m
                for m in matches
            ]
        exception_line = (
            ("Error" in body or "Exception" in body)  # (what `_EXC_LINE` needs: most lines skip it)
            and _EXC_LINE.match(body) is not None
            and not body.startswith(" ")
        )
        if not matches and not ended and exception_line and tracebacks.in_traceback(actor):
            # An exception no entry knows (a launcher's ChildFailedError reporting on its
            # children is not a failure of its own): read by who raised it.
            matches = [tracebacks.unknown_exception(actor, body)]
        if matches:
            node = _line_node(text, task, rank, topo)
            if node is None and prefix_host is not None:
                node = topo.hosts.canonical(prefix_host)
            speaker: tuple[str | None, int | None, int | None] = (actor, task, rank)
            peer = relayed.get(actor) if exception_line else None
            if peer is not None and peer != rank:  # (where it ran, if the topology knows)
                node, speaker = topo.node_of(None, peer), (actor_of(None, peer, None), None, peer)
            for match in matches:
                if _CORRECTED.search(body) and match.category.value.startswith("hardware"):
                    continue
                scan.events.append(
                    Event(
                        line=entry,
                        order=order,
                        origin="job",
                        actor=speaker[0],
                        task=speaker[1],
                        rank=speaker[2],
                        node=node,
                        match=match,
                        message=body.strip()[:300],
                        key=f"{match.id}|{normalise(body, hosts)}",
                        in_save=tracebacks.in_save(actor),
                    )
                )
        if exception_line:
            tracebacks.close(actor)
            relayed.pop(actor, None)
    if elastic_section is not None and elastic_fields and elastic_line is not None:
        _elastic_failure(scan, elastic_fields, elastic_section, elastic_line, len(lines), topo)
    return scan


# `terminate called after throwing an instance of ...` then `  what():  [Rank 0] Watchdog caught
# collective operation timeout: WorkNCCL(...)` (c10d ProcessGroupNCCL's watchdog thread).
_WATCHDOG_WHAT = re.compile(
    r"\bwhat\(\):\s+\[.{0,80}?Rank \d+\] Watchdog caught collective operation"
)
_ABORT_IDS = frozenset({"python_fatal_signal", "abort_signal"})
_RELAYED = re.compile(r"^Traceback \(most recent call last\): \(RANK (\d{1,7})\)$")


def _said_rank(body: str) -> int | None:
    m = _RANK_FIELD.search(body)
    return int(m.group(1)) if m else None


def _line_node(text: str, task: int | None, rank: int | None, topo: Topology) -> str | None:
    nccl = parse_nccl_prefix(text)
    if nccl is not None:
        node = topo.hosts.canonical(nccl.host)
        if node:
            return node
    m = re.search(r"\bslurmstepd-(?P<node>[\w.-]+):", text) or _UCX_PREFIX.search(text[:120])
    if m:
        node = topo.hosts.canonical(m.group("node"))
        if node:
            return node
    return topo.node_of(task, rank)


# UCX's log prefix (ucs/debug/log.c): `[1653488081.109170] [cn101:48211:0]  ib_iface.c:968  UCX`.
_UCX_PREFIX = re.compile(
    r"\[\d{9,11}\.\d{1,9}\] +\[(?P<node>[A-Za-z][\w.-]{0,63}):\d{1,9}:\d{1,6}\] "
)


def _task_exit(scan: JobScan, m: re.Match[str], entry: LogLine, order: int, topo: Topology) -> None:
    what = m.group("what").strip()
    code: int | None = None
    if ec := re.match(r"Exited with exit code (\d+)", what):
        code = int(ec.group(1))
        status = "exit"
        if code in (137, 143):  # killed by SIGKILL / SIGTERM inside a shell
            status = "killed" if code == 137 else "terminated"
        elif code > 128:
            status = "signal"
    elif what.startswith("Terminated"):
        status = "terminated"
    elif what.startswith("Killed"):
        status = "killed"
    elif re.match(r"(?i)out of memory|oom", what):
        status = "oom"
    else:
        status = "signal"
    after = scan.terminated_at is not None and order > scan.terminated_at
    for task, name in task_nodes(m.group("node"), expand_tasks(m.group("tasks"))):
        node = topo.hosts.canonical(name) or name
        actor = f"t{task}"
        item = TaskExit(actor, task, node, status, code, what, entry, order, after)
        scan.exit_order.append(item)
        scan.exits.setdefault(actor, item)


def _elastic_failure(
    scan: JobScan,
    fields: dict[str, str],
    section: str,
    entry: LogLine,
    order: int,
    topo: Topology,
) -> None:
    rank_m = re.match(r"(\d+)", fields.get("rank", ""))
    code_m = re.match(r"(-?\d+)", fields.get("exitcode", ""))
    pid_m = re.search(r"\(pid: (\d+)\)", fields.get("exitcode", ""))
    try:
        when = datetime.strptime(fields.get("time", ""), "%Y-%m-%d_%H:%M:%S")
    except ValueError:
        when = None
    scan.elastic.append(
        ElasticFailure(
            rank=int(rank_m.group(1)) if rank_m else None,
            node=topo.hosts.canonical(fields.get("host")),
            exitcode=int(code_m.group(1)) if code_m else None,
            line=entry,
            order=order,
            root=section == "root",
            when=when,
            pid=int(pid_m.group(1)) if pid_m else None,
        )
    )
