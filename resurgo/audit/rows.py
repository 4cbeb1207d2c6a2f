"""Audit events to table rows and back: each field checked against the column limits before
anything is written, `data` as compact JSON, datetimes as naive UTC, and batches split into
statements of bounded size."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic_core import PydanticSerializationError

from resurgo.audit.schema import (
    CLUSTER_LEN,
    EVENT_ID_LEN,
    INT32,
    INT64,
    MAX_DATA_BYTES,
    MAX_SUMMARY_BYTES,
    MIN_YEAR,
    PRODUCER_LEN,
    TYPE_LEN,
    WORKFLOW_ID_LEN,
)
from resurgo.contracts import AuditEvent

# Batches are split so one statement stays far below MySQL's max_allowed_packet.
_CHUNK_ROWS = 500
_CHUNK_BYTES = 4 * 1024 * 1024


def to_naive_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def from_naive_utc(value: datetime | str) -> datetime:
    if isinstance(value, str):  # SQLite window-function results come back untyped
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _check_text(event_id: str, name: str, value: str, max_chars: int) -> None:
    if len(value) > max_chars:
        raise ValueError(
            f"audit event {event_id[:80]!r}: {name} is {len(value)} characters, "
            f"the limit is {max_chars}"
        )
    _utf8(event_id, name, value)


def _utf8(event_id: str, name: str, value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"audit event {event_id[:80]!r}: {name} is not valid Unicode: {exc}"
        ) from None


def _check_int(event_id: str, name: str, value: int, bounds: tuple[int, int]) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"audit event {event_id[:80]!r}: {name}={value} is out of range {bounds}")


def row_from_event(e: AuditEvent) -> dict[str, Any]:
    """Validate one event against the column limits and turn it into a row."""
    eid = e.event_id
    if not eid:
        raise ValueError("audit event has an empty event_id")
    _check_text(eid, "event_id", eid, EVENT_ID_LEN)
    _check_text(eid, "cluster", e.cluster, CLUSTER_LEN)
    _check_text(eid, "workflow_id", e.workflow_id, WORKFLOW_ID_LEN)
    _check_text(eid, "type", e.type, TYPE_LEN)
    _check_text(eid, "producer", e.producer, PRODUCER_LEN)
    _check_int(eid, "job_id", e.job_id, INT64)
    if e.attempt is not None:
        _check_int(eid, "attempt", e.attempt, INT32)
    summary_bytes = len(_utf8(eid, "summary", e.summary))
    if summary_bytes > MAX_SUMMARY_BYTES:
        raise ValueError(
            f"audit event {eid[:80]!r}: summary is {summary_bytes} bytes, "
            f"the limit is {MAX_SUMMARY_BYTES}"
        )
    try:
        data_json = json.dumps(
            e.model_dump(mode="json", include={"data"})["data"],
            ensure_ascii=False,
            separators=(",", ":"),
        )
    except (TypeError, ValueError, PydanticSerializationError) as exc:
        raise ValueError(
            f"audit event {eid[:80]!r}: data is not JSON-serializable: {exc}"
        ) from None
    data_bytes = len(_utf8(eid, "data", data_json))
    if data_bytes > MAX_DATA_BYTES:
        raise ValueError(
            f"audit event {eid[:80]!r}: data is {data_bytes} bytes as JSON, "
            f"the limit is {MAX_DATA_BYTES}"
        )
    try:
        at = to_naive_utc(e.at)
    except OverflowError as exc:
        raise ValueError(f"audit event {eid[:80]!r}: at={e.at!r} is out of range") from exc
    if at.year < MIN_YEAR:
        raise ValueError(f"audit event {eid[:80]!r}: at={e.at.isoformat()} is before year 1000")
    return {
        "event_id": eid,
        "cluster": e.cluster,
        "job_id": e.job_id,
        "workflow_id": e.workflow_id,
        "attempt": e.attempt,
        "type": e.type,
        "producer": e.producer,
        "at": at,
        "summary": e.summary,
        "data": data_json,
        "_size": summary_bytes + data_bytes + 1024,
    }


def batches(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Consecutive rows in batches of at most `_CHUNK_ROWS` rows and about `_CHUNK_BYTES`."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        row_size = row.pop("_size")
        if chunk and (len(chunk) >= _CHUNK_ROWS or size + row_size > _CHUNK_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(row)
        size += row_size
    if chunk:
        yield chunk
