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

from datetime import datetime
from typing import Any

from resurgo.sources.base import datetime_to_ns
from resurgo.sources.errors import SourceContractError
from resurgo.sources.labels import check_selector_label, quote_string
from resurgo.sources.log_backend import Fetch, HttpLogSource
from resurgo.sources.paging import TimeEntry

QUERY_RANGE = "/loki/api/v1/query_range"
LABELS = "/loki/api/v1/labels"


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


class LokiSource(HttpLogSource):
    """Job logs from Grafana Loki (see the module docstring)."""

    kind = "loki"
    cursor_kind = "loki"

    def _clean_selector(self, selector: str) -> str:
        """Matchers without their braces; the job label must be usable in a stream selector."""
        check_selector_label(self.mapping.job_id)
        return selector.strip().strip("{}").strip().rstrip(",")

    def query(self, job_id: str | None) -> str:
        """The LogQL stream selector for one job (or every job carrying the job label)."""
        label = self.mapping.job_id
        matcher = f"{label}={quote_string(job_id)}" if job_id is not None else f'{label}=~".+"'
        return "{" + ", ".join(m for m in (matcher, self.selector) if m) + "}"

    def _fetcher(self, job_id: str | None, end_ns: int) -> Fetch:
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

        return fetch

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
