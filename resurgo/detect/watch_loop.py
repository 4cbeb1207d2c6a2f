"""The watch loop for one attempt: tail the job's output, poll its Slurm state, report.

It returns at each milestone the workflow records (attempt started, first progress, anomaly,
completion) and otherwise after a bounded window, so the workflow can continue-as-new between
watches. Progress is heartbeated: a retried watch resumes where the last one stopped.

Time: every interval (hang bounds, the window) is measured on a monotonic clock, so a step of
the wall clock (NTP, an operator's `date -s`) neither makes a healthy job look hung nor hides a
hang. The watcher sees wall-clock datetimes anchored once per watch and advanced by the
monotonic clock (`steady_clock`).

The output path is the job owner's: it is read only as a regular file of the job's user (see
resurgo.slurm.output_files). A refused path is logged and named in what the watch reports; the
watch goes on watching Slurm state without it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from resurgo.contracts import (
    Anomaly,
    AnomalyKind,
    JobObservation,
    LogCursor,
    ProgressMark,
    WatchRequest,
    WatchResult,
)
from resurgo.detect.attempt_state import AttemptWatcher, WatchState
from resurgo.detect.logtail import read_until_eof
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry
from resurgo.detect.remote_tail import RemoteLogs, RemoteTail
from resurgo.policy.directive import check_progress_pattern
from resurgo.slurm.output_files import OutputRefused
from resurgo.slurm.runner import CommandRunner
from resurgo.slurm.snapshot import JobReader

log = logging.getLogger("resurgo.watch")

# Waits between looks: until the output file changes or a bound passes (`FileChanges.wait`),
# by default a plain sleep of `poll_seconds`.
Pause = Callable[[LogCursor | None], Awaitable[None]]

# How long a terminal job's output may keep arriving after Slurm says it ended (NFS, buffering).
DRAIN_SECONDS = 0.5
# A read holding more text than this is scanned off the event loop: a chunk of hostile lines
# must not freeze every other watch and heartbeat on the controller.
INLINE_SCAN_CHARS = 32 * 1024
_scan_pool: ThreadPoolExecutor | None = None


class WatchCheckpoint(BaseModel):
    """What the watch heartbeats, so a retry after a crash loses neither lines nor signals."""

    cursor: LogCursor | None
    state: WatchState
    attempt_start_line: int
    source_cursor: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def steady_clock(
    now: Callable[[], datetime], monotonic: Callable[[], float]
) -> Callable[[], datetime]:
    """Wall-clock datetimes read once, then advanced by the monotonic clock only."""
    anchor, start = now(), monotonic()
    return lambda: anchor + timedelta(seconds=monotonic() - start)


def progress_parser(pattern: str | None, job: str) -> tuple[ProgressParser, str | None]:
    """The parser for the directive's pattern, checked by the directive's own validator.

    Discovery refuses a directive whose pattern fails that check, so this only finds one in a
    workflow started before the check existed: it falls back to the built-in formats rather
    than failing the watch at every retry."""
    if pattern is None:
        return ProgressParser(None), None
    custom, problem = check_progress_pattern(pattern)
    if custom is None:
        log.warning("job %s: progress_pattern not used, built-in formats instead: %s", job,
                    problem)  # fmt: skip
        return ProgressParser(None), f"progress_pattern not used: {problem}"
    return ProgressParser(custom), None


async def feed_lines(
    watcher: AttemptWatcher, lines: Sequence[tuple[int, str]], now: datetime, source: str
) -> None:
    """Feed lines to the watcher; a large chunk is scanned on a worker thread, in slices of
    about INLINE_SCAN_CHARS (the event loop waits at most for one slice's longest C call)."""
    global _scan_pool
    if sum(len(text) for _, text in lines) <= INLINE_SCAN_CHARS:
        watcher.feed_many(lines, now, source=source)
        return
    if _scan_pool is None:
        _scan_pool = ThreadPoolExecutor(2, thread_name_prefix="resurgo-scan")
    loop = asyncio.get_running_loop()
    start = 0
    while start < len(lines):
        end, size = start, 0
        while end < len(lines) and (end == start or size + len(lines[end][1]) <= INLINE_SCAN_CHARS):
            size += len(lines[end][1])
            end += 1
        # The watch waits for it: nothing else touches this watcher in the meantime.
        await loop.run_in_executor(_scan_pool, _feed, watcher, lines[start:end], now, source)
        start = end


def _feed(
    watcher: AttemptWatcher, lines: Sequence[tuple[int, str]], now: datetime, source: str
) -> None:
    watcher.feed_many(lines, now, source=source)


async def watch_attempt(
    req: WatchRequest,
    slurm: JobReader,
    runner: CommandRunner,
    registry: Registry,
    heartbeat: Callable[[WatchCheckpoint], None],
    resume: WatchCheckpoint | None = None,
    now: Callable[[], datetime] = _now,
    remote: RemoteLogs | None = None,
    pause: Pause | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> WatchResult:
    """Watch one attempt (see the module docstring); `remote` is the cluster's Loki or
    VictoriaLogs source, whose lines for the job are fed to the same detectors as the file's.
    `now` and `monotonic` are the wall and monotonic clocks (injected by tests)."""
    saved = resume.source_cursor if resume else req.source_cursor
    tail = RemoteTail(remote, str(req.job.job_id), saved) if remote is not None else None
    try:
        if pause is None:

            async def pause(_: LogCursor | None) -> None:
                await asyncio.sleep(req.poll_seconds)

        clock = steady_clock(now, monotonic)
        return await _watch(req, slurm, runner, registry, heartbeat, resume, clock, tail, pause)
    finally:
        if tail is not None:
            tail.stop()


async def _watch(
    req: WatchRequest,
    slurm: JobReader,
    runner: CommandRunner,
    registry: Registry,
    heartbeat: Callable[[WatchCheckpoint], None],
    resume: WatchCheckpoint | None,
    now: Callable[[], datetime],
    tail: RemoteTail | None,
    pause: Pause,
) -> WatchResult:
    state = resume.state if resume else WatchState()
    cursor = resume.cursor if resume else req.cursor
    start_line = resume.attempt_start_line if resume else req.attempt_start_line
    parser, pattern_note = progress_parser(req.progress_pattern, str(req.job.job_id))
    notes = [pattern_note] if pattern_note else []
    refused: str | None = None  # why the output file is not read, once refused
    watcher = AttemptWatcher(
        registry,
        parser,
        hang_timeout=req.hang_timeout,
        state=state,
        straggler=req.straggler,
    )
    watch_started = now()
    deadline = watch_started + timedelta(seconds=req.max_window_seconds)
    seen_started = req.seen_started

    async def read_all(feed: bool, owner: str) -> None:
        nonlocal cursor, refused, start_line
        if cursor is None or refused is not None:
            return
        try:
            async for got in read_until_eof(runner, cursor, owner=owner):
                cursor = got.cursor
                if got.reset:
                    # Truncated or replaced (an --open-mode=truncate requeue): what the file
                    # holds now was written since, its lines numbered from 1 again.
                    start_line = 0
                if feed:
                    await feed_lines(watcher, got.lines, now(), "job.log")
                    if tail is not None:
                        tail.file_lines(got.lines)
        except OutputRefused as exc:
            refused = f"output file not read: {exc}"
            notes.append(refused)
            log.error("job %s: %s", req.job.job_id, refused)
        except TimeoutError as exc:
            # A stalled file system: try again at the next look, Slurm state meanwhile.
            log.warning("job %s: %s", req.job.job_id, exc)

    async def feed_remote(attempt_start: datetime | None) -> None:
        # Never waits on the backend: lines of reads finished since the last poll, if any.
        if tail is not None:
            for source, lines in tail.poll(attempt_start):
                await feed_lines(watcher, lines, now(), source)

    def checkpoint() -> WatchCheckpoint:
        source_cursor = tail.saved_cursor if tail is not None else None
        return WatchCheckpoint(
            cursor=cursor, state=state, attempt_start_line=start_line, source_cursor=source_cursor
        )

    def unreported_progress() -> ProgressMark | None:
        if state.first_iteration is None or req.seen_progress:
            return None
        return ProgressMark(
            iteration=state.first_iteration,
            line_no=state.first_progress_line or 0,
            at=state.last_progress_at or now(),
        )

    def result(outcome: str, obs: JobObservation | None, **extra: object) -> WatchResult:
        return WatchResult.model_validate(
            {
                "outcome": outcome,
                "cursor": cursor,
                "observation": obs,
                "attempt_start_line": start_line,
                "resumed_from": state.resumed_from,
                "last_iteration": state.last_iteration,
                "checkpoint_failure": state.checkpoint_failure,
                "source_cursor": tail.saved_cursor if tail is not None else None,
                "notes": list(notes),
                **extra,
            }
        )

    def anomaly(
        obs: JobObservation, kind: AnomalyKind, suspects: list[str] | None = None
    ) -> Anomaly:
        found = _anomaly(req, obs, watcher, kind, suspects)
        if not notes:
            return found
        # What the watch could not look at is part of the finding (and of the audit trail).
        return found.model_copy(update={"summary": "; ".join([found.summary, *notes])})

    loop = asyncio.get_running_loop()
    obs: JobObservation | None = None

    async def look(current: LogCursor | None) -> None:
        # A refused file is not waited on either: Slurm state is looked at on the timeout.
        await pause(None if refused is not None else current)

    next_observe = 0.0
    while True:
        if loop.time() >= next_observe:
            # The log is read every poll; slurmctld is asked less often (it serves everyone).
            obs = await slurm.show_job(req.job.job_id, at_least_restarts=req.attempt)
            next_observe = loop.time() + req.slurm_poll_seconds
            if obs is None:
                return result("job_gone", None)
            if cursor is None and obs.std_out:
                cursor = LogCursor(path=obs.std_out)
            if obs.restarts > req.attempt:
                return result("requeued", obs)
            if replaced(req, obs):
                return result("job_gone", obs)
        assert obs is not None
        if req.follow_only:
            if now() >= deadline:
                return result("window_elapsed", obs)
            heartbeat(checkpoint())
            await look(cursor)
            continue

        owner = obs.user
        if not seen_started:
            if obs.state == "PENDING":
                # Output written before this attempt runs (the previous attempt's tail, Slurm's
                # requeue notice) belongs to the previous attempt: skip it.
                await read_all(feed=False, owner=owner)
                start_line = cursor.line_no if cursor else 0
                heartbeat(checkpoint())
                await look(cursor)
                continue
            return result("started", obs)

        await read_all(feed=True, owner=owner)
        await feed_remote(obs.start_time)
        current = now()
        reported = req.failure_reported
        # Once the attempt's failure was reported, the cascade that follows (other ranks'
        # errors, srun's task lines, the job's end) is that same failure, not a new anomaly.
        if state.first_fatal_at is not None and not reported:
            # Report at once, carrying a first progress line read in the same batch (the next
            # watch starts afresh: neither line may be lost). Attribution waits
            # (bounded) for the failure to play out. A collective timeout as the first fatal
            # sign means the job hung before it died.
            kind = state.fatal_kind or AnomalyKind.CRASH
            found = anomaly(obs, kind)
            return result("anomaly", obs, anomaly=found, progress=unreported_progress())
        if (mark := unreported_progress()) is not None:
            return result("progress", obs, progress=mark)
        if obs.terminal:
            await asyncio.sleep(DRAIN_SECONDS)
            await read_all(feed=True, owner=owner)
            if obs.state == "COMPLETED" and obs.exit_code == 0 and obs.exit_signal == 0:
                return result("completed", obs)
            if reported:
                return result("ended", obs)
            kind = state.fatal_kind or AnomalyKind.CRASH
            return result("anomaly", obs, anomaly=anomaly(obs, kind))
        quiet_since = max(t for t in (obs.start_time, watch_started) if t is not None)
        watching = obs.running and not reported
        if watching and watcher.hung(current, quiet_since):
            return result("anomaly", obs, anomaly=anomaly(obs, AnomalyKind.HANG))
        if watching and (slow := watcher.stragglers()):
            found = anomaly(obs, AnomalyKind.STRAGGLER, suspects=slow)
            return result("anomaly", obs, anomaly=found)
        if watching and (factor := watcher.throughput_drop()) is not None:
            found = _anomaly(req, obs, watcher, AnomalyKind.STRAGGLER)
            found = found.model_copy(
                update={"summary": f"throughput dropped: iterations take {factor:.1f}x the "
                        "job's own baseline"}
            )  # fmt: skip
            return result("anomaly", obs, anomaly=found)
        if current >= deadline:
            return result("window_elapsed", obs)
        heartbeat(checkpoint())
        await look(cursor)


def replaced(req: WatchRequest, obs: JobObservation) -> bool:
    """The job id now names a different job (slurmctld state was reset and ids reused).

    Restarts never go down for one job, and SubmitTime changes only when Restarts goes up.
    """
    if obs.restarts < req.attempt:
        return True
    key_time = req.job.submit_time
    return (
        obs.restarts == 0
        and obs.submit_time is not None
        and abs((obs.submit_time - key_time).total_seconds()) >= 1
    )


def _anomaly(
    req: WatchRequest,
    obs: JobObservation,
    watcher: AttemptWatcher,
    kind: AnomalyKind,
    suspects: list[str] | None = None,
) -> Anomaly:
    state = watcher.state
    if kind == AnomalyKind.STRAGGLER and suspects:
        medians = {node: sorted(times)[len(times) // 2] for node, times in state.step_times.items()}
        summary = (
            "straggler: "
            + ", ".join(f"{node} {medians[node]:.0f} ms/step" for node in suspects)
            + " vs "
            + ", ".join(f"{n} {ms:.0f}" for n, ms in sorted(medians.items()) if n not in suspects)
        )
    elif kind == AnomalyKind.HANG:
        bound = watcher.hang_bound()
        summary = (
            f"no training progress for more than {bound.total_seconds():.0f}s"
            f" (last iteration {state.last_iteration})"
            if bound
            else "hang"
        )
    elif obs.terminal:
        summary = f"job {obs.state} with exit code {obs.exit_code}:{obs.exit_signal}"
    else:
        summary = f"fatal error while the job is still {obs.state}"
    if state.pattern_ids:
        summary += f"; patterns: {', '.join(state.pattern_ids[:5])}"
    return Anomaly(
        kind=kind,
        attempt=req.attempt,
        detected_at=datetime.now(UTC),
        summary=summary,
        pattern_ids=list(state.pattern_ids),
        signals=list(state.signals[:20]),
        job_state=obs.state,
        exit_code=obs.exit_code,
        exit_signal=obs.exit_signal,
        nodes=list(obs.node_list),
        suspects=list(suspects or []),
    )
