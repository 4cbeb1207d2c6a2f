"""The labelled corpus (tests/corpus) through `resurgo attribute --json`, against the targets.

Each bundle is attributed by invoking the real CLI command (one JSON object on stdout); the
scores must meet: category accuracy >= 0.95, culprit-node F1 >= 0.95, action accuracy >= 0.95,
zero false stops. Regenerate the real-run bundles with tests/corpus/generate.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from resurgo.attribute.accuracy import Score, corpus_dirs, score
from resurgo.cli.main import app

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
BLIND = Path(__file__).resolve().parents[1] / "corpus_blind"
RUNNER = CliRunner()


def attribute_json(bundle: Path) -> dict[str, Any]:
    result = RUNNER.invoke(app, ["attribute", str(bundle), "--json"])
    assert result.exit_code == 0, f"{bundle.name}: exit {result.exit_code}\n{result.output}"
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"{bundle.name}: expected one JSON object, got {result.stdout!r}"
    data: dict[str, Any] = json.loads(lines[0])
    return data


@pytest.fixture(scope="module")
def result() -> Score:
    bundles = corpus_dirs(CORPUS)
    assert len(bundles) >= 60
    return score(bundles, attribute_json)


def test_corpus_is_mostly_real_runs(result: Score) -> None:
    origins = [c.expected.get("origin") for c in result.cases]
    assert origins.count("real") > len(origins) / 2
    for case in result.cases:
        e = case.expected
        assert e["action"] in ("requeue", "requeue_excluding_nodes", "stop", "none"), case.name
        assert (e["kind"] == "none") == (e["category"] == "none"), case.name


def test_output_shape(result: Score) -> None:
    keys = {"kind", "category", "culprit_nodes", "action", "confidence", "fingerprint", "evidence"}
    for case in result.cases:
        assert keys <= set(case.got), case.name
        assert (case.got["kind"] == "none") == (case.got["category"] == "none"), case.name
        assert 0.0 <= case.got["confidence"] <= 1.0
        for line in case.got["evidence"]:
            assert {"source", "line", "text"} <= set(line)


def test_targets_are_met(result: Score) -> None:
    mismatches = [
        f"{c.name}: expected {c.expected['kind']}/{c.expected['category']}/"
        f"{sorted(c.expected_nodes)}/{c.expected['action']}, got {c.got['kind']}/"
        f"{c.got['category']}/{sorted(c.got_nodes)}/{c.got['action']}"
        for c in result.cases
        if not c.ok()
    ]
    assert not result.failures(), "\n".join([*result.failures(), *mismatches])


def test_no_false_stops(result: Score) -> None:
    assert result.false_stops.num == 0, [
        c.name for c in result.cases if c.got["action"] == "stop" != c.expected["action"]
    ]


def test_blind_corpus_meets_the_targets() -> None:
    """Bundles written without sight of the rules (tests/corpus_blind/README.md)."""
    blind = score(corpus_dirs(BLIND), attribute_json)
    assert len(blind.cases) >= 45
    assert all(c.expected.get("origin", "").startswith("blind-") for c in blind.cases)
    assert not blind.failures(), blind.failures()
    assert blind.false_stops.num == 0


def test_unreadable_bundle_fails_clearly(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["attribute", str(tmp_path), "--json"])
    assert result.exit_code == 2
    assert "no job.log" in result.output


SHARED = Path(__file__).resolve().parents[3] / "shared" / "corpus"
NEXT = Path(__file__).resolve().parents[1] / "corpus_blind_next"
# Sets below the targets (tests/corpus_blind_next/README.md): floors at today's scores, so a
# change may only raise them. (category, culprit F1, action, false stops at most)
FLOORS = {
    "s6-": (1.0, 1.0, 1.0, 0),
    "s7-": (0.98, 1.0, 0.98, 0),
    "s8-": (1.0, 1.0, 1.0, 0),
    "s9-": (1.0, 1.0, 1.0, 0),
    "s10-": (1.0, 1.0, 1.0, 0),
    # Sets 11-16 were scored blind on arrival (README); floors at the scores after the rule rounds.
    "s11-": (1.0, 1.0, 1.0, 0),
    "s12-": (1.0, 1.0, 1.0, 0),
    "s13-": (1.0, 1.0, 1.0, 0),
    "s14-": (1.0, 1.0, 1.0, 0),
    "s15-": (1.0, 1.0, 1.0, 0),
    "s16-": (1.0, 1.0, 1.0, 0),
    # Sets 17-19 (session 8): scored on arrival (README), then the classes they exposed fixed.
    "s17-": (0.977, 0.95, 0.977, 0),
    "s18-": (0.977, 1.0, 1.0, 0),
    "s19-": (0.955, 1.0, 1.0, 0),
    # Sets 20-22 (session 8, second round): scored on arrival, then the classes fixed (session 9).
    "s20-": (1.0, 0.875, 0.975, 0),
    "s21-": (1.0, 1.0, 1.0, 0),
    "s22-": (0.95, 0.98, 0.975, 0),
    # Sets 23-25 (session 9, third round): scored on arrival, classes fixed in session 10.
    "s23-": (0.85, 0.844, 0.9, 0),
    "s24-": (0.975, 0.978, 0.975, 0),
    "s25-": (0.925, 0.947, 0.925, 0),
    # Sets 26-28 (session 10): scored on arrival (README), then the classes they exposed fixed.
    "s26-": (0.9, 1.0, 0.975, 0),
    "s27-": (0.95, 1.0, 1.0, 0),
    "s28-": (0.975, 0.971, 0.975, 0),
    # Sets 29-31 (session 10, second round): scored on arrival, then a first pass of fixes.
    "s29-": (0.875, 0.882, 0.9, 0),
    "s30-": (0.95, 0.977, 0.975, 0),
    "s31-": (0.875, 0.888, 0.925, 0),
    # Sets 32-36 (session 11): scored on arrival (README), then the classes they exposed fixed.
    "s32-": (0.875, 0.975, 0.95, 0),
    # (s33-3308, a job still running through an NFS outage, labelled requeue; s45-4508, the
    # same evidence of a Lustre one, labelled none: session 13 follows the running job, none)
    "s33-": (0.95, 1.0, 0.95, 0),
    "s34-": (1.0, 1.0, 1.0, 0),
    "s35-": (0.975, 1.0, 1.0, 0),
    "s36-": (0.95, 1.0, 1.0, 0),
    # Sets 37 (other stacks' issue threads) and 38 (scheduler records), session 11: scored on
    # arrival, classes fixed in session 12.
    "s37-": (1.0, 1.0, 1.0, 0),
    "s38-": (1.0, 1.0, 1.0, 0),
    # Sets 39-41 (session 12): scored on arrival (README), then the classes they exposed fixed.
    "s39-": (1.0, 1.0, 1.0, 0),
    "s40-": (1.0, 1.0, 1.0, 0),
    "s41-": (1.0, 1.0, 1.0, 0),
    # Sets 42 (other projects' issue threads) and 43 (messy operator evidence), session 12:
    # scored on arrival (README), then a first pass of fixes.
    "s42-": (0.95, 0.894, 0.95, 0),
    "s43-": (0.975, 1.0, 1.0, 0),
    # Sets 44-48 (session 13): scored on arrival (README), then the classes they exposed fixed.
    "s44-": (0.925, 0.883, 0.95, 0),
    "s45-": (0.875, 0.941, 0.925, 0),
    "s46-": (0.95, 0.962, 1.0, 0),
    "s47-": (1.0, 1.0, 1.0, 0),
    "s48-": (0.975, 0.918, 1.0, 0),
    # Sets 49 (2025-2026 issue-thread formats) and 50 (kind and action boundaries), session
    # 14: scored on arrival (README), then the classes they exposed fixed.
    "s49-": (1.0, 1.0, 1.0, 0),
    "s50-": (1.0, 0.888, 1.0, 0),
    # Sets 51 (the data plane) and 52 (GPU and node hardware across generations), session 14,
    # a second round: scored on arrival (README), then the classes they exposed fixed.
    "s51-": (1.0, 1.0, 1.0, 0),
    "s52-": (0.975, 1.0, 1.0, 0),
    # Sets 53 (multi-node launch and the network fabric) and 54 (logs as pasted into framework
    # issues), session 15: scored on arrival (README), then the classes they exposed fixed.
    "s53-": (0.975, 1.0, 0.975, 0),
    "s54-": (0.975, 1.0, 0.975, 0),
    # Set 55 (other vendors' accelerators: AMD, Gaudi, Trainium, GH200), session 15.
    "s55-": (0.9, 0.95, 0.9, 0),
    # Set 56 (real logs from resolved public GitHub issue threads), session 15.
    "s56-": (0.8, 0.731, 0.8, 0),
    # Sets 57 (real logs from public issue threads, a third batch) and 58 (a balanced set across
    # the whole spec), session 16: scored on arrival (README), then the classes they exposed fixed.
    "s57-": (0.95, 0.971, 0.925, 0),
    "s58-": (1.0, 1.0, 1.0, 0),
    # Sets 59 (real logs from a fourth batch of issue threads) and 60 (incidents from public
    # large-run accounts), session 16, a second round: scored on arrival, then classes fixed.
    "s59-": (0.875, 0.962, 0.95, 0),
    "s60-": (0.975, 1.0, 0.975, 0),
    # Sets 61 (real logs from a fifth batch of issue threads) and 62 (bundles as an on-call
    # operator collects them), session 16, a third round: scored on arrival, then classes fixed.
    "s61-": (0.725, 0.8, 0.85, 0),
    "s62-": (1.0, 1.0, 1.0, 0),
    # Sets 63 (real issue threads, 6th batch) and 64 (cluster-side threads: Slurm, pyxis, UCX,
    # ROCm, JAX sites), session 17: scored on arrival (README), then the classes fixed.
    "s63-": (0.675, 0.705, 0.725, 0),
    "s64-": (0.7, 0.736, 0.75, 0),
    # Sets 65 (training-framework trackers' threads) and 66 (node- and fabric-side threads),
    # session 18: scored on arrival (README), then the classes they exposed fixed. (s26's
    # 2633 is no longer an accidental hang `unknown` but a running job, its action now right;
    # 2624's launch fixed the same session keeps the set's category at 0.9.)
    "s65-": (0.6, 0.6, 0.65, 0),
    "s66-": (0.75, 0.842, 0.85, 0),
    # Sets 67-70 (forum threads, research code bases, storage, Slurm's own side), session 19:
    # scored on arrival (README), then the classes they exposed fixed.
    "s67-": (0.6, 0.823, 0.725, 0),
    "s68-": (0.5, 0.615, 0.525, 0),
    "s69-": (0.55, 0.666, 0.625, 0),
    "s70-": (0.7, 0.363, 0.8, 0),
    # Sets 71-74 (2024-2026 training-stack threads, hangs and slowness, hardware in threads, the
    # software environment and the job's own mistakes), session 20: scored on arrival (README),
    # then the classes they exposed fixed. (s72's and s74's false stops: a lone illegal memory
    # access, and a note comparing nodes; see the README.)
    "s71-": (0.75, 0.0, 0.825, 0),
    "s72-": (0.325, 0.374, 0.45, 1),
    "s73-": (0.525, 0.592, 0.55, 0),
    "s74-": (0.475, 0.4, 0.525, 1),
    # Sets 75 (resolved threads of less common stacks: MPI science codes, JAX, TF, Paddle, ROCm)
    # and 76 (which node: quiet culprits, loud victims, node files), session 20, second round.
    "s75-": (0.4, 0.5, 0.575, 0),
    "s76-": (0.325, 0.285, 0.525, 0),
    "hardware": (1.0, 1.0, 1.0, 0),
    "software": (1.0, 1.0, 1.0, 0),
    "lifecycle": (1.0, 1.0, 1.0, 0),
}


def _sets() -> list[tuple[str, list[Path]]]:
    sets = [
        (prefix, [b for b in corpus_dirs(NEXT) if b.name.startswith(prefix)])
        for prefix in [f"s{n}-" for n in range(6, 77)]
    ]
    for name in ("hardware", "software", "lifecycle"):
        if (SHARED / name / "cases").is_dir():
            sets.append((name, corpus_dirs(SHARED / name / "cases")))
    return sets


@pytest.mark.parametrize(
    ("name", "bundles"), _sets(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_sets_below_the_targets_hold_their_floor(name: str, bundles: list[Path]) -> None:
    assert len(bundles) >= 40, name
    got = score(bundles, attribute_json)
    cat, f1, act, stops = FLOORS[name]
    assert got.category_accuracy.value >= cat, (name, str(got.category_accuracy))
    assert got.culprit_f1 >= f1, (name, got.culprit_f1)
    assert got.action_accuracy.value >= act, (name, str(got.action_accuracy))
    assert got.false_stops.num <= stops, name
