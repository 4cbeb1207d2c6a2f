"""What the Loki and VictoriaLogs sources share: a log backend behind an HTTP API whose entries
are indexed by timestamp.

`HttpLogSource` holds the label mapping, the extra selector, the `HttpApi` client and the read
window: from the cursor (or `since`, default `lookback` ago) to `until`, which by default trails
the clock by `settle` seconds so that entries still being ingested are not skipped. Pages are
walked forward by `paging.paged_stream`; a subclass only says how one page is fetched from its
API (`_fetcher`), how its selector is written, and how labels are discovered.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import ClassVar, Literal

import httpx

from resurgo.sources.base import (
    FileSourceCursor,
    LabelMapping,
    LogRecord,
    LogStream,
    TimeCursor,
    datetime_to_ns,
    utcnow,
)
from resurgo.sources.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, HttpApi
from resurgo.sources.paging import TimeEntry, entry_record, paged_stream

DEFAULT_PAGE_LIMIT = 1000
DEFAULT_LOOKBACK = timedelta(hours=1)
DEFAULT_SETTLE = 1.0

Fetch = Callable[[int], Awaitable[list[TimeEntry]]]
"""`fetch(page_start)`: one page of entries from `page_start` (ns, inclusive), sorted by ns."""


class HttpLogSource(ABC):
    """Job logs from a time-indexed HTTP log backend (see the module docstring)."""

    kind: str
    """The source kind; also the name of its HTTP API in error messages."""
    cursor_kind: ClassVar[Literal["loki", "victorialogs"]]
    """The `TimeCursor.kind` of this source (the same as `kind`)."""

    def __init__(
        self,
        base_url: str,
        *,
        mapping: LabelMapping | None = None,
        selector: str = "",
        page_limit: int = DEFAULT_PAGE_LIMIT,
        lookback: timedelta = DEFAULT_LOOKBACK,
        settle: float = DEFAULT_SETTLE,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.mapping = mapping or LabelMapping()
        self.selector = self._clean_selector(selector)
        if page_limit < 1:
            raise ValueError("page_limit must be >= 1")
        self.page_limit = page_limit
        self.lookback = lookback
        self.settle = settle
        self.api = HttpApi(
            base_url,
            name=self.kind,
            timeout=timeout,
            retries=retries,
            headers=headers,
            client=client,
        )

    def _clean_selector(self, selector: str) -> str:
        """The extra selector as written into queries (checks `self.mapping` if needed)."""
        return selector.strip()

    async def aclose(self) -> None:
        await self.api.aclose()

    def read(
        self,
        job_id: str | None = None,
        cursor: FileSourceCursor | TimeCursor | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        max_records: int | None = None,
    ) -> LogStream:
        if cursor is not None and not (
            isinstance(cursor, TimeCursor) and cursor.kind == self.cursor_kind
        ):
            raise ValueError(f"a {cursor.kind} cursor cannot resume a {self.kind} source")
        now = utcnow()
        start_ns = cursor.ns if cursor else datetime_to_ns(since or now - self.lookback)
        end_ns = datetime_to_ns(until or now - timedelta(seconds=self.settle))
        fetch = self._fetcher(job_id, end_ns)
        return paged_stream(
            self.cursor_kind,
            cursor=cursor,
            start_ns=start_ns,
            end_ns=end_ns,
            limit=self.page_limit,
            fetch=fetch,
            to_record=self._record,
            max_records=max_records,
        )

    @abstractmethod
    def _fetcher(self, job_id: str | None, end_ns: int) -> Fetch:
        """How one page of `job_id`'s entries (all jobs when None) before `end_ns` is fetched."""

    def _record(self, entry: TimeEntry) -> LogRecord:
        return entry_record(entry, self.mapping)
