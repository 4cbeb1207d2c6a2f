"""The pure parts of wiring sources into the live system: following a remote log source without
ever blocking the watch, backing off when it fails, dropping copies of the file's lines, turning
Prometheus readings into the metric lines the rules read, and `kept_training` across sources."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from resurgo.activities.controller import kept_training
from resurgo.attribute.live_metrics import exposition_line
from resurgo.attribute.metrics import findings
from resurgo.contracts import Anomaly, AnomalyKind, Category, LogLine
from resurgo.detect.remote_tail import (
    CLOCK_SLACK,
    RecentLines,
    RemoteLogs,
    RemoteTail,
    attribution_line,
    floor_cursor,
)
from resurgo.sources import (
    FileSourceCursor,
    LabelMapping,
    LogRecord,
    LogStream,
    SourceUnavailable,
    TimeCursor,
    dump_cursor,
)
from resurgo.sources.base import datetime_to_ns

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T0 = datetime_to_ns(START)


class MemorySource:
    """A time-ordered log source in memory (what Loki holds), optionally failing or hanging."""

    kind = "loki"
    mapping = LabelMapping()

    def __init__(self, records: list[LogRecord]) -> None:
        self.records = records
        self.fail = False
        self.hang = asyncio.Event()
        self.hang.set()
        self.reads: list[TimeCursor | None] = []

    def read(
        self,
        job_id: str | None = None,
        cursor: FileSourceCursor | TimeCursor | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        max_records: int | None = None,
    ) -> LogStream:
        assert cursor is None or isinstance(cursor, TimeCursor)
        self.reads.append(cursor)
        start = cursor.ns if cursor else datetime_to_ns(since or START)
        source = self

        async def produce(stream: LogStream) -> AsyncIterator[LogRecord]:
            await source.hang.wait()
            if source.fail:
                raise SourceUnavailable("loki at http://loki: failed after 3 attempt(s)")
            for record in source.records:
                if record.position > start or (cursor is None and record.position == start):
                    stream.cursor = TimeCursor(kind="loki", ns=record.position)
                    yield record
            stream.cursor = TimeCursor(kind="loki", ns=max(start, source.end()))

        return LogStream(produce, cursor or TimeCursor(kind="loki", ns=start))

    def end(self) -> int:
        return max((r.position for r in self.records), default=0)

    async def aclose(self) -> None:
        return None


def record(seconds: float, text: str, host: str | None = "node2") -> LogRecord:
    ns = T0 + int(seconds * 1e9)
    return LogRecord(position=ns, text=text, host=host, time_ns=ns)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def settle(tail: RemoteTail) -> None:
    """Let the read started by the last poll finish (it runs as a background task)."""
    for _ in range(20):
        await asyncio.sleep(0)


def texts(batches: list[tuple[str, list[tuple[int, str]]]]) -> list[tuple[str, str]]:
    return [(source, text) for source, lines in batches for _, text in lines]


async def test_lines_arrive_per_host_and_never_twice() -> None:
    source = MemorySource([record(1, "0: iteration 1", "node1"), record(2, "boom")])
    clock = Clock()
    tail = RemoteTail(RemoteLogs(source, poll_seconds=2), "42", clock=clock)
    assert tail.poll(START) == []  # the first read has only just started
    await settle(tail)
    got = tail.poll(START)
    assert texts(got) == [("loki:node1", "0: iteration 1"), ("loki:node2", "boom")]
    # Not due yet: no new read; when due, the cursor keeps what was delivered from coming back.
    assert tail.poll(START) == [] and len(source.reads) == 1
    clock.t = 2.0
    tail.poll(START)
    await settle(tail)
    assert tail.poll(START) == []
    assert source.reads[-1] == TimeCursor(kind="loki", ns=T0 + 2 * 10**9)


async def test_a_hanging_backend_never_holds_up_the_watch() -> None:
    source = MemorySource([record(1, "boom")])
    source.hang.clear()
    tail = RemoteTail(RemoteLogs(source), "42", clock=Clock())
    for _ in range(5):
        assert tail.poll(START) == []  # returns at once, read still in flight
    tail.stop()
    assert tail.saved_cursor is None  # nothing was handed over, so nothing is skipped later


async def test_watches_failing_together_do_not_retry_in_step() -> None:
    """Jitter: twenty watches losing the source at the same instant read it again at twenty
    different times, each within 80-100 % of the backoff."""
    clock = Clock()
    due: list[float] = []
    for _ in range(20):
        source = MemorySource([])
        source.fail = True
        tail = RemoteTail(RemoteLogs(source, retry_seconds=10), "42", clock=clock)
        tail.poll(START)
        await settle(tail)
        tail.poll(START)  # takes the failed read, schedules the next
        reads = len(source.reads)
        step = 0.0
        while len(source.reads) == reads and step < 20:
            step += 0.05
            clock.t += 0.05
            tail.poll(START)
            await settle(tail)
        clock.t -= step
        due.append(step)
    assert all(8.0 <= d <= 10.0 + 0.05 for d in due), due
    assert len({round(d, 2) for d in due}) > 5, due


async def test_failures_back_off_and_lose_nothing() -> None:
    source = MemorySource([record(1, "first")])
    clock = Clock()
    remote = RemoteLogs(source, poll_seconds=1, retry_seconds=5, max_retry_seconds=12)
    tail = RemoteTail(remote, "42", clock=clock)
    tail.poll(START)
    await settle(tail)
    assert texts(tail.poll(START)) == [("loki:node2", "first")]
    before = tail.saved_cursor
    source.fail = True
    source.records.append(record(3, "written during the outage"))
    clock.t += 1  # the next poll is due
    # Each failure waits longer before the next read: 5 s, 10 s, then at most 12 s, less up to
    # 20 % of jitter.
    for wait in (5, 10, 12, 12):
        tail.poll(START)
        await settle(tail)
        assert tail.poll(START) == []
        reads = len(source.reads)
        clock.t += wait * 0.8 - 0.01
        tail.poll(START)
        assert len(source.reads) == reads  # not yet
        clock.t += wait * 0.2 + 0.01
    assert tail.failures == 4
    assert tail.saved_cursor == before
    source.fail = False
    clock.t += 100
    tail.poll(START)
    await settle(tail)
    assert texts(tail.poll(START)) == [("loki:node2", "written during the outage")]


async def test_copies_of_the_file_lines_are_dropped() -> None:
    source = MemorySource([record(1, "0: iteration 7", "node1"), record(2, "NVRM: Xid 79")])
    tail = RemoteTail(RemoteLogs(source), "42", clock=Clock())
    tail.file_lines([(1, "0: iteration 7")])
    tail.poll(START)
    await settle(tail)
    assert texts(tail.poll(START)) == [("loki:node2", "NVRM: Xid 79")]


def test_recent_lines_are_bounded() -> None:
    recent = RecentLines(size=2)
    recent.add(["a", "b", "a", "c"])
    assert "a" in recent and "c" in recent and "b" not in recent
    recent.add(["d", "e"])
    assert "a" not in recent


async def test_an_attempt_never_reads_before_its_start() -> None:
    old = TimeCursor(kind="loki", ns=T0 - 3600 * 10**9)
    source = MemorySource([record(-60, "previous attempt's crash"), record(5, "this attempt")])
    tail = RemoteTail(RemoteLogs(source), "42", dump_cursor(old), clock=Clock())
    tail.poll(START)
    await settle(tail)
    assert texts(tail.poll(START)) == [("loki:node2", "this attempt")]
    assert source.reads[0] == TimeCursor(kind="loki", ns=datetime_to_ns(START - CLOCK_SLACK))
    assert floor_cursor(old, None) == old


@pytest.mark.parametrize(
    "saved",
    ['{"kind": "victorialogs", "ns": 5}', '{"kind": "file"}', "not json", '{"kind": "loki"}'],
)
def test_a_cursor_the_source_cannot_use_starts_over(saved: str) -> None:
    assert RemoteTail(RemoteLogs(MemorySource([])), "42", saved).cursor is None


def test_attribution_lines_carry_the_host_as_a_prefix() -> None:
    line = attribution_line("victorialogs", record(1, "1: [rank1]: boom"))
    assert line == LogLine(source="victorialogs:node2", line_no=T0 + 10**9,
                           text="node2: 1: [rank1]: boom")  # fmt: skip
    assert attribution_line("loki", record(1, "x", host=None)).text == "x"


def test_rendered_prometheus_readings_are_what_the_rules_read() -> None:
    xid = exposition_line("DCGM_FI_DEV_XID_ERRORS", "node2", "1", 79.0, "GPU-abc")
    hot = exposition_line("DCGM_FI_DEV_GPU_TEMP", 'od"d', "0", 93.0, None)
    assert xid == 'DCGM_FI_DEV_XID_ERRORS{Hostname="node2",gpu="1",UUID="GPU-abc"} 79'
    found = findings([LogLine(source="prometheus", line_no=n, text=t)
                      for n, t in enumerate([xid, hot], 1)])  # fmt: skip
    assert [(f.host, f.category, f.severity, f.what, f.gpu) for f in found] == [
        ("node2", Category.HARDWARE_GPU, "fatal", "Xid 79", "gpu1"),
        ('od\\"d', Category.HARDWARE_GPU, "degraded", "GPU temperature", "gpu0"),
    ]


def test_kept_training_compares_positions_within_one_source() -> None:
    fatal = LogLine(source="loki:node2", line_no=T0 + 5 * 10**9, text="NVRM: Xid 79")
    anomaly = Anomaly(kind=AnomalyKind.CRASH, attempt=0, detected_at=START, summary="x",
                      signals=[fatal])  # fmt: skip
    # File line numbers are small: they say nothing about what came after a Loki timestamp.
    file_progress = [LogLine(source="job.log", line_no=n, text=f"0: iteration {n}")
                     for n in range(1, 5)]  # fmt: skip
    assert not kept_training(anomaly, file_progress)
    later = [LogLine(source="loki:node1", line_no=T0 + (6 + n) * 10**9,
                     text=f"node1: 0: iteration {n}") for n in range(2)]  # fmt: skip
    assert kept_training(anomaly, file_progress + later)
    assert not kept_training(anomaly.model_copy(update={"signals": []}), later)
