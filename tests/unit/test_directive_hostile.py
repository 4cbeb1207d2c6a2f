"""Hostile directives (issue #12): a comment can never crash, stall or split the controller.

One validator (`parse_directive`) reads every comment for discovery; the watch checks a
directive's `progress_pattern` with the same function, so the two always agree. A watch measures
hang bounds on a monotonic clock: a step of the wall clock does not make a healthy job hung.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.contracts import JobKey, JobObservation, RecoveryInput, WatchRequest
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry
from resurgo.detect.watch_loop import watch_attempt
from resurgo.policy.directive import MAX_DEPTH, parse_directive
from resurgo.slurm.runner import LocalRunner

REPO = Path(__file__).resolve().parents[2]
KEY = JobKey(cluster="c", job_id=7, submit_time=datetime(2026, 11, 29, tzinfo=UTC))


def wire(comment: str) -> bytes:
    """What discovery hands Temporal for this comment: it must always serialise."""
    parsed = parse_directive(comment)
    inp = RecoveryInput.model_validate(
        {"job": KEY, "directive": parsed.directive, "problems": parsed.problems,
         "policy": {}, "gates": {}}
    )  # fmt: skip
    return inp.model_dump_json().encode("utf-8")


class TestCrashingComments:
    @pytest.mark.parametrize("opener", ["[", '{"a":'])
    def test_deep_nesting_is_a_problem_not_a_recursion_error(self, opener: str) -> None:
        parsed = parse_directive('{"resurgo":' + opener * 2000)
        assert parsed.opted_in and parsed.directive is None
        assert f"at most {MAX_DEPTH}" in parsed.problems[0]
        wire('{"resurgo":' + opener * 5000)

    @pytest.mark.parametrize(
        "comment",
        [
            '{"resurgo":{"environment":"\\ud800"}}',
            '{"resurgo":{"policy":"x\\udfff"}}',
            '{"resurgo":{"\\ud800":1}}',  # an unknown field named by a lone surrogate
            '{"resurgo":{"mode":"observe"},"note":["\\udc00"]}',
        ],
    )
    def test_lone_surrogates_are_refused_and_everything_serialises(self, comment: str) -> None:
        parsed = parse_directive(comment)
        assert parsed.opted_in and parsed.directive is None
        assert "lone surrogate" in parsed.problems[0]
        wire(comment)

    @pytest.mark.parametrize(
        ("comment", "reason"),
        [
            ('{"resurgo":{"max_attempts":' + "1" * 5000 + "}}", "not valid JSON"),
            ('{"resurgo":{"hang_timeout":NaN}}', "NaN"),
            ('{"resurgo":{"hang_timeout":-Infinity}}', "Infinity"),
            ('{"resurgo":{"mode":"observe","mode":"action"}}', "twice"),
            ('{"resurgo":{"mode":"observe"},"resurgo":{"mode":"action"}}', "twice"),
        ],
    )
    def test_other_poison_is_a_clear_problem(self, comment: str, reason: str) -> None:
        parsed = parse_directive(comment)
        assert parsed.opted_in and parsed.directive is None
        assert reason in parsed.problems[0]
        wire(comment)

    def test_problems_quote_user_values_short(self) -> None:
        parsed = parse_directive('{"resurgo":{"mode":"' + "x" * 10_000 + '"}}')
        assert parsed.directive is None and all(len(p) < 300 for p in parsed.problems)

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from('[]{}":,\\ud800a1 '), max_size=400))
    def test_json_shaped_noise_never_raises_and_serialises(self, text: str) -> None:
        wire('{"resurgo":' + text)
        wire('{"resurgo":"' + text)


REDOS = r"^(?:\w+\s?)+(\d+)$"


class TestProgressPatterns:
    @pytest.mark.parametrize(
        ("pattern", "reason"),
        [
            (r"(step)=(\d+)", "2 capturing groups"),
            ("(" + "a" * 2000 + ")", "longer than"),
            (r"(?<=step )(\d+)", "RE2"),
            (r"(\d)\1", "RE2"),
            (r"step (\d+", "not a valid regular expression"),
        ],
    )
    def test_the_directive_refuses_what_the_watch_cannot_use(
        self, pattern: str, reason: str
    ) -> None:
        parsed = parse_directive(json.dumps({"resurgo": {"progress_pattern": pattern}}))
        assert parsed.directive is None
        assert any(reason in p for p in parsed.problems), parsed.problems

    @pytest.mark.parametrize(
        "pattern",
        [REDOS, r"it=(\d+)", r"(epoch|ep) (\d+) batch (?P<iteration>[\d,]+)", r"(?i)step (\d+)",
         r"(step)=(\d+)", r"(?<=x)(\d)", "(" + "a" * 2000 + ")", r"(a{1000}){1000}", ""],
    )  # fmt: skip
    def test_directive_and_watch_agree(self, pattern: str) -> None:
        parsed = parse_directive(json.dumps({"resurgo": {"progress_pattern": pattern}}))
        try:
            ProgressParser(pattern)
            watch_accepts = True
        except ValueError:
            watch_accepts = False
        assert (parsed.directive is not None) == watch_accepts, parsed.problems

    def test_a_catastrophic_pattern_runs_in_linear_time(self) -> None:
        # With a backtracking engine this line takes days (x4 per two more characters); run in
        # a child process so the old behaviour fails the test instead of hanging the suite.
        code = (
            "from resurgo.detect.progress import ProgressParser\n"
            f"p = ProgressParser({REDOS!r})\n"
            "print(p.parse('a' * 40 + '!'), p.parse('train step 41'))\n"
        )
        try:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  cwd=REPO, timeout=60)  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail("the progress_pattern backtracked for a minute on a 41-character line")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["None", "1"]  # greedy \w+ leaves one digit


class OneJob:
    def __init__(self, out: Path) -> None:
        self.obs = JobObservation(
            job_id=7, state="RUNNING", user="root", std_out=str(out),
            submit_time=KEY.submit_time, start_time=datetime.now(UTC) - timedelta(minutes=5),
        )  # fmt: skip

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation:
        return self.obs


async def test_a_wall_clock_step_does_not_make_a_healthy_job_hung(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    out.write_text("0:  iteration        1/     200 | elapsed time per iteration (ms): 85.3 |\n")
    wall = [datetime.now(UTC)]
    steady = [1000.0]
    looks = 0

    async def pause(_: object) -> None:
        # Each look is 1 s of real time; at the third, NTP steps the wall clock 2 min ahead.
        nonlocal looks
        looks += 1
        steady[0] += 1.0
        wall[0] += timedelta(seconds=1) + (timedelta(minutes=2) if looks == 3 else timedelta())
        with out.open("a") as handle:
            handle.write(f"0:  iteration {looks + 1:8d}/     200 | elapsed time per iteration\n")

    req = WatchRequest(job=KEY, attempt=0, seen_started=True, seen_progress=True,
                       hang_timeout=60, max_window_seconds=10)  # fmt: skip
    result = await watch_attempt(
        req, OneJob(out), LocalRunner(), Registry.default(), lambda _: None,
        now=lambda: wall[0], monotonic=lambda: steady[0], pause=pause,
    )  # fmt: skip
    assert result.outcome == "window_elapsed", result.anomaly
    assert result.last_iteration is not None and result.last_iteration >= 10


async def test_a_real_hang_is_still_found_on_the_monotonic_clock(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    out.write_text("0:  iteration        1/     200 | elapsed time per iteration (ms): 85.3 |\n")
    steady = [1000.0]

    async def pause(_: object) -> None:
        steady[0] += 10.0  # silence, while the wall clock (frozen here) says nothing passed

    req = WatchRequest(job=KEY, attempt=0, seen_started=True, seen_progress=True,
                       hang_timeout=60, max_window_seconds=600)  # fmt: skip
    frozen = datetime.now(UTC)
    result = await watch_attempt(
        req, OneJob(out), LocalRunner(), Registry.default(), lambda _: None,
        now=lambda: frozen, monotonic=lambda: steady[0], pause=pause,
    )  # fmt: skip
    assert result.outcome == "anomaly" and result.anomaly is not None
    assert result.anomaly.kind.value == "hang"
