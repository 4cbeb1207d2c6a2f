"""The VictoriaLogs source: polls `GET /select/logsql/query` with a LogsQL time filter.

Request: `query=job_id:="42" _time:[<start>, <end>) | sort by (_time) | limit <n>` (the job field
from the `LabelMapping`; `job_id:*` for every job; an optional extra filter such as
`{cluster="a"}` is prepended), timestamps in RFC 3339 with nanoseconds. `start`/`end` are also
passed as query args. Without the `sort` pipe results are unordered, and the `limit` *arg*
would return the most recent entries, so the pipes are used for forward paging.

Response (documented): JSON lines, one object per entry, e.g.
`{"_msg":"...","_stream":"{host=\\"node1\\",job_id=\\"42\\"}","_stream_id":"...",
"_time":"2025-06-01T12:00:00.123456789Z","job_id":"42","host":"node1"}`. Labels are the
`_stream` fields plus every other string field that does not start with `_`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from resurgo.sources.base import datetime_to_ns, format_rfc3339_ns, parse_rfc3339_ns
from resurgo.sources.errors import SourceContractError
from resurgo.sources.http import decode_json
from resurgo.sources.labels import parse_stream_labels, quote_string
from resurgo.sources.log_backend import Fetch, HttpLogSource
from resurgo.sources.paging import TimeEntry

QUERY = "/select/logsql/query"
FIELD_NAMES = "/select/logsql/field_names"
FIELD_VALUES = "/select/logsql/field_values"
_PLAIN_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def field_name(name: str) -> str:
    """A field name as written in LogsQL (quoted when it holds special characters)."""
    return name if _PLAIN_FIELD.fullmatch(name) else quote_string(name)


def parse_query_lines(text: str, what: str = "victorialogs query") -> list[TimeEntry]:
    """Entries of a JSON-lines response, sorted by `_time` (stable for equal times)."""
    entries: list[TimeEntry] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        obj = decode_json(raw, f"{what}: line {n}")
        if not isinstance(obj, dict):
            raise SourceContractError(f"{what}: line {n} is not a JSON object")
        entries.append(parse_entry(obj, f"{what}: line {n}"))
    entries.sort(key=lambda e: e.ns)
    return entries


def parse_entry(obj: Mapping[str, Any], where: str) -> TimeEntry:
    stamp = obj.get("_time")
    if not isinstance(stamp, str):
        raise SourceContractError(f"{where}: '_time' is missing or not a string")
    try:
        ns = parse_rfc3339_ns(stamp)
    except ValueError as exc:
        raise SourceContractError(f"{where}: {exc}") from None
    message = obj.get("_msg", "")
    if not isinstance(message, str):
        raise SourceContractError(f"{where}: '_msg' is not a string")
    labels: dict[str, str] = {}
    stream = obj.get("_stream")
    if stream is not None:
        if not isinstance(stream, str):
            raise SourceContractError(f"{where}: '_stream' is not a string")
        try:
            labels.update(parse_stream_labels(stream))
        except ValueError as exc:
            raise SourceContractError(f"{where}: '_stream': {exc}") from None
    for key, value in obj.items():
        if not key.startswith("_") and isinstance(value, str):
            labels[key] = value
    return TimeEntry(ns, message, labels)


def parse_values(data: Any, what: str) -> list[tuple[str, int]]:
    """`{"values": [{"value": "host", "hits": 12}, ...]}` → [(value, hits)]."""
    if not isinstance(data, dict) or not isinstance(data.get("values"), list):
        raise SourceContractError(f"{what}: expected an object with a 'values' list")
    out: list[tuple[str, int]] = []
    for i, item in enumerate(data["values"]):
        if not isinstance(item, dict) or not isinstance(item.get("value"), str):
            raise SourceContractError(f"{what}: values[{i}] has no string 'value'")
        hits = item.get("hits", 0)
        out.append((item["value"], hits if isinstance(hits, int) else 0))
    return out


class VictoriaLogsSource(HttpLogSource):
    """Job logs from VictoriaLogs (see the module docstring)."""

    kind = "victorialogs"
    cursor_kind = "victorialogs"

    def filter(self, job_id: str | None) -> str:
        """The LogsQL filter selecting one job (or every entry carrying the job field)."""
        name = field_name(self.mapping.job_id)
        job = f"{name}:={quote_string(job_id)}" if job_id is not None else f"{name}:*"
        return " ".join(p for p in (self.selector, job) if p)

    def query(self, job_id: str | None, start_ns: int, end_ns: int) -> str:
        window = f"_time:[{format_rfc3339_ns(start_ns)}, {format_rfc3339_ns(end_ns)})"
        return f"{self.filter(job_id)} {window} | sort by (_time) | limit {self.page_limit}"

    def _fetcher(self, job_id: str | None, end_ns: int) -> Fetch:
        async def fetch(page_start: int) -> list[TimeEntry]:
            params = {
                "query": self.query(job_id, page_start, end_ns),
                "start": format_rfc3339_ns(page_start),
                "end": format_rfc3339_ns(end_ns),
            }
            response = await self.api.get(QUERY, params)
            return parse_query_lines(response.text, f"victorialogs at {self.api.base_url}: query")

        return fetch

    # ------------------------------------------------------------------ discovery
    def _window(self, since: datetime, until: datetime) -> dict[str, str]:
        return {
            "query": self.selector or "*",
            "start": format_rfc3339_ns(datetime_to_ns(since)),
            "end": format_rfc3339_ns(datetime_to_ns(until)),
        }

    async def label_names(self, since: datetime, until: datetime) -> list[str]:
        data = await self.api.get_json(FIELD_NAMES, self._window(since, until))
        values = parse_values(data, f"victorialogs at {self.api.base_url}: field_names")
        return [name for name, _ in values]

    async def label_values(self, name: str, since: datetime, until: datetime) -> list[str]:
        params = {**self._window(since, until), "field": name, "limit": "1000"}
        data = await self.api.get_json(FIELD_VALUES, params)
        values = parse_values(data, f"victorialogs at {self.api.base_url}: values of {name}")
        return [value for value, _ in values if value]
