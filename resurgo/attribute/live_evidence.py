"""Evidence for live attribution from the cluster's configured sources, beyond the output file.

- the remote log source (Loki, VictoriaLogs): the attempt's lines the output file does not hold
  (node-side logs, output the controller cannot read), host-prefixed so the rules can place them;
- Prometheus: the job's nodes' GPU metrics over the attempt (`live_metrics`).

Both are optional: a source that is down, slow or answers nonsense costs at most
`SOURCE_TIMEOUT` and becomes a note saying what the attribution had to do without, never a
failure (attribution then works from the output file alone, as it does without sources).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from resurgo.attribute.live_metrics import job_gpu_metrics
from resurgo.contracts import LogLine
from resurgo.detect.remote_tail import SOURCE_ERRORS, RemoteLogs, attempt_lines
from resurgo.sources import MetricsSettings, PrometheusSource, SourceError

log = logging.getLogger(__name__)

# Attribution heartbeats every few seconds (timeout 15 s): no source may hold it up longer.
SOURCE_TIMEOUT = 10.0
_T = TypeVar("_T")


@dataclass
class LiveEvidence:
    lines: list[LogLine] = field(default_factory=list)
    """Remote log lines the output file does not hold."""
    metrics: list[LogLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What could not be read, for the attribution's summary."""


async def gather_evidence(
    *,
    remote: RemoteLogs | None,
    prometheus: PrometheusSource | None,
    metric_names: MetricsSettings,
    job_id: str,
    nodes: list[str],
    attempt_start: datetime | None,
    now: datetime,
    file_lines: Sequence[LogLine],
    max_lines: int,
) -> LiveEvidence:
    """Query the configured sources concurrently; see the module docstring."""
    found = LiveEvidence()

    async def logs() -> None:
        if remote is not None:
            known = {line.text for line in file_lines}
            read = attempt_lines(remote, job_id, attempt_start, max_lines, skip=known)
            kind = remote.source.kind
            got = await _bounded(kind, read, found.notes, f"{kind} logs unavailable")
            found.lines = got or []

    async def metrics() -> None:
        if prometheus is not None:
            read = job_gpu_metrics(prometheus, metric_names, nodes, attempt_start, now)
            what = "GPU metrics unavailable, attributed from logs alone"
            found.metrics = await _bounded("prometheus", read, found.notes, what) or []

    await asyncio.gather(logs(), metrics())
    return found


async def _bounded(source: str, read: Awaitable[_T], notes: list[str], what: str) -> _T | None:
    """`read`, or None after noting why not (never raises but for cancellation)."""
    try:
        async with asyncio.timeout(SOURCE_TIMEOUT):
            return await read
    except TimeoutError as exc:
        error: Exception = exc
        reason = f"no answer within {SOURCE_TIMEOUT:.0f}s"
    except SourceError as exc:
        error, reason = exc, str(exc)
    except Exception as exc:  # an optional source must never fail the attribution
        log.exception("%s failed during attribution", source)
        error, reason = exc, f"{type(exc).__name__}: {exc}"
    SOURCE_ERRORS.add(1, {"source": source, "error": type(error).__name__})
    notes.append(f"{what} ({reason[:200]})")
    return None
