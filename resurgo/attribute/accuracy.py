"""Scoring attribution against a labelled corpus (`tests/corpus/<name>/expected.json`).

Used by `bench/attribution_accuracy.py` and `tests/unit/test_attribution_corpus.py`, both of
which run every bundle through `analyse_bundle` (the `resurgo attribute --json` code path).

Metrics:
- category: accuracy, and per category precision/recall (one-vs-rest over bundles);
- culprit nodes: micro precision/recall/F1 over (bundle, node) pairs;
- action accuracy; kind accuracy;
- false stop rate: bundles advised `stop` whose label is not `stop`, over those not labelled stop;
- false exclusion rate: nodes we would exclude that the label does not blame, over the nodes we
  would exclude (an exclusion only happens with action `requeue_excluding_nodes`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGETS = {
    "category_accuracy": 0.95,
    "culprit_f1": 0.95,
    "action_accuracy": 0.95,
    "false_stops": 0,
}


@dataclass(frozen=True)
class Case:
    name: str
    expected: dict[str, Any]
    got: dict[str, Any]

    @property
    def expected_nodes(self) -> set[str]:
        return set(self.expected.get("culprit_nodes") or [])

    @property
    def got_nodes(self) -> set[str]:
        return set(self.got.get("culprit_nodes") or [])

    def ok(self) -> bool:
        return (
            self.got["kind"] == self.expected["kind"]
            and self.got["category"] == self.expected["category"]
            and self.got_nodes == self.expected_nodes
            and self.got["action"] == self.expected["action"]
        )


@dataclass
class Ratio:
    num: int = 0
    den: int = 0

    @property
    def value(self) -> float:
        return self.num / self.den if self.den else 1.0

    def __str__(self) -> str:
        return f"{self.value:.3f} ({self.num}/{self.den})"


@dataclass
class Score:
    cases: list[Case]
    per_category: dict[str, tuple[Ratio, Ratio]] = field(default_factory=dict)

    def _ratio(self, pred: Callable[[Case], bool], among: Callable[[Case], bool]) -> Ratio:
        pool = [c for c in self.cases if among(c)]
        return Ratio(sum(1 for c in pool if pred(c)), len(pool))

    @property
    def category_accuracy(self) -> Ratio:
        return self._ratio(lambda c: c.got["category"] == c.expected["category"], lambda c: True)

    @property
    def kind_accuracy(self) -> Ratio:
        return self._ratio(lambda c: c.got["kind"] == c.expected["kind"], lambda c: True)

    @property
    def action_accuracy(self) -> Ratio:
        return self._ratio(lambda c: c.got["action"] == c.expected["action"], lambda c: True)

    @property
    def exact(self) -> Ratio:
        return self._ratio(Case.ok, lambda c: True)

    @property
    def culprit_precision(self) -> Ratio:
        tp = sum(len(c.got_nodes & c.expected_nodes) for c in self.cases)
        return Ratio(tp, sum(len(c.got_nodes) for c in self.cases))

    @property
    def culprit_recall(self) -> Ratio:
        tp = sum(len(c.got_nodes & c.expected_nodes) for c in self.cases)
        return Ratio(tp, sum(len(c.expected_nodes) for c in self.cases))

    @property
    def culprit_f1(self) -> float:
        p, r = self.culprit_precision.value, self.culprit_recall.value
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def false_stops(self) -> Ratio:
        return self._ratio(
            lambda c: c.got["action"] == "stop", lambda c: c.expected["action"] != "stop"
        )

    @property
    def false_exclusions(self) -> Ratio:
        excluded = [c for c in self.cases if c.got["action"] == "requeue_excluding_nodes"]
        wrong = sum(len(c.got_nodes - c.expected_nodes) for c in excluded)
        return Ratio(wrong, sum(len(c.got_nodes) for c in excluded))

    def categories(self) -> dict[str, tuple[Ratio, Ratio]]:
        """category → (precision, recall)."""
        names = sorted({c.expected["category"] for c in self.cases} | {
            c.got["category"] for c in self.cases
        })  # fmt: skip
        out: dict[str, tuple[Ratio, Ratio]] = {}
        for name in names:
            tp = sum(1 for c in self.cases if c.got["category"] == name == c.expected["category"])
            predicted = sum(1 for c in self.cases if c.got["category"] == name)
            actual = sum(1 for c in self.cases if c.expected["category"] == name)
            out[name] = (Ratio(tp, predicted), Ratio(tp, actual))
        return out

    def failures(self) -> list[str]:
        """The targets this score misses (empty: all met)."""
        missed = []
        if self.category_accuracy.value < TARGETS["category_accuracy"]:
            missed.append(f"category accuracy {self.category_accuracy} < 0.95")
        if self.culprit_f1 < TARGETS["culprit_f1"]:
            missed.append(f"culprit-node F1 {self.culprit_f1:.3f} < 0.95")
        if self.action_accuracy.value < TARGETS["action_accuracy"]:
            missed.append(f"action accuracy {self.action_accuracy} < 0.95")
        if self.false_stops.num > TARGETS["false_stops"]:
            missed.append(f"{self.false_stops.num} false stop(s)")
        return missed


def corpus_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "expected.json").is_file())


def load_expected(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "expected.json").read_text("utf-8"))
    return data


def score(bundles: Iterable[Path], attribute: Callable[[Path], dict[str, Any]]) -> Score:
    """Run `attribute` (bundle dir → the `--json` object) over the bundles and score it."""
    cases = [Case(b.name, load_expected(b), attribute(b)) for b in bundles]
    return Score(cases)
