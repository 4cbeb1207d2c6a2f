"""Reading job output: garbage, binary junk and a 50 MB line neither crash the reader nor hide
the real error line that follows them."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

from resurgo.contracts import LogCursor
from resurgo.detect.attempt_state import AttemptWatcher
from resurgo.detect.logtail import MAX_LINE_BYTES, read_new_lines, read_until_eof
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry
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
