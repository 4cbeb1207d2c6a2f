"""Wake watches when their job's output file changes, from one batched stat per tick.

A watch that read its file four times a second would cost a thread hop (or, over SSH, a remote
command) per job per poll even when nothing was written, which is nearly always. Instead every
watch waits here: one task stats all waited-on files per tick (one thread hop locally, one
command over SSH) and wakes the watches whose file changed size or inode. A watch also wakes
after its timeout, to look at Slurm state and hang bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

FileStat = tuple[int, int] | None  # (size, inode); None when the file does not exist
_UNKNOWN = (-1, -1)
# A file nobody waited on for this long is forgotten (its watch ended or moved elsewhere).
_FORGET_SECONDS = 30.0


class StatRunner(Protocol):
    async def stat_files(self, paths: list[str]) -> dict[str, FileStat]: ...


@dataclass
class _Waiter:
    baseline: FileStat
    woken: asyncio.Future[None]


@dataclass
class _Path:
    stat: FileStat = _UNKNOWN
    waiters: list[_Waiter] = field(default_factory=list)
    wanted_at: float = 0.0


class FileChanges:
    def __init__(self, runner: StatRunner, tick_seconds: float = 0.25) -> None:
        self.runner = runner
        self.tick_seconds = tick_seconds
        self._paths: dict[str, _Path] = {}
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0

    async def wait(self, path: str | None, timeout: float) -> None:
        """Return when `path` changed since the last tick seen before this call, or after
        `timeout` seconds, whichever is first."""
        if path is None:
            await asyncio.sleep(timeout)
            return
        loop = asyncio.get_running_loop()
        entry = self._paths.setdefault(path, _Path())
        entry.wanted_at = loop.time()
        waiter = _Waiter(entry.stat, loop.create_future())
        entry.waiters.append(waiter)
        self._ensure_running()
        try:
            await asyncio.wait_for(asyncio.shield(waiter.woken), timeout)
        except TimeoutError:
            pass
        finally:
            if waiter in entry.waiters:
                entry.waiters.remove(waiter)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="file-changes")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._paths:  # ends when every file is forgotten; restarted on demand
            await asyncio.sleep(self.tick_seconds)
            cutoff = loop.time() - _FORGET_SECONDS
            for path in [
                p for p, e in self._paths.items() if not e.waiters and e.wanted_at < cutoff
            ]:
                del self._paths[path]
            waited = [p for p, entry in self._paths.items() if entry.waiters]
            if not waited:
                continue
            try:
                stats = await self.runner.stat_files(waited)
            except Exception as exc:  # a failed tick must not stop later ones
                log.warning("stat of %d watched files failed: %s", len(waited), exc)
                continue
            self.ticks += 1
            for path in waited:
                entry = self._paths.get(path)
                if entry is None or path not in stats:
                    continue
                entry.stat = stats[path]
                for waiter in entry.waiters:
                    if waiter.baseline != entry.stat and not waiter.woken.done():
                        waiter.woken.set_result(None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
