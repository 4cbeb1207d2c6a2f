"""The per-attempt watcher: progress, hangs, stragglers and fatal lines from real line formats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.contracts import AnomalyKind, StragglerThresholds
from resurgo.detect.attempt_state import AttemptWatcher
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REGISTRY = Registry.load()


def progress(i: int) -> str:
    return f"0:  iteration {i:8d}/  200 | elapsed time per iteration (ms): 85.3 | lm loss: 1.0 |"


def watcher(**kw: object) -> AttemptWatcher:
    return AttemptWatcher(REGISTRY, ProgressParser(None), **kw)  # type: ignore[arg-type]


class TestProgressAndHang:
    def test_first_and_last_iteration(self) -> None:
        w = watcher(hang_timeout=None)
        for i in range(1, 4):
            w.feed(i, progress(i), T0 + timedelta(seconds=i))
        assert w.state.first_iteration == 1 and w.state.last_iteration == 3

    def test_explicit_hang_timeout_counts_from_last_progress(self) -> None:
        w = watcher(hang_timeout=10)
        w.feed(1, progress(1), T0)
        assert not w.hung(T0 + timedelta(seconds=9), T0)
        assert w.hung(T0 + timedelta(seconds=11), T0)

    def test_a_new_watch_does_not_inherit_old_silence(self) -> None:
        w = watcher(hang_timeout=10)
        w.feed(1, progress(1), T0)
        restarted_watch = T0 + timedelta(seconds=100)
        assert not w.hung(restarted_watch + timedelta(seconds=5), restarted_watch)
        assert w.hung(restarted_watch + timedelta(seconds=11), restarted_watch)

    def test_slow_startup_is_not_a_hang(self) -> None:
        w = watcher(hang_timeout=10)
        assert not w.hung(T0 + timedelta(minutes=5), T0)
        assert w.hung(T0 + timedelta(minutes=11), T0)

    def test_learned_bound_after_warmup(self) -> None:
        w = watcher(hang_timeout=None)
        for i in range(1, 12):
            w.feed(i, progress(i), T0 + timedelta(seconds=2 * i))
        bound = w.hang_bound()
        assert bound is not None and bound == timedelta(seconds=60)  # 5 x 2 s, floored at 60 s
        last = T0 + timedelta(seconds=22)
        assert not w.hung(last + timedelta(seconds=59), None)
        assert w.hung(last + timedelta(seconds=61), None)

    def test_no_bound_without_timeout_or_warmup(self) -> None:
        w = watcher(hang_timeout=None)
        w.feed(1, progress(1), T0)
        assert w.hang_bound() is None and not w.hung(T0 + timedelta(days=1), T0)


class TestSignals:
    def test_root_error_is_fatal_and_kept(self) -> None:
        w = watcher(hang_timeout=None)
        w.feed(7, "1: RuntimeError: CUDA error: uncorrectable ECC error encountered", T0)
        assert w.state.first_fatal_at == T0 and w.state.fatal_kind == AnomalyKind.CRASH
        assert w.state.signals[0].line_no == 7

    def test_collective_timeout_is_a_hang(self) -> None:
        w = watcher(hang_timeout=None)
        w.feed(3, "0: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
               " Timed out waiting 5000ms for recv operation to complete", T0)  # fmt: skip
        assert w.state.fatal_kind == AnomalyKind.HANG

    def test_checkpoint_save_failure_is_noted(self) -> None:
        w = watcher(hang_timeout=None)
        w.feed(3, "0: ERROR: Error saving checkpoint: [Errno 28] No space left on device", T0)
        assert w.state.checkpoint_failure
        other = watcher(hang_timeout=None)
        other.feed(3, "0: RuntimeError: CUDA error: uncorrectable ECC error encountered", T0)
        assert not other.state.checkpoint_failure

    def test_benign_noise_raises_nothing(self) -> None:
        w = watcher(hang_timeout=None)
        noise = [
            "node1:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
            "0: [resurgo-demo] checkpoint saved iteration=10 path=/tmp/ckpt/iter_0000010.pt",
            "UserWarning: TypedStorage is deprecated",
            "0: [resurgo-demo] resumed from checkpoint iteration=10",
        ]
        for i, line in enumerate(noise):
            w.feed(i, line, T0)
        assert w.state.first_fatal_at is None and w.state.signals == []
        assert w.state.resumed_from == 10

    @settings(max_examples=200)
    @given(st.lists(st.text(max_size=300), max_size=30))
    def test_garbage_never_raises(self, lines: list[str]) -> None:
        w = watcher(hang_timeout=5, straggler=StragglerThresholds())
        for i, line in enumerate(lines):
            w.feed(i, line, T0)
        w.hung(T0 + timedelta(seconds=10), T0)
        w.stragglers()


class TestStragglers:
    def feed_times(self, w: AttemptWatcher, times: dict[str, float], steps: int) -> None:
        for step in range(steps):
            for rank, (node, ms) in enumerate(sorted(times.items())):
                w.feed(step, f"[rank{rank}] step={step} step_time_ms={ms} node={node}", T0)

    def test_slow_node_is_named_after_a_full_window(self) -> None:
        w = watcher(hang_timeout=None, straggler=StragglerThresholds(ratio=1.5, window=5))
        self.feed_times(w, {"node1": 60, "node2": 360}, steps=4)
        assert w.stragglers() == []
        self.feed_times(w, {"node1": 60, "node2": 360}, steps=1)
        assert w.stragglers() == ["node2"]

    def test_even_nodes_are_not_stragglers(self) -> None:
        w = watcher(hang_timeout=None, straggler=StragglerThresholds(ratio=1.5, window=5))
        self.feed_times(w, {"node1": 60, "node2": 70, "node3": 65, "node4": 62}, steps=10)
        assert w.stragglers() == []

    def test_one_of_four(self) -> None:
        w = watcher(hang_timeout=None, straggler=StragglerThresholds(ratio=1.5, window=5))
        self.feed_times(w, {"node1": 60, "node2": 70, "node3": 300, "node4": 62}, steps=5)
        assert w.stragglers() == ["node3"]

    def test_disabled_without_thresholds(self) -> None:
        w = watcher(hang_timeout=None)
        self.feed_times(w, {"node1": 60, "node2": 900}, steps=50)
        assert w.stragglers() == []


class TestThroughputDrop:
    def timed(self, i: int, ms: float) -> str:
        return f" iteration {i:8d}/  1000 | elapsed time per iteration (ms): {ms} | lm loss: 1.0 |"

    def test_sustained_drop_against_own_baseline(self) -> None:
        w = watcher(hang_timeout=None, straggler=StragglerThresholds(ratio=1.5, window=5))
        for i in range(1, 16):
            w.feed(i, self.timed(i, 100.0), T0)
        assert w.throughput_drop() is None
        for i in range(16, 18):
            w.feed(i, self.timed(i, 300.0), T0)
        assert w.throughput_drop() is None  # slow in 2 of the last 5: not sustained yet
        w.feed(18, self.timed(18, 300.0), T0)
        assert w.throughput_drop() == 3.0

    def test_noise_within_ratio_is_not_a_drop(self) -> None:
        w = watcher(hang_timeout=None, straggler=StragglerThresholds(ratio=1.5, window=5))
        for i in range(1, 40):
            w.feed(i, self.timed(i, 100.0 + (i % 3) * 20), T0)
        assert w.throughput_drop() is None
