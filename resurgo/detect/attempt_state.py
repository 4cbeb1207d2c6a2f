"""Per-attempt detection state: fed log lines and clock ticks, it says when something is wrong.

Pure (no I/O): the watch activity feeds it; tests feed it directly. Its state is small and
serialisable so the activity can heartbeat it and resume after a crash without losing signals.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from statistics import median

from pydantic import BaseModel, Field

from resurgo.contracts import AnomalyKind, LogLine, StragglerThresholds
from resurgo.detect.progress import ProgressParser, parse_rank_timing, parse_step_time
from resurgo.detect.registry import PatternMatch, Registry

MAX_SIGNALS = 40
LEARNED_HANG_FACTOR = 5.0
LEARNED_HANG_FLOOR = timedelta(seconds=60)
LEARNED_HANG_CEILING = timedelta(minutes=30)
LEARNED_HANG_WARMUP = 5
# Before the first progress line, imports, rendezvous and checkpoint loading may legitimately
# take long: silence then counts as a hang only past this (or the explicit bound, if longer).
STARTUP_HANG_BOUND = timedelta(minutes=10)

_RESUMED = re.compile(
    r"(?:resum\w*|loaded checkpoint|restor\w*)\b.{0,80}?\b(?:iteration|iter|step)[\s=:]+(\d+)",
    re.IGNORECASE,
)


def is_checkpoint_failure(pattern_id: str) -> bool:
    """Saving a checkpoint failed (loading one is a different story): the registry tags it."""
    registry = Registry.default()
    return pattern_id in registry and "checkpoint_save" in registry.get(pattern_id).tags


class WatchState(BaseModel):
    """Everything the watcher knows about the current attempt (heartbeated)."""

    signals: list[LogLine] = Field(default_factory=list)
    pattern_ids: list[str] = Field(default_factory=list)
    first_fatal_at: datetime | None = None
    fatal_kind: AnomalyKind | None = None
    first_iteration: int | None = None
    first_progress_line: int | None = None
    last_iteration: int | None = None
    last_progress_at: datetime | None = None
    progress_count: int = 0
    max_interval_s: float = 0.0
    resumed_from: int | None = None
    checkpoint_failure: bool = False
    # Recent per-node step times (ms), newest last, bounded by the straggler window.
    step_times: dict[str, list[float]] = Field(default_factory=dict)
    # Job-wide time per iteration from progress lines: the first window after warm-up is the
    # job's own baseline, `recent_step_ms` the latest window.
    baseline_step_ms: list[float] = Field(default_factory=list)
    recent_step_ms: list[float] = Field(default_factory=list)


class AttemptWatcher:
    def __init__(
        self,
        registry: Registry,
        progress: ProgressParser,
        *,
        hang_timeout: float | None,
        state: WatchState | None = None,
        straggler: StragglerThresholds | None = None,
    ) -> None:
        self.registry = registry
        self.progress = progress
        self.hang_timeout = hang_timeout
        self.state = state or WatchState()
        self.straggler = straggler

    def feed(self, line_no: int, text: str, now: datetime, source: str = "job.log") -> None:
        self._feed(line_no, text, now, source, None)

    def feed_many(
        self, lines: Sequence[tuple[int, str]], now: datetime, source: str = "job.log"
    ) -> None:
        """`feed` for each `(line_no, text)` in order; the registry scans them as one chunk."""
        found = dict(self.registry.scan_chunk([text for _, text in lines]))
        for index, (line_no, text) in enumerate(lines):
            self._feed(line_no, text, now, source, found.get(index, []))

    def _feed(
        self,
        line_no: int,
        text: str,
        now: datetime,
        source: str,
        scanned: list[PatternMatch] | None,
    ) -> None:
        """`scanned`: `registry.scan(text)` if already known (None: scan here if needed)."""
        st = self.state
        if self.straggler is not None and (timing := parse_rank_timing(text)) is not None:
            window = st.step_times.setdefault(timing.node, [])
            window.append(timing.ms)
            del window[: -self.straggler.window]
            return
        iteration = self.progress.parse(text)
        if iteration is not None and self.straggler is not None:
            self._track_throughput(text)
        if iteration is not None:
            if st.first_iteration is None:
                st.first_iteration = iteration
                st.first_progress_line = line_no
            elif st.last_progress_at is not None and st.progress_count >= 1:
                gap = (now - st.last_progress_at).total_seconds()
                if st.progress_count >= LEARNED_HANG_WARMUP:
                    st.max_interval_s = max(st.max_interval_s, gap)
            st.last_iteration = iteration
            st.last_progress_at = now
            st.progress_count += 1
            return
        if st.resumed_from is None:
            resumed = _RESUMED.search(text)
            if resumed:
                st.resumed_from = int(resumed.group(1))
        if scanned is None:
            scanned = self.registry.scan(text)
        matches = [m for m in scanned if m.role in ("root", "cascade")]
        if not matches:
            return
        if len(st.signals) < MAX_SIGNALS:
            st.signals.append(LogLine(source=source, line_no=line_no, text=text[:2000]))
        for match in matches:
            if is_checkpoint_failure(match.id):
                st.checkpoint_failure = True
            if match.id not in st.pattern_ids:
                st.pattern_ids.append(match.id)
        fatal = next((m for m in matches if m.severity == "fatal"), None)
        if fatal is not None and st.first_fatal_at is None:
            st.first_fatal_at = now
            st.fatal_kind = AnomalyKind(fatal.kind)

    def hang_bound(self) -> timedelta | None:
        """How long without progress counts as a hang (explicit, else learned, else unknown)."""
        if self.hang_timeout is not None:
            return timedelta(seconds=self.hang_timeout)
        st = self.state
        if st.progress_count <= LEARNED_HANG_WARMUP or st.max_interval_s <= 0:
            return None
        learned = timedelta(seconds=st.max_interval_s * LEARNED_HANG_FACTOR)
        return min(max(learned, LEARNED_HANG_FLOOR), LEARNED_HANG_CEILING)

    def hung(self, now: datetime, quiet_since: datetime | None) -> bool:
        """No progress for longer than the bound, counted from the last progress line or, when
        none was seen by this watch, from `quiet_since` (the later of job start and watch start,
        so a new watch never re-reports a hang it has not itself observed)."""
        bound = self.hang_bound()
        if bound is None:
            return False
        if self.state.last_progress_at is None:
            bound = max(bound, STARTUP_HANG_BOUND)
        candidates = [t for t in (self.state.last_progress_at, quiet_since) if t is not None]
        return bool(candidates) and now - max(candidates) > bound

    def _track_throughput(self, text: str) -> None:
        assert self.straggler is not None
        step_ms = parse_step_time(text)
        if step_ms is None:
            return
        st = self.state
        window = self.straggler.window
        if st.progress_count < LEARNED_HANG_WARMUP:
            return
        if len(st.baseline_step_ms) < window:
            st.baseline_step_ms.append(step_ms)
            return
        st.recent_step_ms.append(step_ms)
        del st.recent_step_ms[:-window]

    def throughput_drop(self) -> float | None:
        """Slowdown factor when the whole job has been slower than its own baseline for a full
        window (e.g. one slow GPU that per-rank timing does not show), else None."""
        if self.straggler is None:
            return None
        st = self.state
        window = self.straggler.window
        if len(st.baseline_step_ms) < window or len(st.recent_step_ms) < window:
            return None
        baseline = median(st.baseline_step_ms)
        if baseline <= 0:
            return None
        factor = median(st.recent_step_ms) / baseline
        return factor if factor > self.straggler.ratio else None

    def stragglers(self) -> list[str]:
        """Nodes whose median step time exceeds ratio x the job's median over a full window."""
        if self.straggler is None:
            return []
        windows = {
            node: times
            for node, times in self.state.step_times.items()
            if len(times) >= self.straggler.window
        }
        if len(windows) < 2:
            return []
        per_node = {node: median(times) for node, times in windows.items()}
        baseline = median(per_node.values())
        if baseline <= 0:
            return []
        # With two nodes the median is their mean; compare with the fastest node instead so one
        # slow node out of two still stands out.
        reference = min(per_node.values()) if len(per_node) == 2 else baseline
        return sorted(n for n, ms in per_node.items() if ms > self.straggler.ratio * reference)
