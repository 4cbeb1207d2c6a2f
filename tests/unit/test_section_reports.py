"""FlagScale's per-section straggler report (flagos-ai/FlagScale#938, its straggler detection
`to_text`): `=== Straggler Report at Step N ===`, the ranks it names, then one block per timed
section of the step with `Min/Max/Avg/Slowdown` and `Rank N: <ms>` rows."""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle
from resurgo.attribute.section_reports import section_reports
from resurgo.contracts import LogLine

SCONTROL = (
    "JobId=78 JobName=pretrain JobState=RUNNING Reason=None ExitCode=0:0 RunTime=03:00:00 "
    "StartTime=2025-06-11T08:00:00 EndTime=Unknown NodeList=gpu[001-002] NumNodes=2\n"
)


def report(step: int, slow: str, data_ms: float, fwd_max: float) -> str:
    head = f"[default0]:=== Straggler Report at Step {step} ===\n"
    named = (
        f"[default0]:⚠ Stragglers detected: ranks [{slow}]\n" if slow
        else "[default0]:✓ No stragglers detected.\n"
    )  # fmt: skip
    return (
        head
        + named
        + "[default0]:  data_loading:\n"
        + f"[default0]:    Min: 3.11ms, Max: {data_ms}ms, Avg: 104.52ms, "
        f"Slowdown: {data_ms / 3.11:.0f}x\n"
        + f"[default0]:    Rank {slow or 0}: {data_ms}ms\n"
        + "[default0]:  forward:\n"
        + f"[default0]:    Min: 40.90ms, Max: {fwd_max}ms, Avg: 41.30ms, "
        f"Slowdown: {fwd_max / 40.9:.2f}x\n" + f"[default0]:    Rank {slow or 0}: {fwd_max}ms\n"
    )


def lines(text: str) -> list[LogLine]:
    return [
        LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(text.splitlines())
    ]


def test_the_section_where_the_named_rank_loses_its_time_is_the_phase() -> None:
    found = section_reports(lines(report(300, "0", 812.4, 41.88)))
    assert [(r.step, r.ranks, r.phase()) for r in found] == [(300, {0}, "data_loading")]


def test_a_report_of_no_straggler_names_no_rank() -> None:
    assert [r.ranks for r in section_reports(lines(report(300, "", 4.0, 41.88)))] == [set()]


def test_rank_0_slow_only_in_data_loading_is_the_applications_straggler(
    tmp_path: Path,
) -> None:
    # Fails before section reports were read: a straggler on unknown nodes.
    (tmp_path / "job.log").write_text(report(300, "0", 812.4, 41.88) + "# job still running\n")
    (tmp_path / "scheduler.txt").write_text(SCONTROL)
    v = analyse_bundle(tmp_path).as_json()
    assert (v["kind"], v["category"], v["culprit_nodes"], v["action"]) == (
        "straggler", "application", [], "none",
    )  # fmt: skip


def test_no_straggler_reports_of_a_healthy_job_stay_healthy(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text("".join(report(s, "", 4.0, 41.2) for s in (100, 200, 300)))
    (tmp_path / "scheduler.txt").write_text(SCONTROL)
    assert analyse_bundle(tmp_path).as_json()["kind"] == "none"
