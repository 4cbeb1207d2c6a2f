"""Signal sources behind one interface: job logs (file, Loki, VictoriaLogs) and metrics
(Prometheus).

- `LogSource.read(job_id, cursor, since=, until=, max_records=)` → `LogStream`, an async
  iterator of `LogRecord(position, text, labels, job_id, host, stream, time_ns)` whose `cursor`
  (a `FileSourceCursor` or `TimeCursor`, JSON via `dump_cursor` / `load_cursor`) resumes after
  the last record handed out.
- `PrometheusSource`: `query`, `query_range`, `series`, `label_values`, and the helpers
  `xid_errors`, `xid_events`, `gpu_health`, `throughput`, `throughput_range`.
- Errors: `SourceUnavailable` (unreachable, timeouts, 5xx after bounded retries) and
  `SourceContractError` (answered, but not in the documented format, or rejected the query).
- `SignalsSettings` (the `[clusters.<name>.signals]` config section), `build_log_source`,
  `build_prometheus`, `parse_logs_url`.
"""

from resurgo.sources.base import (
    ROLES,
    FileSourceCursor,
    LabelDiscovery,
    LabelMapping,
    LogRecord,
    LogSource,
    LogStream,
    SourceCursor,
    TimeCursor,
    dump_cursor,
    load_cursor,
    parse_duration,
)
from resurgo.sources.config import (
    LogsEndpoint,
    MetricsSettings,
    SignalsSettings,
    build_log_source,
    build_prometheus,
    parse_logs_url,
)
from resurgo.sources.errors import SourceContractError, SourceError, SourceUnavailable
from resurgo.sources.file import FileLogSource, PathPattern
from resurgo.sources.labels import propose_label, rank_candidates
from resurgo.sources.loki import LokiSource
from resurgo.sources.prometheus import (
    GpuHealth,
    GpuReading,
    PrometheusSource,
    Sample,
    Series,
)
from resurgo.sources.victorialogs import VictoriaLogsSource

__all__ = [
    "ROLES",
    "FileLogSource",
    "FileSourceCursor",
    "GpuHealth",
    "GpuReading",
    "LabelDiscovery",
    "LabelMapping",
    "LogRecord",
    "LogSource",
    "LogStream",
    "LogsEndpoint",
    "LokiSource",
    "MetricsSettings",
    "PathPattern",
    "PrometheusSource",
    "Sample",
    "Series",
    "SignalsSettings",
    "SourceContractError",
    "SourceCursor",
    "SourceError",
    "SourceUnavailable",
    "TimeCursor",
    "VictoriaLogsSource",
    "build_log_source",
    "build_prometheus",
    "dump_cursor",
    "load_cursor",
    "parse_duration",
    "parse_logs_url",
    "propose_label",
    "rank_candidates",
]
