"""Live and offline attribution share one path: the same lines give the same verdict.

The live watch (`AttemptWatcher`, as `watch_loop` runs it) scans a job's output line by line
and reports a crash with its signals; the controller's `attribute_anomaly` then attributes the
attempt's lines with that anomaly. Offline, `resurgo attribute BUNDLE` runs the same rules with
no anomaly. For every crash bundle of the corpus, both must name the same category, culprit
nodes and action, and the watch's signals must be lines attribution read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from resurgo.attribute.bundle import load_bundle
from resurgo.attribute.offline import analyse_bundle, default_advice
from resurgo.attribute.rules import analyse
from resurgo.contracts import Anomaly, AnomalyKind
from resurgo.detect.attempt_state import AttemptWatcher
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _crash_bundles() -> list[Path]:
    out = []
    for path in sorted(CORPUS.iterdir()):
        expected = path / "expected.json"
        if expected.is_file() and '"kind": "crash"' in expected.read_text():
            out.append(path)
    return out


def _watch(lines: list[tuple[int, str]]) -> Anomaly | None:
    """What the live watch reports for these lines (a crash once a fatal line is seen)."""
    watcher = AttemptWatcher(Registry.default(), ProgressParser(), hang_timeout=None)
    watcher.feed_many(lines, NOW)
    st = watcher.state
    if st.fatal_kind is None:
        return None
    return Anomaly(
        kind=AnomalyKind.CRASH,
        attempt=0,
        detected_at=NOW,
        summary="fatal",
        pattern_ids=list(st.pattern_ids),
        signals=list(st.signals[:20]),
    )


@pytest.mark.parametrize("path", _crash_bundles(), ids=lambda p: p.name)
def test_live_watch_and_offline_bundle_give_the_same_verdict(path: Path) -> None:
    report = analyse_bundle(path)
    bundle = load_bundle(path)
    anomaly = _watch([(e.line_no, e.text) for e in bundle.job])
    if anomaly is None:
        pytest.skip("the watch sees no fatal line (the verdict comes from Slurm's state)")
    live, progress = analyse(
        Registry.default(), anomaly, bundle.job, None, [], [],
        node_logs=bundle.node_logs, scheduler_lines=bundle.scheduler, metrics=bundle.metrics,
    )  # fmt: skip
    advice = default_advice(live, max_iteration=progress[0], resumed_from=progress[1])
    offline = report.attribution
    assert (live.category, live.culprit_nodes) == (offline.category, offline.culprit_nodes)
    assert advice.kind == report.advice.kind
    # The watch's own scan found what it reported in the same lines attribution read.
    assert {s.line_no for s in anomaly.signals} <= {e.line_no for e in bundle.job}
