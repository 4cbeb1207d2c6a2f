"""The shared job listing against the real local Slurm cluster: same answers as asking per job,
one refresh for many watchers, and no way for a job's own text to impersonate another job."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from resurgo.slurm.client import SlurmClient
from resurgo.slurm.runner import CommandResult, LocalRunner
from resurgo.slurm.snapshot import LISTING_COST_FACTOR, JobSnapshot

pytestmark = [pytest.mark.timeout(120)]


Submit = Callable[..., int]


@pytest.fixture(params=["json", "text"])
def client(request: pytest.FixtureRequest, slurm_conf: str) -> SlurmClient:
    """`squeue --json` (this Slurm has it) and the text fallback of Slurm without it."""
    return SlurmClient(
        LocalRunner(slurm_conf), structured=None if request.param == "json" else False
    )


@pytest.fixture
def submit(slurm_conf: str) -> Iterator[Submit]:
    env = {**os.environ, "SLURM_CONF": slurm_conf}
    submitted: list[str] = []

    def run(*args: str) -> int:
        done = subprocess.run(
            ["sbatch", "--parsable", "--output=/dev/null", "-N1", *args, "--wrap", "sleep 120"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        submitted.append(done.stdout.strip().split(";")[0])
        return int(submitted[-1])

    yield run
    if submitted:
        subprocess.run(["scancel", *submitted], env=env, check=False)


async def running(client: SlurmClient, job_id: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        obs = await client.show_job(job_id)
        if obs is not None and obs.state == "RUNNING":
            return
        await asyncio.sleep(0.2)
    pytest.fail(f"job {job_id} never started")


async def test_listing_answers_like_a_per_job_query(client: SlurmClient, submit: Submit) -> None:
    spoof_name = "x JobState=COMPLETED Restarts=7"
    jobs = [
        submit('--comment={"resurgo": {"mode": "observe"}} JobState=FAILED ExitCode=9:0'),
        submit(f"--job-name={spoof_name}"),
        submit(),
    ]
    for job in jobs:
        await running(client, job)
    snapshot = JobSnapshot(client, max_age=30.0)
    from_listing = await asyncio.gather(*(snapshot.show_job(j) for j in jobs * 20))
    assert snapshot.refreshes == 1, "sixty concurrent watchers share one listing"
    assert snapshot.fallbacks == 0
    for job, got in zip(jobs * 20, from_listing, strict=True):
        direct = await client.show_job(job)
        assert got == direct
        assert got is not None and got.state == "RUNNING" and got.restarts == 0
    assert from_listing[1] is not None and from_listing[1].name == spoof_name


async def test_state_changes_show_once_the_listing_is_older_than_max_age(
    client: SlurmClient, submit: Submit
) -> None:
    job = submit()
    await running(client, job)
    snapshot = JobSnapshot(client, max_age=0.5)
    assert (await snapshot.show_job(job)).state == "RUNNING"  # type: ignore[union-attr]
    await client.cancel(job)
    deadline = time.monotonic() + 20
    state = "RUNNING"
    while state == "RUNNING" and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        state = (await snapshot.show_job(job)).state  # type: ignore[union-attr]
    assert state in ("CANCELLED", "COMPLETING")
    # A job newer than a fresh listing is asked about on its own, not reported as gone.
    newer = submit()
    obs = await snapshot.show_job(newer)
    assert obs is not None and obs.job_id == newer
    assert await snapshot.show_job(10_000_000) is None


async def test_a_newline_in_user_text_cannot_impersonate_another_job(
    client: SlurmClient, submit: Submit
) -> None:
    victim = submit()
    await running(client, victim)
    forged = f"x\nJobId={victim} JobName=wrap JobState=COMPLETED Restarts=9 ExitCode=0:0"
    attacker = submit(f"--comment={forged}")
    snapshot = JobSnapshot(client, max_age=30.0)
    seen = await snapshot.show_job(victim)
    assert seen is not None and seen.state == "RUNNING" and seen.restarts == 0
    mine = await snapshot.show_job(attacker)
    assert mine is not None and mine.job_id == attacker and mine.comment == forged
    if not await client.structured():
        assert snapshot.fallbacks >= 1, "the victim, heading two records, is asked about alone"


async def test_a_listing_older_than_a_requeue_is_not_reported_to_the_next_attempt(
    client: SlurmClient, submit: Submit
) -> None:
    job = submit()
    await running(client, job)
    snapshot = JobSnapshot(client, max_age=30.0)
    before = await snapshot.show_job(job)
    assert before is not None and before.restarts == 0
    await client.requeue_hold(job)
    # The workflow requeued the job: its next watch (attempt 1) must not see the old copy,
    # which would look like a different job behind the same id.
    after = await snapshot.show_job(job, at_least_restarts=1)
    assert after is not None and after.restarts == 1 and after.state in ("COMPLETING", "PENDING")
    assert (await snapshot.show_job(job)).restarts == 0, "others keep the shared copy"  # type: ignore[union-attr]


class SlowListing:
    """The real runner, with `squeue --json` (the listing) taking a while longer, as it does
    with thousands of jobs on a busy slurmctld."""

    def __init__(self, inner: LocalRunner, delay: float) -> None:
        self.inner, self.delay = inner, delay

    async def run(self, argv: list[str], *, timeout: float = 30.0) -> CommandResult:
        if argv[:2] == ["squeue", "--json"]:
            await asyncio.sleep(self.delay)
        return await self.inner.run(argv, timeout=timeout)


async def test_a_watch_that_starts_during_a_listing_is_served_by_it(
    slurm_conf: str, submit: Submit
) -> None:
    """A thousand new watches arrive while one listing is being taken; each must be served by
    it, not ask alone (on 22.05 a lone ask is another whole listing: hundreds of them at once
    once took the machine out of memory)."""
    first, second = submit(), submit()
    client = SlurmClient(SlowListing(LocalRunner(slurm_conf), 1.0))  # type: ignore[arg-type]
    if not await client.structured():
        pytest.skip("this Slurm has no squeue --json")
    for job in (first, second):
        await running(client, job)
    snapshot = JobSnapshot(client, max_age=30.0)
    early = asyncio.create_task(snapshot.show_job(first))
    await asyncio.sleep(0.3)  # the listing is under way; `second` was never asked about
    late = await snapshot.show_job(second)
    assert late is not None and late.job_id == second and late.state == "RUNNING"
    assert (await early) is not None
    assert (snapshot.refreshes, snapshot.fallbacks) == (1, 0)


async def test_a_cancelled_command_does_not_outlive_its_caller() -> None:
    marker = f"{time.monotonic_ns() % 10**6}.5"  # a sleep nobody else runs
    task = asyncio.create_task(LocalRunner().run(["sleep", marker], timeout=60))
    await asyncio.sleep(0.5)
    assert _running("sleep", marker), "the command was meant to be running"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.5)
    assert not _running("sleep", marker), "the cancelled command is still running"


def _running(*argv: str) -> bool:
    found = subprocess.run(["pgrep", "-f", "^" + " ".join(argv) + "$"], capture_output=True)
    return found.returncode == 0


async def test_slow_listings_are_taken_less_often(slurm_conf: str, submit: Submit) -> None:
    """A listing that took T seconds is not taken again within LISTING_COST_FACTOR x T, so a
    big cluster's listings never take more than about a quarter of the controller's time; a
    job that appears meanwhile still waits only for the next one."""
    job = submit()
    client = SlurmClient(SlowListing(LocalRunner(slurm_conf), 0.5))  # type: ignore[arg-type]
    if not await client.structured():
        pytest.skip("this Slurm has no squeue --json")
    await running(client, job)
    snapshot = JobSnapshot(client, max_age=0.1)
    assert await snapshot.show_job(job) is not None
    assert snapshot.last_cost >= 0.5
    assert snapshot.effective_max_age == LISTING_COST_FACTOR * snapshot.last_cost
    await asyncio.sleep(0.3)  # older than max_age, younger than the listing's cost allows
    assert await snapshot.show_job(job) is not None
    assert snapshot.refreshes == 1
    newer = submit()
    assert (await snapshot.show_job(newer)) is not None
    assert (snapshot.refreshes, snapshot.fallbacks) == (2, 0)
