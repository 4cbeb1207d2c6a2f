"""Reading job output: garbage, binary junk and a 50 MB line neither crash the reader nor hide
the real error line that follows them."""

from __future__ import annotations

import getpass
import random
from datetime import UTC, datetime
from pathlib import Path

from resurgo.contracts import JobKey, JobObservation, LogCursor, WatchRequest
from resurgo.detect.attempt_state import AttemptWatcher
from resurgo.detect.logtail import MAX_LINE_BYTES, read_new_lines, read_until_eof
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry
from resurgo.detect.watch_loop import watch_attempt
from resurgo.slurm.runner import LocalRunner

ERROR = b"1: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


async def drain(path: Path, watcher: AttemptWatcher) -> tuple[LogCursor, int]:
    cursor, lines = LogCursor(path=str(path)), 0
    async for got in read_until_eof(LocalRunner(), cursor):
        cursor = got.cursor
        for line_no, text in got.lines:
            assert len(text) <= MAX_LINE_BYTES
            watcher.feed(line_no, text, datetime.now(UTC))
        lines += len(got.lines)
    return cursor, lines


async def test_garbage_and_a_50mb_line_do_not_hide_the_error(tmp_path: Path) -> None:
    rng = random.Random(7)
    log = tmp_path / "job.out"
    with log.open("wb") as out:
        for _ in range(10_000):
            out.write(bytes(rng.randrange(256) for _ in range(rng.randrange(200))).replace(
                b"\n", b"") + b"\n")  # fmt: skip
        out.write(b"x" * (50 * 1024 * 1024) + b"\n")
        out.write(ERROR)
    watcher = AttemptWatcher(Registry.load(), ProgressParser(None), hang_timeout=None)
    cursor, lines = await drain(log, watcher)
    assert cursor.offset == log.stat().st_size and not cursor.in_long_line
    assert lines == 10_002
    assert "cuda_ecc_uncorrectable" in watcher.state.pattern_ids
    assert watcher.state.signals[-1].line_no == 10_002


async def test_partial_line_waits_and_truncation_restarts(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_bytes(b"first\nsecond without newline")
    runner = LocalRunner()
    got = await read_new_lines(runner, LogCursor(path=str(log)))
    assert [t for _, t in got.lines] == ["first"]
    with log.open("ab") as out:
        out.write(b" ends here\n")
    more = await read_new_lines(runner, got.cursor)
    assert [t for _, t in more.lines] == ["second without newline ends here"]
    log.write_bytes(b"new file\n")  # truncated and rewritten
    again = await read_new_lines(runner, more.cursor)
    assert again.reset and [t for _, t in again.lines] == ["new file"]


async def test_missing_file_is_not_an_error(tmp_path: Path) -> None:
    got = await read_new_lines(LocalRunner(), LogCursor(path=str(tmp_path / "nope.out")))
    assert got.lines == [] and got.at_eof


class RunningAgain:
    """Slurm's view of a requeued job whose next attempt already runs."""

    def __init__(self, out: Path) -> None:
        self.obs = JobObservation(
            job_id=7, state="RUNNING", user=getpass.getuser(), std_out=str(out), restarts=1,
            start_time=datetime.now(UTC),
        )  # fmt: skip

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation:
        return self.obs


async def test_a_truncated_output_file_starts_the_attempt_at_its_first_line(
    tmp_path: Path,
) -> None:
    """A requeue under --open-mode=truncate: the old attempt's 40 lines are gone and the new
    attempt's are numbered from 1, so attribution must read from the top, not from line 40."""
    out = tmp_path / "job.out"
    out.write_bytes(b"attempt 1 started\n" + ERROR)
    key = JobKey(cluster="c", job_id=7, submit_time=datetime(2026, 12, 7, tzinfo=UTC))
    req = WatchRequest(
        job=key, attempt=1, seen_started=True, seen_progress=True, attempt_start_line=40,
        cursor=LogCursor(path=str(out), offset=4000, line_no=40), max_window_seconds=5,
    )  # fmt: skip
    result = await watch_attempt(
        req, RunningAgain(out), LocalRunner(), Registry.load(), lambda _: None
    )
    assert result.outcome == "anomaly" and result.anomaly is not None
    assert result.attempt_start_line == 0
    assert result.cursor is not None and result.cursor.line_no == 2
