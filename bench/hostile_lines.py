"""Event-loop cost of hostile output lines in the watch (issue #12, finding 9).

    .venv/bin/python bench/hostile_lines.py [--repeat 5] [--chunk-kib 1024]

A job can print one line made of every literal the failure registry looks for, so that the
prefilter fires for every entry and every entry's regex runs on the whole line. Measured here,
in the same run:

- per line: decoding + feeding one line to the watcher (`AttemptWatcher.feed_many`, what the
  watch does for every read), for an ordinary Megatron progress line (the baseline), and for the
  hostile line at the old 64 KiB line cap and at the normaliser's cap (`lines.MAX_LINE_BYTES`);
- per chunk: the longest the event loop is blocked while the watch feeds one read of
  `--chunk-kib` KiB of hostile lines, inline (the old path) and through
  `watch_loop.feed_lines` (large chunks scanned on a worker thread).

Each figure is the median of `--repeat` runs, wall clock. Only reports; exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from resurgo.detect.attempt_state import AttemptWatcher  # noqa: E402
from resurgo.detect.lines import MAX_LINE_BYTES, decode_line  # noqa: E402
from resurgo.detect.progress import ProgressParser  # noqa: E402
from resurgo.detect.registry import Registry  # noqa: E402
from resurgo.detect.watch_loop import feed_lines  # noqa: E402

OLD_CAP = 64 * 1024
NOW = datetime(2026, 11, 29, tzinfo=UTC)
ORDINARY = (
    b"0:  iteration     1200/  500000 | consumed samples: 614400 | elapsed time per iteration"
    b" (ms): 1012.3 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 | grad norm: 0.812 |"
)


def hostile_line(registry: Registry, size: int) -> bytes:
    """Every required literal of the registry, repeated up to `size` bytes."""
    literals = " ".join(lit.text for lit in registry._literals).encode()
    return (literals * (size // len(literals) + 1))[:size]


def watcher(registry: Registry) -> AttemptWatcher:
    return AttemptWatcher(registry, ProgressParser(None), hang_timeout=None)


def per_line(registry: Registry, raw: bytes, cap: int, repeat: int) -> float:
    """Median seconds to decode (at `cap`) and feed one line."""
    times = []
    for _ in range(repeat):
        w = watcher(registry)
        start = time.perf_counter()
        w.feed_many([(1, decode_line(raw, max_bytes=cap))], NOW)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def loop_stall(feed: Callable[[], object]) -> float:
    """The longest gap between ticks of a 1 ms ticker while `feed` runs (seconds)."""
    worst = 0.0
    running = True

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while running:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst = max(worst, now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    result = feed()
    if asyncio.iscoroutine(result):
        await result
    running = False
    await task
    return worst


async def chunk_stalls(registry: Registry, chunk_kib: int, repeat: int) -> tuple[float, float]:
    line = decode_line(hostile_line(registry, OLD_CAP))
    lines = [(i, line) for i in range(max(1, chunk_kib * 1024 // (len(line) + 1)))]
    inline, offloaded = [], []
    for _ in range(repeat):
        w = watcher(registry)
        inline.append(await loop_stall(lambda: w.feed_many(lines, NOW)))  # noqa: B023
        w = watcher(registry)
        offloaded.append(await loop_stall(lambda: feed_lines(w, lines, NOW, "job.log")))  # noqa: B023
    return statistics.median(inline), statistics.median(offloaded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk-kib", type=int, default=1024)
    args = parser.parse_args()
    registry = Registry.load()
    registry.scan_chunk(["warm up"])
    hostile = hostile_line(registry, OLD_CAP)
    base = per_line(registry, ORDINARY, OLD_CAP, args.repeat)
    rows = [
        ("ordinary progress line (baseline)", len(ORDINARY), base),
        (f"hostile line, old cap {OLD_CAP // 1024} KiB", OLD_CAP,
         per_line(registry, hostile, OLD_CAP, args.repeat)),
        (f"hostile line, cap {MAX_LINE_BYTES // 1024} KiB (lines.MAX_LINE_BYTES)",
         min(MAX_LINE_BYTES, OLD_CAP), per_line(registry, hostile, MAX_LINE_BYTES, args.repeat)),
    ]  # fmt: skip
    table = Table(title=f"one line, decode + feed (median of {args.repeat})")
    for col in ("line", "bytes scanned", "ms", "x baseline"):
        table.add_column(col, justify="left" if col == "line" else "right")
    for name, size, seconds in rows:
        table.add_row(name, f"{size:,}", f"{seconds * 1e3:.3f}", f"{seconds / base:,.0f}")
    console = Console()
    console.print(table)
    inline, offloaded = asyncio.run(chunk_stalls(registry, args.chunk_kib, args.repeat))
    stalls = Table(title=f"event loop blocked while feeding one {args.chunk_kib} KiB read of "
                   f"hostile lines (median of {args.repeat})")  # fmt: skip
    for col in ("path", "longest stall ms", "x offloaded"):
        stalls.add_column(col, justify="left" if col == "path" else "right")
    stalls.add_row("inline feed_many (old)", f"{inline * 1e3:.1f}", f"{inline / offloaded:.0f}")
    stalls.add_row("watch_loop.feed_lines (thread)", f"{offloaded * 1e3:.1f}", "1")
    console.print(stalls)


if __name__ == "__main__":
    main()
