"""The one parser of durations and points in time that every `--since`/`--window` accepts.

A duration is `90s`, `15m`, `1h30m`, `7d`, `2w`, `500ms`, a plain number of seconds, or an ISO 8601
duration (`PT1H30M`, `P7D`, `P1DT12H`). A point in time (`--since`) is a duration (that long ago)
or an ISO 8601 date or date-time (`2026-11-01`, `2026-11-01T08:00:00+01:00`; UTC when naive).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

__all__ = ["parse_duration", "parse_since"]

_COMPACT = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", re.ASCII)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# ISO 8601 durations without years or months (their length depends on the calendar).
_ISO = re.compile(
    r"P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.ASCII,
)
_HINT = "use e.g. 90s, 15m, 1h30m, 7d or PT1H30M"


def _compact(raw: str) -> float | None:
    pos, value = 0, 0.0
    for m in _COMPACT.finditer(raw):
        if m.start() != pos:
            return None
        value += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return value if pos == len(raw) and pos > 0 else None


def _iso(raw: str) -> float | None:
    m = _ISO.fullmatch(raw.upper())
    if m is None or not any(m.groupdict().values()) or raw.upper().endswith("T"):
        return None
    scale = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(float(v) * scale[k] for k, v in m.groupdict().items() if v)


def parse_duration(text: str) -> timedelta:
    """A positive duration (see the module text); `ValueError` says what is accepted."""
    raw = text.strip()
    try:
        seconds: float | None = float(raw)
    except ValueError:
        seconds = _compact(raw) if not raw.upper().startswith("P") else _iso(raw)
    if seconds is None:
        raise ValueError(f"invalid duration {text!r} ({_HINT})")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long") from None


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A duration ago from `now`, or an ISO 8601 date/date-time (UTC when naive)."""
    now = now or datetime.now(UTC)
    try:
        return now - parse_duration(text)
    except ValueError as exc:
        duration_error = exc
    except OverflowError:
        raise ValueError(f"{text!r} reaches before year 1") from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: a duration ago ({_HINT}) or an ISO date such as 2026-11-01"
        ) from duration_error
    return when if when.tzinfo else when.replace(tzinfo=UTC)
