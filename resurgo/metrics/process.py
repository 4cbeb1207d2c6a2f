"""Facts counted by the process where they happen: Slurm command errors, source errors and the
circuit breaker's state.

Plain Python (no prometheus_client import): the Slurm runner and the sources count into the one
`PROCESS` instance on every command, and a short-lived CLI command that never serves metrics
must not pay for the Prometheus library. Whichever registry serves `/metrics` in the process
(worker, controller, watchdog, API) registers `PROCESS` as a collector.

Label values are bounded by Resurgo itself (a Slurm program name, a source kind, a configured
cluster name), never taken from a job's or a user's text.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric


class ProcessCounters:
    """Counters and the breaker gauge of this process; safe to update from any thread."""

    def __init__(self) -> None:
        # Increments come from the event loop, scrapes from the HTTP server's thread.
        self._lock = threading.Lock()
        self._slurm: dict[str, int] = {}
        self._sources: dict[str, int] = {}
        # Per cluster: until when (epoch seconds) the breaker refuses new nodes; 0: closed.
        self._breaker: dict[str, float] = {}

    def slurm_command_failed(self, command: str) -> None:
        """A Slurm command exited non-zero, timed out or could not be started."""
        with self._lock:
            self._slurm[command] = self._slurm.get(command, 0) + 1

    def source_failed(self, source: str) -> None:
        """A read of an external log/metric source failed (after its retries)."""
        with self._lock:
            self._sources[source] = self._sources.get(source, 0) + 1

    def breaker_checked(self, cluster: str, open_until: datetime | None) -> None:
        """The breaker of `cluster` was just evaluated: it refuses new nodes until
        `open_until` (None: it is closed). Kept as a deadline so the gauge falls back to 0 when
        the window passes, even if nothing asks the breaker again."""
        with self._lock:
            self._breaker[cluster] = open_until.timestamp() if open_until else 0.0

    def slurm_command_errors(self, command: str) -> int:
        with self._lock:
            return self._slurm.get(command, 0)

    def source_errors(self, source: str) -> int:
        with self._lock:
            return self._sources.get(source, 0)

    def breaker_open(self, cluster: str, now: float | None = None) -> bool:
        with self._lock:
            until = self._breaker.get(cluster, 0.0)
        return (time.time() if now is None else now) < until

    def collect(self) -> Iterator[Metric]:
        """Prometheus collector protocol (`CollectorRegistry.register(PROCESS)`)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            slurm, sources, breaker = dict(self._slurm), dict(self._sources), dict(self._breaker)
        now = time.time()
        errors = CounterMetricFamily(
            "resurgo_slurm_command_errors",
            "Slurm commands that exited non-zero, timed out or could not be started",
            labels=["command"],
        )
        for command, n in sorted(slurm.items()):
            errors.add_metric([command], n)
        yield errors
        failed = CounterMetricFamily(
            "resurgo_source_errors",
            "failed reads of an external log/metric source (after retries)",
            labels=["source"],
        )
        for source, n in sorted(sources.items()):
            failed.add_metric([source], n)
        yield failed
        gauge = GaugeMetricFamily(
            "resurgo_breaker_open",
            "1 while the cluster's circuit breaker refuses remediating another node",
            labels=["cluster"],
        )
        for cluster, until in sorted(breaker.items()):
            gauge.add_metric([cluster], 1.0 if now < until else 0.0)
        yield gauge


PROCESS = ProcessCounters()

__all__ = ["PROCESS", "ProcessCounters"]
