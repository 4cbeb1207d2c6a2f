"""Per-attempt detection state: fed log lines and clock ticks, it says when something is wrong.

Pure (no I/O): the watch activity feeds it; tests feed it directly. Its state is small and
serialisable so the activity can heartbeat it and resume after a crash without losing signals.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from activities.detect.progress import ProgressParser
from activities.detect.registry import Registry
from workflows.contracts import AnomalyKind, LogLine

MAX_SIGNALS = 40
# After the first fatal line, wait this long for the job to end by itself (srun kill-on-bad-exit
# usually ends it within seconds) so attribution sees the whole failure, cascade included.
FATAL_GRACE = timedelta(seconds=20)
LEARNED_HANG_FACTOR = 5.0
LEARNED_HANG_FLOOR = timedelta(seconds=60)
LEARNED_HANG_CEILING = timedelta(minutes=30)
LEARNED_HANG_WARMUP = 5

_RESUMED = re.compile(
    r"(?:resum\w*|loaded checkpoint|restor\w*)\b.{0,80}?\b(?:iteration|iter|step)[\s=:]+(\d+)",
    re.IGNORECASE,
)


CHECKPOINT_FAILURE_PATTERNS = frozenset(
    {"checkpoint_save_failed", "checkpoint_write_failed", "dcp_checkpoint_exception"}
)


def is_checkpoint_failure(pattern_id: str) -> bool:
    """Saving a checkpoint failed (loading one is a different story)."""
    return pattern_id in CHECKPOINT_FAILURE_PATTERNS


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


class AttemptWatcher:
    def __init__(
        self,
        registry: Registry,
        progress: ProgressParser,
        *,
        hang_timeout: float | None,
        state: WatchState | None = None,
    ) -> None:
        self.registry = registry
        self.progress = progress
        self.hang_timeout = hang_timeout
        self.state = state or WatchState()

    def feed(self, line_no: int, text: str, now: datetime, source: str = "job.log") -> None:
        st = self.state
        iteration = self.progress.parse(text)
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
        for match in self.registry.scan(text):
            if match.role not in ("root", "cascade"):
                continue
            if is_checkpoint_failure(match.id):
                st.checkpoint_failure = True
            if len(st.signals) < MAX_SIGNALS:
                st.signals.append(LogLine(source=source, line_no=line_no, text=text[:2000]))
            if match.id not in st.pattern_ids:
                st.pattern_ids.append(match.id)
            if match.severity == "fatal" and st.first_fatal_at is None:
                st.first_fatal_at = now
                st.fatal_kind = AnomalyKind(match.kind)
            break

    def hang_bound(self) -> timedelta | None:
        """How long without progress counts as a hang (explicit, else learned, else unknown)."""
        if self.hang_timeout is not None:
            return timedelta(seconds=self.hang_timeout)
        st = self.state
        if st.progress_count <= LEARNED_HANG_WARMUP or st.max_interval_s <= 0:
            return None
        learned = timedelta(seconds=st.max_interval_s * LEARNED_HANG_FACTOR)
        return min(max(learned, LEARNED_HANG_FLOOR), LEARNED_HANG_CEILING)

    def hung(self, now: datetime, running_since: datetime | None) -> bool:
        bound = self.hang_bound()
        if bound is None:
            return False
        last = self.state.last_progress_at or running_since
        return last is not None and now - last > bound

    def fatal_overdue(self, now: datetime) -> bool:
        first = self.state.first_fatal_at
        return first is not None and now - first > FATAL_GRACE
