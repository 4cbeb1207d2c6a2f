"""Forward pagination by timestamp, shared by the Loki and VictoriaLogs sources.

Each page asks for at most `limit` entries with `page_start <= ts < end`, oldest first. A full
page may stop in the middle of a timestamp, so the next page starts *at* the last timestamp of
the page and skips the entries already delivered there (by fingerprint, kept in the cursor). A
page shorter than `limit` ends the read and the cursor moves to `end`. If more than `limit`
entries share one timestamp the rest of that timestamp cannot be reached: it is skipped with a
warning rather than looping forever.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from resurgo.detect.lines import sanitize_line
from resurgo.sources.base import (
    LabelMapping,
    LogRecord,
    LogStream,
    TimeCursor,
    fingerprint,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TimeEntry:
    ns: int
    line: str
    labels: Mapping[str, str]


def entry_record(entry: TimeEntry, mapping: LabelMapping) -> LogRecord:
    """A time-indexed backend's entry as a LogRecord, labels mapped to their roles."""
    return LogRecord(
        position=entry.ns,
        text=sanitize_line(entry.line),
        labels=entry.labels,
        job_id=entry.labels.get(mapping.job_id),
        host=entry.labels.get(mapping.host),
        stream=entry.labels.get(mapping.stream),
        time_ns=entry.ns,
    )


def paged_stream(
    kind: Literal["loki", "victorialogs"],
    *,
    cursor: TimeCursor | None,
    start_ns: int,
    end_ns: int,
    limit: int,
    fetch: Callable[[int], Awaitable[list[TimeEntry]]],
    to_record: Callable[[TimeEntry], LogRecord],
    max_records: int | None = None,
) -> LogStream:
    """A stream over `[start_ns, end_ns)`; `fetch(page_start)` returns one page, sorted by ns."""
    initial = cursor or TimeCursor(kind=kind, ns=start_ns)

    async def produce(stream: LogStream) -> AsyncIterator[LogRecord]:
        if start_ns >= end_ns:
            return
        page_start = start_ns
        cur_ns = start_ns
        cur_seen: set[str] = set(cursor.seen) if cursor is not None else set()
        count = 0
        while True:
            entries = await fetch(page_start)
            fresh = 0
            for entry in entries:
                if entry.ns < cur_ns or entry.ns >= end_ns:
                    continue
                fp = fingerprint(entry.ns, entry.labels, entry.line)
                if entry.ns == cur_ns and fp in cur_seen:
                    continue
                if max_records is not None and count >= max_records:
                    stream.truncated = True
                    return
                if entry.ns != cur_ns:
                    cur_ns, cur_seen = entry.ns, set()
                cur_seen.add(fp)
                stream.cursor = TimeCursor(kind=kind, ns=cur_ns, seen=tuple(sorted(cur_seen)))
                count += 1
                fresh += 1
                yield to_record(entry)
            if len(entries) < limit:
                break
            last_ns = entries[-1].ns
            if last_ns >= end_ns:
                break
            if last_ns > page_start or fresh:
                page_start = last_ns
                continue
            log.warning(
                "%s: a full page of %d entries at timestamp %d; any more at it are skipped",
                kind,
                limit,
                last_ns,
            )
            page_start = cur_ns = last_ns + 1
            cur_seen = set()
            stream.cursor = TimeCursor(kind=kind, ns=cur_ns)
        stream.cursor = TimeCursor(kind=kind, ns=end_ns)

    return LogStream(produce, initial)
