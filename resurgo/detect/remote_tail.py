"""Follow one job's lines in a remote log source (Loki, VictoriaLogs) while the watch runs.

The output-file tail stays the watch's first input; the remote source adds what only it holds
(node-side logs, output the controller cannot read). Lines the file tail already fed arrive
again through the remote source when both carry the job's output: they are dropped, so every
signal is counted once.

The watch must never wait on the backend: each read runs as a background task whose records the
watch loop picks up on a later poll, so a slow or dead Loki cannot delay the Slurm-state checks
or the heartbeat. A failed read is logged, counted and retried with backoff and jitter. The
cursor only moves past records handed to the watcher, so an outage loses nothing the backend
still holds, and a retried watch resumes from the heartbeated cursor without repeating a line.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby

from opentelemetry import metrics

from resurgo.contracts import LogLine
from resurgo.sources import (
    LogRecord,
    LogSource,
    SignalsSettings,
    SourceError,
    TimeCursor,
    build_log_source,
    dump_cursor,
    load_cursor,
    parse_logs_url,
)
from resurgo.sources.base import datetime_to_ns

log = logging.getLogger(__name__)

# Slurm's StartTime has second resolution and node clocks drift a little: lines stamped this
# long before the attempt's start still count as the attempt's.
CLOCK_SLACK = timedelta(seconds=2)
# How many of the file tail's latest lines are remembered to recognise their remote copies:
# the remote copy trails the file by the backend's ingestion delay plus one poll (a few
# seconds). Past a burst this long a copy may get through: a repeated signal, nothing lost.
RECENT_FILE_LINES = 2048

_meter = metrics.get_meter("resurgo.activities")
SOURCE_ERRORS = _meter.create_counter(
    "resurgo.signals.source_errors", unit="{error}",
    description="Failed reads of a remote log source or of Prometheus, by source and error type",
)  # fmt: skip


@dataclass(frozen=True)
class RemoteLogs:
    """A cluster's remote log source and how the watch polls it."""

    source: LogSource
    poll_seconds: float = 2.0
    retry_seconds: float = 5.0
    max_retry_seconds: float = 60.0
    max_records: int = 5000
    """Per read: a backlog is consumed in several reads, each handing its lines over at once."""


def remote_logs(settings: SignalsSettings | None) -> RemoteLogs | None:
    """The cluster's Loki or VictoriaLogs source, if `signals.logs` names one.

    A `file://` pattern is left out: the watch already tails the job's output file itself.
    """
    if settings is None or settings.logs is None:
        return None
    if parse_logs_url(settings.logs).kind == "file":
        return None
    return RemoteLogs(build_log_source(settings))


def source_name(kind: str, record: LogRecord) -> str:
    """Where a record came from, as a `LogLine.source`: `loki:node2` (`loki` without a host)."""
    return f"{kind}:{record.host}" if record.host else kind


def attribution_line(kind: str, record: LogRecord) -> LogLine:
    """A record as attribution reads it: prefixed with its host (`node2: text`), which
    attribution's topology takes as the line's node, like a pdsh/clush-prefixed log."""
    text = f"{record.host}: {record.text}" if record.host else record.text
    return LogLine(source=source_name(kind, record), line_no=record.position, text=text)


def floor_cursor(cursor: TimeCursor, since: datetime | None) -> TimeCursor:
    """The cursor moved up to `since` (an attempt never reads the previous attempt's lines)."""
    if since is None:
        return cursor
    floor = datetime_to_ns(since)
    return cursor if cursor.ns >= floor else TimeCursor(kind=cursor.kind, ns=floor)


class RecentLines:
    """The last `size` lines the file tail fed, to drop their copies from the remote source.

    Only hashes are kept: a line may be 64 KiB, and every watch of the controller has one.
    """

    def __init__(self, size: int = RECENT_FILE_LINES) -> None:
        self._size = size
        self._order: deque[int] = deque()
        self._count: Counter[int] = Counter()

    def add(self, texts: Iterable[str]) -> None:
        for text in texts:
            key = hash(text)
            self._order.append(key)
            self._count[key] += 1
            if len(self._order) > self._size:
                old = self._order.popleft()
                self._count[old] -= 1
                if not self._count[old]:
                    del self._count[old]

    def __contains__(self, text: object) -> bool:
        return hash(text) in self._count


@dataclass
class _Read:
    records: list[LogRecord]
    cursor: TimeCursor | None
    truncated: bool = False
    error: Exception | None = None


class RemoteTail:
    """One watch's follower of its job in the remote source (see the module docstring)."""

    def __init__(
        self,
        remote: RemoteLogs,
        job_id: str,
        saved_cursor: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.remote = remote
        self.job_id = job_id
        self.cursor = _usable_cursor(remote.source.kind, saved_cursor)
        self.clock = clock
        self.failures = 0
        self.recent = RecentLines()
        self._task: asyncio.Task[_Read] | None = None
        self._next_at = 0.0
        self._delay = 0.0

    @property
    def saved_cursor(self) -> str | None:
        """The cursor as the watch carries it (checkpoint, result, next request)."""
        return dump_cursor(self.cursor) if self.cursor is not None else None

    def file_lines(self, lines: Sequence[tuple[int, str]]) -> None:
        """Lines the file tail fed to the watcher: their remote copies will be dropped."""
        self.recent.add(text for _, text in lines)

    def poll(self, attempt_start: datetime | None) -> list[tuple[str, list[tuple[int, str]]]]:
        """New lines of the job as `(source, [(position, text)])` batches, oldest first.

        Never waits: it hands over what the last finished read got and starts the next read when
        one is due. Nothing from before `attempt_start` is read (earlier attempts' lines).
        """
        got: list[LogRecord] = []
        if self._task is not None and self._task.done():
            got = self._finish(self._task.result())
            self._task = None
        if self._task is None and self.clock() >= self._next_at:
            self._task = asyncio.create_task(self._read(attempt_since(attempt_start)))
        kind = self.remote.source.kind
        fresh = [r for r in got if r.text not in self.recent]
        return [
            (name, [(r.position, r.text) for r in batch])
            for name, batch in groupby(fresh, key=lambda r: source_name(kind, r))
        ]

    def stop(self) -> None:
        """Abandon a read in flight (its records were not handed over: the cursor is before
        them, so the next watch reads them again)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _read(self, since: datetime | None) -> _Read:
        cursor = floor_cursor(self.cursor, since) if self.cursor is not None else None
        records: list[LogRecord] = []
        stream = None
        try:
            stream = self.remote.source.read(
                self.job_id, cursor, since=since, max_records=self.remote.max_records
            )
            async for record in stream:
                records.append(record)
            return _Read(records, _time_cursor(stream.cursor), stream.truncated)
        except Exception as exc:  # the source is optional: no failure of it may end the watch
            # Records handed out before the failure are kept, with the cursor right after them.
            after = _time_cursor(stream.cursor) if stream is not None else cursor
            return _Read(records, after, error=exc)

    def _finish(self, read: _Read) -> list[LogRecord]:
        if read.cursor is not None:
            self.cursor = read.cursor
        if read.error is None:
            self._delay = 0.0
            self._next_at = self.clock() + (0.0 if read.truncated else self.remote.poll_seconds)
            return read.records
        self.failures += 1
        self._delay = min(
            max(self._delay * 2, self.remote.retry_seconds), self.remote.max_retry_seconds
        )
        # Jitter (80-100 % of the backoff): the watches of every job on a cluster lose the
        # source at the same moment, and must not come back to it in step. This is not a stamina
        # retry: poll() never waits, it only decides whether the next read is due.
        wait = self._delay * random.uniform(0.8, 1.0)
        self._next_at = self.clock() + wait
        kind = self.remote.source.kind
        SOURCE_ERRORS.add(1, {"source": kind, "error": type(read.error).__name__})
        if isinstance(read.error, SourceError):
            log.warning(
                "job %s: %s (failure %d); still watching the output file, retrying in %.0fs",
                self.job_id, read.error, self.failures, wait,
            )  # fmt: skip
        else:
            log.error(
                "job %s: reading %s failed (failure %d); still watching the output file",
                self.job_id, kind, self.failures, exc_info=read.error,
            )  # fmt: skip
        return read.records


def attempt_since(attempt_start: datetime | None) -> datetime | None:
    """Where an attempt's remote lines start: its Slurm StartTime, less the clock slack."""
    return attempt_start - CLOCK_SLACK if attempt_start is not None else None


def _time_cursor(cursor: object) -> TimeCursor | None:
    return cursor if isinstance(cursor, TimeCursor) else None


def _usable_cursor(kind: str, saved: str | None) -> TimeCursor | None:
    if saved is None:
        return None
    try:
        cursor = load_cursor(saved)
    except ValueError as exc:
        log.warning("ignoring a saved %s cursor: %s", kind, exc)
        return None
    if not isinstance(cursor, TimeCursor) or cursor.kind != kind:
        # The cluster's log source changed since the cursor was saved.
        log.warning("ignoring a saved %s cursor for a %s source", cursor.kind, kind)
        return None
    return cursor


async def attempt_lines(
    remote: RemoteLogs,
    job_id: str,
    attempt_start: datetime | None,
    limit: int,
    *,
    skip: Container[str] = (),
) -> list[LogLine]:
    """The attempt's records (at most `limit`, oldest first) as attribution lines, leaving out
    those whose text is in `skip` (the lines the output file already gave).

    Raises what the source raises (SourceUnavailable, SourceContractError).
    """
    stream = remote.source.read(job_id, since=attempt_since(attempt_start), max_records=limit)
    kind = remote.source.kind
    return [attribution_line(kind, r) async for r in stream if r.text not in skip]
