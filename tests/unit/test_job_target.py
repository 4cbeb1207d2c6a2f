"""How a mutating Slurm command names one job: a job id, or `<array id>_<task id>` for an array
task. A bare array id means every task of the array to scontrol and scancel (checked on the
repo's Slurm 22.05: `scontrol update JobId=<array id> AdminComment=x` wrote every task's), and
the task that starts last keeps that id, so an array task is never named by its own id."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from resurgo.contracts import JobKey
from resurgo.slurm.actions import hold_comment
from resurgo.slurm.targets import job_target, slurm_ref
from worker.watchdog import tagged_from_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SUBMIT = datetime(2026, 12, 5, tzinfo=UTC)


def test_an_array_task_is_named_by_array_and_task_even_when_it_keeps_the_array_id() -> None:
    last = JobKey(cluster="c", job_id=21, submit_time=SUBMIT, array_job_id=21, array_task_id=5)
    assert last.slurm_ref() == "21_5"
    assert JobKey(cluster="c", job_id=22, submit_time=SUBMIT).slurm_ref() == "22"
    assert slurm_ref(22, 21, 0) == "21_0"
    assert slurm_ref(21, 21, None) == "21"  # the array's unstarted tasks: the array itself


@pytest.mark.parametrize("good", [7, "7", "21_5", 4294967293])
def test_job_targets_that_scontrol_takes(good: int | str) -> None:
    assert job_target(good) == str(good)


@pytest.mark.parametrize(
    "bad", ["", "21_", "_5", "21_[2-5]", "21+1", "-1", "7 8", "7;reboot", "7\nJobId=8", True]
)
def test_anything_else_never_becomes_an_argument(bad: int | str) -> None:
    with pytest.raises(ValueError, match="not a job id or array task"):
        job_target(bad)


def test_the_watchdog_releases_an_array_task_by_its_array_and_task() -> None:
    """The fail-open watchdog lists tagged holds from squeue --json; a held array task must be
    released as `<array>_<task>`, or `scontrol release <array id>` lifts every held task."""
    doc = json.loads((FIXTURES / "squeue_json_array.json").read_text())
    tag = hold_comment("resurgo:c:21_1:1:0:requeue", SUBMIT)
    for record in doc["jobs"]:
        record["admin_comment"] = tag
    found = {job.job_id: job.target for job in tagged_from_json(json.dumps(doc))}
    assert found == {22: "21_0", 23: "21_1", 21: "21"}
