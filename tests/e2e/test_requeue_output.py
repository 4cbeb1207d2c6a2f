"""Where a requeued job's next attempt's output begins, on the real Slurm cluster.

Slurm appends a requeued job's next attempt to the same output file, after the old attempt's
last lines: the lines its ranks print while they are killed. requeue_hold finds the end of that
output while the job is held, so the next attempt's watch reads only its own lines, even when it
first looks after the job is already RUNNING again (a release with StartTime=now, a controller
restarted after the release).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resurgo.activities.controller import ControllerActivities
from resurgo.contracts import ActionRequest, ActionStep, ClusterGates, JobKey, LogCursor
from resurgo.detect.logtail import read_until_eof
from resurgo.devstack.localstack import wait_for
from resurgo.slurm.runner import LocalRunner
from tests.e2e.test_watchdog import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(240)]

# Each attempt says which it is; killed, it prints its teardown lines (as a dying rank's
# collective library does) before it exits.
SCRIPT = (
    "trap 'echo teardown: connection closed by peer; sleep 0.5; echo teardown: rank exiting; "
    "exit 1' TERM; echo attempt ${SLURM_RESTART_COUNT:-0} started; "
    "while true; do sleep 0.2; done"
)


@pytest.fixture
def cluster(slurm_conf: str) -> Iterator[Cluster]:
    made = Cluster(slurm_conf)
    yield made
    made.cancel_all()


def lines_of(out: Path) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


SUBMITTED = datetime(2026, 12, 7, tzinfo=UTC)


def step(job_id: int, kind: ActionStep, **extra: object) -> ActionRequest:
    # One advice (one key stem): the release lifts the hold this advice's requeue_hold tagged.
    job = JobKey(cluster="local", job_id=job_id, submit_time=SUBMITTED)
    return ActionRequest(
        job=job, step=kind, idempotency_key=f"{job.workflow_id()}:g1:{kind.value}", attempt=0,
        hold_deadline=datetime.now(UTC) + timedelta(minutes=10), **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def submit(cluster: Cluster, out: Path) -> int:
    """An opted-in, requeueable job appending each attempt's output to `out`."""
    comment = json.dumps({"resurgo": {"mode": "action"}})
    submitted = cluster.run(
        "sbatch", "--parsable", "--requeue", "--ntasks=1", "--time=3", "--open-mode=append",
        f"--output={out}", f"--job-name=ro{uuid.uuid4().hex[:8]}", f"--comment={comment}",
        "--wrap", SCRIPT,
    )  # fmt: skip
    job_id = int(submitted.strip().split(";")[0])
    cluster.jobs.append(job_id)
    return job_id


async def read_from(cursor: LogCursor) -> list[str]:
    got: list[str] = []
    async for part in read_until_eof(LocalRunner(), cursor):
        got.extend(text for _, text in part.lines)
    return got


def test_the_next_attempt_reads_none_of_the_held_attempts_teardown(
    cluster: Cluster, slurm_conf: str, tmp_path: Path
) -> None:
    out = tmp_path / "job.out"
    job_id = submit(cluster, out)
    wait_for(lambda: lines_of(out) == ["attempt 0 started"], 60, what="attempt 0's first line")
    # Where attempt 0's watch stopped: after its first line.
    read = LogCursor(path=str(out), offset=out.stat().st_size, line_no=1)
    controller = ControllerActivities(
        "local", LocalRunner(slurm_conf), ClusterGates(acknowledge_scheduler_actions=True)
    )
    held = asyncio.run(controller._scheduler_action(step(job_id, ActionStep.REQUEUE_HOLD,
                                                         cursor=read)))  # fmt: skip
    assert held.output_end is not None, held
    old = lines_of(out)
    assert old[-1] == "teardown: rank exiting", old
    # The end is the whole of the old attempt's output, counted on from the watch's cursor.
    assert held.output_end.line_no == len(old) and held.output_end.offset == out.stat().st_size

    asyncio.run(controller._scheduler_action(step(job_id, ActionStep.RELEASE)))
    wait_for(lambda: "attempt 1 started" in lines_of(out), 90, what="attempt 1's first line")
    assert asyncio.run(read_from(held.output_end)) == ["attempt 1 started"]


def test_a_job_not_held_gives_no_end(cluster: Cluster, slurm_conf: str, tmp_path: Path) -> None:
    """Someone released the job before a retried requeue_hold looked: its next attempt may
    already be writing, so no end is claimed (the watch falls back to what it sees)."""
    out = tmp_path / "job.out"
    job_id = submit(cluster, out)
    wait_for(lambda: bool(lines_of(out)), 60, what="attempt 0's first line")
    cluster.run("scontrol", "requeue", str(job_id))  # requeued by someone else, not held
    wait_for(lambda: cluster.job(job_id).restarts == 1, 60, what="the job requeued")
    controller = ControllerActivities(
        "local", LocalRunner(slurm_conf), ClusterGates(acknowledge_scheduler_actions=True)
    )
    result = asyncio.run(controller._scheduler_action(step(job_id, ActionStep.REQUEUE_HOLD)))
    assert result.outcome == "already_satisfied" and result.output_end is None
