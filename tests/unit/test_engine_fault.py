"""A rule that raises costs one verdict (unknown, nothing blamed), not the recovery or the run."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from resurgo.attribute import rules
from resurgo.attribute.offline import analyse_bundle
from resurgo.contracts import Anomaly, AnomalyKind, Category, LogLine
from resurgo.detect.registry import Registry

CRASH = "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"


@pytest.fixture
def broken_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: object) -> None:
        raise ZeroDivisionError("a rule divided by an empty series")

    monkeypatch.setattr(rules, "_hardware", boom)


def test_offline_a_raising_rule_gives_an_unknown_verdict_that_retries(
    tmp_path: Path, broken_rule: None
) -> None:
    (tmp_path / "job.log").write_text(CRASH)
    report = analyse_bundle(tmp_path)
    v = report.attribution
    assert (v.category, v.culprit_nodes, v.confidence) == (Category.UNKNOWN, [], 0.0)
    assert "ZeroDivisionError" in v.summary
    assert report.advice.kind.value == "requeue"  # never a stop or an exclusion on a rule bug


def test_live_a_raising_rule_keeps_the_detected_kind(broken_rule: None) -> None:
    line = LogLine(source="job.log", line_no=1, text=CRASH.strip())
    anomaly = Anomaly(
        kind=AnomalyKind.HANG, attempt=0, detected_at=datetime.now(UTC), summary="silent",
        signals=[line],
    )  # fmt: skip
    v = rules.attribute(Registry.default(), anomaly, [line], None, [], [])
    assert (v.kind, v.category, v.fingerprint) == (AnomalyKind.HANG, Category.UNKNOWN,
                                                   "attribution-error")  # fmt: skip


def test_without_a_fault_the_same_bundle_is_attributed(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(CRASH)
    assert analyse_bundle(tmp_path).attribution.fingerprint != "attribution-error"
