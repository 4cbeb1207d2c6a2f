"""Watches wake on their output file's changes (resurgo/detect/file_changes.py), on real
files through the local runner."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from resurgo.detect.file_changes import FileChanges
from resurgo.slurm.runner import LocalRunner


async def timed_wait(changes: FileChanges, path: Path, timeout: float) -> float:
    start = time.monotonic()
    await changes.wait(str(path), timeout)
    return time.monotonic() - start


async def test_a_write_wakes_the_watch_and_silence_does_not(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_text("iteration 1/\n")
    changes = FileChanges(LocalRunner(), tick_seconds=0.05)
    # The first wait learns the file (it may wake once); after that, silence means timeout.
    await changes.wait(str(log), 1.0)
    assert await timed_wait(changes, log, 0.6) >= 0.55

    async def write_later() -> None:
        await asyncio.sleep(0.2)
        with log.open("a") as handle:
            handle.write("RuntimeError: CUDA error\n")

    writer = asyncio.create_task(write_later())
    took = await timed_wait(changes, log, 5.0)
    await writer
    assert 0.15 <= took < 1.0, took
    await changes.close()


async def test_replacement_truncation_and_late_files_wake_the_watch(tmp_path: Path) -> None:
    log = tmp_path / "late.out"
    changes = FileChanges(LocalRunner(), tick_seconds=0.05)
    await changes.wait(str(log), 0.3)  # missing: learned as missing
    assert await timed_wait(changes, log, 0.4) >= 0.35

    async def after(delay: float, act: object) -> None:
        await asyncio.sleep(delay)
        act()  # type: ignore[operator]

    def replace() -> None:
        (tmp_path / "new").write_text("")
        os.replace(tmp_path / "new", log)

    for act in (
        lambda: log.write_text("first line\n"),  # the file appears
        lambda: log.write_text(""),  # truncated
        replace,  # a new inode of the same size
    ):
        task = asyncio.create_task(after(0.1, act))
        assert await timed_wait(changes, log, 5.0) < 1.0
        await task
        await changes.wait(str(log), 0.2)  # settle on the new state
    await changes.close()


async def test_many_watches_share_one_stat_per_tick(tmp_path: Path) -> None:
    logs = [tmp_path / f"{i}.out" for i in range(200)]
    for log in logs:
        log.write_text("")
    changes = FileChanges(LocalRunner(), tick_seconds=0.1)
    await asyncio.gather(*(changes.wait(str(log), 0.55) for log in logs))
    assert changes.ticks <= 7, "200 waiting watches cost one batched stat per tick"
    await changes.close()
