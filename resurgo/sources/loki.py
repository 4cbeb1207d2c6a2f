"""The Loki source: polls `GET /loki/api/v1/query_range` (LogQL stream selector, forward).

Request: `query={job_id="42"}` (the job label from the `LabelMapping`; `=~".+"` for all jobs,
plus an optional extra selector such as `cluster="a"`), `start`/`end` in nanoseconds (`start`
inclusive, `end` exclusive, as documented), `direction=forward`, `limit`.

Pagination (`paging.paged_stream`): `limit` counts entries across all streams, in time order; a
full page continues at its last timestamp, skipping entries already delivered there. `end`
trails the clock by `settle` seconds so that entries still being ingested are not skipped.

Response (documented): `{"status": "success", "data": {"resultType": "streams", "result":
[{"stream": {labels}, "values": [["<ns>", "<line>"], ...]}], "stats": {...}}}`; Loki 3 may add
a third element (structured metadata) to each value, which is merged into the labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

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
from resurgo.sources.errors import SourceContractError
from resurgo.sources.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, HttpApi
from resurgo.sources.labels import check_selector_label, quote_string
from resurgo.sources.paging import TimeEntry, entry_record, paged_stream

QUERY_RANGE = "/loki/api/v1/query_range"
LABELS = "/loki/api/v1/labels"
DEFAULT_PAGE_LIMIT = 1000
DEFAULT_LOOKBACK = timedelta(hours=1)
DEFAULT_SETTLE = 1.0


def parse_query_range(data: Any, what: str = "loki query_range") -> list[TimeEntry]:
    """Entries of a `streams` response, sorted by timestamp (stable within equal timestamps)."""
    if not isinstance(data, dict):
        raise SourceContractError(f"{what}: expected a JSON object, got {type(data).__name__}")
    status = data.get("status")
    if status != "success":
        error = data.get("error") or data.get("message") or "no error message"
        raise SourceContractError(f"{what}: status {status!r}: {error}")
    body = data.get("data")
    if not isinstance(body, dict):
        raise SourceContractError(f"{what}: 'data' is missing or not an object")
    kind = body.get("resultType")
    if kind != "streams":
        raise SourceContractError(
            f"{what}: resultType {kind!r}, expected 'streams' (is the query a log selector?)"
        )
    result = body.get("result")
    if not isinstance(result, list):
        raise SourceContractError(f"{what}: 'data.result' is missing or not a list")
    entries: list[TimeEntry] = []
    for i, stream in enumerate(result):
        if not isinstance(stream, dict):
            raise SourceContractError(f"{what}: result[{i}] is not an object")
        labels = stream.get("stream")
        values = stream.get("values")
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise SourceContractError(f"{what}: result[{i}].stream must map strings to strings")
        if not isinstance(values, list):
            raise SourceContractError(f"{what}: result[{i}].values is missing or not a list")
        for j, value in enumerate(values):
            entries.append(_entry(value, labels, f"{what}: result[{i}].values[{j}]"))
    entries.sort(key=lambda e: e.ns)
    return entries


def _entry(value: Any, labels: dict[str, str], where: str) -> TimeEntry:
    if not isinstance(value, list) or len(value) not in (2, 3):
        raise SourceContractError(f'{where}: expected ["<ns>", "<line>"], got {value!r:.80}')
    stamp, line = value[0], value[1]
    if not isinstance(stamp, str) or not stamp.isdigit() or len(stamp) > 20:
        raise SourceContractError(f"{where}: timestamp must be a string of nanoseconds: {stamp!r}")
    if not isinstance(line, str):
        raise SourceContractError(f"{where}: log line must be a string")
    if len(value) == 3:
        meta = value[2]
        if isinstance(meta, dict):
            merged = dict(labels)
            for section in (meta.get("structuredMetadata"), meta.get("parsed"), meta):
                if isinstance(section, dict):
                    merged.update({k: v for k, v in section.items() if isinstance(v, str)})
            labels = merged
    return TimeEntry(int(stamp), line, labels)


def parse_string_list(data: Any, what: str) -> list[str]:
    """`{"status": "success", "data": ["a", "b"]}` (labels / label values endpoints)."""
    if not isinstance(data, dict) or data.get("status") != "success":
        error = data.get("error") if isinstance(data, dict) else None
        raise SourceContractError(f"{what}: not a success response ({error or 'no status'})")
    values = data.get("data", [])
    if values is None:
        return []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SourceContractError(f"{what}: 'data' must be a list of strings")
    return list(values)


class LokiSource:
    """Job logs from Grafana Loki (see the module docstring)."""

    kind = "loki"

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
        check_selector_label(self.mapping.job_id)
        self.selector = selector.strip().strip("{}").strip().rstrip(",")
        if page_limit < 1:
            raise ValueError("page_limit must be >= 1")
        self.page_limit = page_limit
        self.lookback = lookback
        self.settle = settle
        self.api = HttpApi(
            base_url, name="loki", timeout=timeout, retries=retries, headers=headers, client=client
        )

    async def aclose(self) -> None:
        await self.api.aclose()

    def query(self, job_id: str | None) -> str:
        """The LogQL stream selector for one job (or every job carrying the job label)."""
        label = self.mapping.job_id
        matcher = f"{label}={quote_string(job_id)}" if job_id is not None else f'{label}=~".+"'
        return "{" + ", ".join(m for m in (matcher, self.selector) if m) + "}"

    def read(
        self,
        job_id: str | None = None,
        cursor: FileSourceCursor | TimeCursor | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        max_records: int | None = None,
    ) -> LogStream:
        if cursor is not None and not (isinstance(cursor, TimeCursor) and cursor.kind == "loki"):
            raise ValueError(f"a {cursor.kind} cursor cannot resume a loki source")
        now = utcnow()
        start_ns = cursor.ns if cursor else datetime_to_ns(since or now - self.lookback)
        end_ns = datetime_to_ns(until or now - timedelta(seconds=self.settle))
        query = self.query(job_id)

        async def fetch(page_start: int) -> list[TimeEntry]:
            params = {
                "query": query,
                "start": str(page_start),
                "end": str(end_ns),
                "limit": str(self.page_limit),
                "direction": "forward",
            }
            data = await self.api.get_json(QUERY_RANGE, params)
            return parse_query_range(data, f"loki at {self.api.base_url}: query_range")

        return paged_stream(
            "loki",
            cursor=cursor,
            start_ns=start_ns,
            end_ns=end_ns,
            limit=self.page_limit,
            fetch=fetch,
            to_record=self._record,
            max_records=max_records,
        )

    def _record(self, entry: TimeEntry) -> LogRecord:
        return entry_record(entry, self.mapping)

    # ------------------------------------------------------------------ discovery
    async def label_names(self, since: datetime, until: datetime) -> list[str]:
        params = {"start": str(datetime_to_ns(since)), "end": str(datetime_to_ns(until))}
        data = await self.api.get_json(LABELS, params)
        return parse_string_list(data, f"loki at {self.api.base_url}: labels")

    async def label_values(self, name: str, since: datetime, until: datetime) -> list[str]:
        check_selector_label(name)
        params = {"start": str(datetime_to_ns(since)), "end": str(datetime_to_ns(until))}
        data = await self.api.get_json(f"/loki/api/v1/label/{name}/values", params)
        return parse_string_list(data, f"loki at {self.api.base_url}: values of {name}")
