"""Holds on the real Slurm cluster: Resurgo never leaves a job held without its fail-open tag,
and never lifts a hold that is not its own.

`SlurmActions` runs real `scontrol` against the shared local cluster; only the jobs submitted
here are touched. The watchdog runs as `resurgo watchdog` (default mode, no flags).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resurgo.contracts import ActionRequest, ActionStep, JobKey
from resurgo.devstack.localstack import wait_for
from resurgo.slurm.actions import SlurmActions, parse_hold_comment
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import CommandFailed, SchedulerError
from resurgo.slurm.runner import LocalRunner
from tests.e2e.test_watchdog import Cluster, once, records, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(240)]

# Ignores SIGTERM: after requeuehold the job stays COMPLETING for KillWait (5 s) + SIGKILL.
STUBBORN = "trap '' TERM; while true; do sleep 0.2; done"


@pytest.fixture
def cluster(slurm_conf: str) -> Iterator[Cluster]:
    made = Cluster(slurm_conf)
    yield made
    made.cancel_all()


def submit(cluster: Cluster, name: str, script: str) -> int:
    out = cluster.run(
        "sbatch", "--parsable", "--requeue", "--ntasks=1", "--time=3", "--output=/dev/null",
        f"--job-name={name}", "--wrap", script,
    )  # fmt: skip
    job_id = int(out.strip().split(";")[0])
    cluster.jobs.append(job_id)
    wait_for(lambda: cluster.job(job_id).state == "RUNNING", 60, what=f"job {job_id} running")
    return job_id


def request(job_id: int, step: ActionStep, deadline: datetime, gen: str = "g1") -> ActionRequest:
    job = JobKey(cluster="hostile", job_id=job_id, submit_time=datetime.now(UTC))
    key = f"{job.workflow_id()}:{gen}:{step.value}"
    return ActionRequest(job=job, step=step, idempotency_key=key, attempt=0,
                         hold_deadline=deadline)  # fmt: skip


class NoAdminComment(SlurmClient):
    """Real Slurm, except that slurmctld refuses every AdminComment update."""

    async def update_job(self, job_id: int, **fields: str) -> None:
        if "AdminComment" in fields:
            raise CommandFailed(f"scontrol update JobId={job_id} AdminComment=...: refused")
        await super().update_job(job_id, **fields)


def test_a_hold_still_completing_after_the_wait_carries_its_deadline(
    cluster: Cluster, slurm_conf: str, tmp_path: Path
) -> None:
    """The epilog (here: a job ignoring SIGTERM) outlasts the wait: requeue_hold fails, yet the
    hold is tagged, so the default watchdog releases it at the deadline."""
    name = "hh" + uuid.uuid4().hex[:8]
    job_id = submit(cluster, name, STUBBORN)
    deadline = datetime.now(UTC) + timedelta(seconds=15)
    req = request(job_id, ActionStep.REQUEUE_HOLD, deadline)
    actions = SlurmActions(SlurmClient(LocalRunner(slurm_conf)), settle_timeout=0.5)
    with pytest.raises(SchedulerError, match="COMPLETING"):
        asyncio.run(actions.requeue_hold(req))
    wait_for(lambda: cluster.job(job_id).held, 60, what="the job requeue-held")
    tag = parse_hold_comment(cluster.job(job_id).admin_comment)
    assert tag is not None and tag[0] == req.idempotency_key, cluster.job(job_id).admin_comment
    assert tag[1] == deadline.replace(microsecond=0)

    config = write_config(tmp_path / "resurgo.toml", name, slurm_conf)
    while datetime.now(UTC) <= deadline:
        time.sleep(0.5)
    # The watchdog serves the whole cluster: another overdue Resurgo hold (a test running beside
    # this one) is released too and recorded; this test speaks for its own job.
    released = once(config, name, tmp_path / "wd.jsonl")  # default mode: acts
    [entry] = [e for e in released if e["job_id"] == job_id]
    assert entry["action"] == "released"
    assert [r for r in records(tmp_path / "wd.jsonl") if r["job_id"] == job_id] == [entry]
    wait_for(lambda: not cluster.job(job_id).held, 30, what="the job released")


def test_a_hold_that_cannot_be_tagged_is_never_left_in_place(
    cluster: Cluster, slurm_conf: str
) -> None:
    name = "hh" + uuid.uuid4().hex[:8]
    job_id = submit(cluster, name, "sleep 120")
    req = request(job_id, ActionStep.REQUEUE_HOLD, datetime.now(UTC) + timedelta(minutes=10))
    actions = SlurmActions(NoAdminComment(LocalRunner(slurm_conf)))
    with pytest.raises(SchedulerError):
        asyncio.run(actions.requeue_hold(req))
    time.sleep(2)
    job = cluster.job(job_id)
    assert not job.held, f"job {job_id} held without a tag: {job.state} {job.reason}"


def test_release_leaves_an_operators_hold_alone(cluster: Cluster, slurm_conf: str) -> None:
    name = "hh" + uuid.uuid4().hex[:8]
    job_id = submit(cluster, name, "sleep 120")
    actions = SlurmActions(SlurmClient(LocalRunner(slurm_conf)))
    hold = request(job_id, ActionStep.REQUEUE_HOLD, datetime.now(UTC) + timedelta(minutes=10))
    asyncio.run(actions.requeue_hold(hold))
    assert cluster.job(job_id).held
    # The operator takes the job over: their own hold, their own note.
    cluster.run("scontrol", "update", f"JobId={job_id}", "AdminComment=ops: keep held, ticket 42")
    key = hold.idempotency_key.replace("requeue_hold", "release")
    release = hold.model_copy(update={"step": ActionStep.RELEASE, "idempotency_key": key})
    result = asyncio.run(actions.release(release))
    job = cluster.job(job_id)
    assert job.held and job.admin_comment == "ops: keep held, ticket 42"
    assert "not Resurgo's" in result.detail
    # Resurgo's own hold of another advice is not this release's either.
    other = request(job_id, ActionStep.RELEASE, datetime.now(UTC), gen="g9")
    cluster.run("scontrol", "update", f"JobId={job_id}",
                f"AdminComment=resurgo:hold key={hold.idempotency_key} deadline=none")  # fmt: skip
    asyncio.run(actions.release(other))
    assert cluster.job(job_id).held
    # Its own advice's release does lift it.
    asyncio.run(actions.release(release))
    wait_for(lambda: not cluster.job(job_id).held, 30, what="our own hold released")
