"""The interface every log source implements, its records and its serialisable cursors.

A source yields `LogRecord`s for one job (or all jobs) since a cursor, through a `LogStream`: an
async iterator whose `cursor` attribute always says where to resume *after the last record
handed out* (and, once the stream is exhausted, after everything the read covered). Cursors are
small pydantic models, so the watch activity can heartbeat them and resume after a crash:

    stream = source.read(job_id="42", cursor=saved)
    async for record in stream:
        handle(record)
    saved = stream.cursor            # JSON-serialisable: dump_cursor(saved)

Positions: for files, the line number in the file; for Loki and VictoriaLogs, the entry's
timestamp in nanoseconds since the epoch.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from resurgo import durations
from resurgo.contracts import LogCursor

NS_PER_SECOND = 1_000_000_000
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LabelMapping(_Frozen):
    """Which backend label (Loki) or field (VictoriaLogs) holds the job id, host and stream."""

    job_id: str = "job_id"
    host: str = "host"
    stream: str = "stream"

    @field_validator("job_id", "host", "stream")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if _LABEL_NAME.fullmatch(value) is None:
            raise ValueError(f"{value!r} is not a usable label name")
        return value

    def role_of(self, name: str) -> str | None:
        """The role (`job_id`, `host`, `stream`) a backend label plays, if any."""
        for role in ROLES:
            if getattr(self, role) == name:
                return role
        return None

    def with_overrides(self, overrides: Mapping[str, str]) -> LabelMapping:
        """A copy with some roles renamed (`{"job_id": "slurm_job_id"}`); unknown roles raise."""
        unknown = sorted(set(overrides) - set(ROLES))
        if unknown:
            raise ValueError(
                f"unknown label role(s) {', '.join(unknown)} (known: {', '.join(ROLES)})"
            )
        return LabelMapping.model_validate({**self.model_dump(), **overrides})


ROLES: tuple[str, ...] = ("job_id", "host", "stream")


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log line with where it came from.

    `labels` are the backend's own labels/fields (for files: `job_id`, `host`, `stream`, `path`,
    `task`); `job_id`, `host` and `stream` are those resolved through the `LabelMapping`.
    """

    position: int
    text: str
    labels: Mapping[str, str] = field(default_factory=dict)
    job_id: str | None = None
    host: str | None = None
    stream: str | None = None
    time_ns: int | None = None

    @property
    def time(self) -> datetime | None:
        return None if self.time_ns is None else ns_to_datetime(self.time_ns)


# ---------------------------------------------------------------------- cursors
class FileSourceCursor(_Frozen):
    """Byte cursors of every file of a file source (keyed by path).

    `logtail` reports one byte cursor per batch of lines. A stream stopped in the middle of a
    batch keeps the cursor of the batch's start in `files` and the last line number delivered in
    `delivered`: the next read re-reads that batch and skips the lines already handed out.
    """

    kind: Literal["file"] = "file"
    files: dict[str, LogCursor] = Field(default_factory=dict)
    delivered: dict[str, int] = Field(default_factory=dict)


class TimeCursor(_Frozen):
    """Resume point of a time-ordered backend (Loki, VictoriaLogs).

    The next read starts at `ns` (inclusive) and skips the entries at exactly `ns` whose
    fingerprints are in `seen` (they were already delivered): entries sharing a timestamp may be
    split across pages or polls, and neither loses nor repeats one.
    """

    kind: Literal["loki", "victorialogs"]
    ns: int = Field(ge=0)
    seen: tuple[str, ...] = ()


SourceCursor = Annotated[FileSourceCursor | TimeCursor, Field(discriminator="kind")]
_CURSOR_ADAPTER: TypeAdapter[FileSourceCursor | TimeCursor] = TypeAdapter(SourceCursor)


def dump_cursor(cursor: FileSourceCursor | TimeCursor) -> str:
    """The cursor as a JSON string."""
    return cursor.model_dump_json()


def load_cursor(data: str | bytes | Mapping[str, object]) -> FileSourceCursor | TimeCursor:
    """Parse a cursor from JSON text or a decoded mapping (ValueError with the reason)."""
    try:
        if isinstance(data, str | bytes):
            return _CURSOR_ADAPTER.validate_json(data)
        return _CURSOR_ADAPTER.validate_python(dict(data))
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
        where = ".".join(str(p) for p in first.get("loc", ()))
        prefix = f"{where}: " if where else ""
        raise ValueError(f"invalid source cursor: {prefix}{first['msg']}") from None


def fingerprint(ns: int, labels: Mapping[str, str], text: str) -> str:
    """A short stable id of one entry (timestamp, stream labels, line) for de-duplication."""
    h = hashlib.blake2b(digest_size=8)
    h.update(str(ns).encode())
    for key in sorted(labels):
        h.update(b"\x00" + key.encode("utf-8", "replace") + b"=")
        h.update(labels[key].encode("utf-8", "replace"))
    h.update(b"\x01" + text.encode("utf-8", "replace"))
    return h.hexdigest()


# ---------------------------------------------------------------------- streams and sources
class LogStream(AsyncIterator[LogRecord]):
    """Async iterator of records whose `cursor` resumes after the last record handed out.

    The producer receives the stream and must set `stream.cursor` before yielding each record
    and once more when it is done.
    """

    def __init__(
        self,
        produce: Callable[[LogStream], AsyncIterator[LogRecord]],
        cursor: FileSourceCursor | TimeCursor,
    ) -> None:
        self.cursor: FileSourceCursor | TimeCursor = cursor
        self.truncated = False
        """Set when the read stopped at its record limit (more is available from `cursor`)."""
        self._it = produce(self)

    def __aiter__(self) -> LogStream:
        return self

    async def __anext__(self) -> LogRecord:
        return await self._it.__anext__()

    async def collect(self, limit: int | None = None) -> list[LogRecord]:
        """Consume up to `limit` records (all when None); the cursor then resumes after them."""
        out: list[LogRecord] = []
        if limit is not None and limit <= 0:
            return out
        async for record in self:
            out.append(record)
            if limit is not None and len(out) >= limit:
                break
        return out


@runtime_checkable
class LogSource(Protocol):
    """Where a job's log lines come from (file, Loki, VictoriaLogs)."""

    kind: str
    mapping: LabelMapping

    def read(
        self,
        job_id: str | None = None,
        cursor: FileSourceCursor | TimeCursor | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        max_records: int | None = None,
    ) -> LogStream:
        """New records of `job_id` (all jobs when None) after `cursor` (or from `since`)."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LabelDiscovery(Protocol):
    """Label introspection (Loki and VictoriaLogs), used by `resurgo signals check`."""

    async def label_names(self, since: datetime, until: datetime) -> list[str]: ...

    async def label_values(self, name: str, since: datetime, until: datetime) -> list[str]: ...


# ---------------------------------------------------------------------- time helpers
def utcnow() -> datetime:
    return datetime.now(UTC)


def datetime_to_ns(value: datetime) -> int:
    """Nanoseconds since the epoch (naive datetimes are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * NS_PER_SECOND + delta.microseconds * 1000


def ns_to_datetime(ns: int) -> datetime:
    seconds, rest = divmod(ns, NS_PER_SECOND)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})",
    re.ASCII,
)


def parse_rfc3339_ns(text: str) -> int:
    """`2025-06-01T12:00:00.123456789Z` → nanoseconds since the epoch (ValueError if not)."""
    m = _RFC3339.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text[:60]!r}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    fraction = (m.group(7) or "").ljust(9, "0")
    zone = m.group(8)
    base = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    ns = datetime_to_ns(base) + int(fraction or "0")
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
        ns -= sign * offset * NS_PER_SECOND
    return ns


def format_rfc3339_ns(ns: int) -> str:
    """Nanoseconds since the epoch → `2025-06-01T12:00:00.123456789Z`."""
    seconds, rest = divmod(ns, NS_PER_SECOND)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{rest:09d}Z"


def parse_duration(text: str) -> float:
    """`15m`, `1h30m`, `90s`, `2d`, `500ms`, `PT1H` or a plain number of seconds → seconds (> 0).

    The one duration parser (`resurgo.durations`), so `--window` reads like every `--since`."""
    return durations.parse_duration(text).total_seconds()
