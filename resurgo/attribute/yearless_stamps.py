"""Time stamps that carry a month and a day but no year, dated from the job's own record.

Two loggers common in training output print no year:
- glog and absl (TensorFlow, JAX, PyTorch's C++ side, Accelerate under absl): a severity
  letter, then `mmdd hh:mm:ss.uuuuuu` (google/glog, `LogMessage` prefix format:
  `I0519 10:54:30.600000 40112 train.py:170] ...`);
- vLLM's logger (vllm/logger.py, `%(levelname)s %(asctime)s` with `_DATE_FORMAT = "%m-%d
  %H:%M:%S"`): `INFO 09-21 06:38:07 [loggers.py:127] ...`, which RL trainers relay.

The year is the one of a reference time of the same job (Slurm's start, a dated kill line); a
stamp more than half a year from the reference belongs to the year before or after (a run
across New Year).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

_GLOG = re.compile(
    r"(?<![\w.])[IWEF](?P<mon>[01]\d)(?P<day>[0-3]\d) (?P<h>[0-2]\d):(?P<m>[0-5]\d):(?P<s>[0-5]\d)"
    r"(?:\.\d{1,9})?\s"
)
_LEVEL_MONTH_DAY = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<mon>[01]\d)-(?P<day>[0-3]\d) "
    r"(?P<h>[0-2]\d):(?P<m>[0-5]\d):(?P<s>[0-5]\d)\b"
)
WITHIN = 160  # the stamp heads the line, after a launcher's or an actor's prefix
_HALF_YEAR = timedelta(days=183)


def yearless_time(text: str, reference: datetime) -> datetime | None:
    """The glog or vLLM stamp near the start of `text`, dated in `reference`'s year (or the
    one before or after it, whichever puts it closer); None without one."""
    head = text[:WITHIN]
    m = _GLOG.search(head) if any(c in head for c in "IWEF") else None
    if m is None and "-" in head:
        m = _LEVEL_MONTH_DAY.search(head)
    if m is None:
        return None
    try:
        found = reference.replace(
            month=int(m["mon"]), day=int(m["day"]), hour=int(m["h"]), minute=int(m["m"]),
            second=int(m["s"]), microsecond=0, tzinfo=None,
        )  # fmt: skip
    except ValueError:
        return None  # (not a date: `E1332 ...`, 02-30)
    ref = reference.replace(tzinfo=None)
    try:
        if found - ref > _HALF_YEAR:
            found = found.replace(year=found.year - 1)
        elif ref - found > _HALF_YEAR:
            found = found.replace(year=found.year + 1)
    except ValueError:
        return None  # (29 February of a year without one)
    return found
