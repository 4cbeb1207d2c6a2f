"""Exactly once under chaos: SIGKILL the worker and/or the controller at random moments while
jobs go through detect -> attribute -> act -> verify, restart them, and check the invariants.

Rounds: $RESURGO_CHAOS_ROUNDS (default 20); seed: $RESURGO_CHAOS_SEED (default random, printed).
Each round submits a job whose first attempt fails with an ECC error on task 1, waits (odd
rounds: a random 0-4 s; even rounds: until slurmctld logged the job's requeue, so the kill lands
inside the requeue -> release window, which is checked at the Slurm side: the job is still held
when the processes die), kills a random set of processes, waits a random 0-2 s and restarts them.

Invariants, for every job, counted where the commands land (slurmctld's log), not in the audit
store (which deduplicates by event id and so would hide a repeated step): exactly one requeue
and one hold release per job, Slurm's Restarts == 1, the job completed, nothing left held; and in
the audit trail every step once and the workflow converged. A last round takes the audit store
(its MariaDB table locked) away right after the requeue: the job must be released and run again
while it takes no writes, and every event must be in the store once it is back.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pymysql
import pytest
from sqlalchemy.engine import make_url

from resurgo.audit.store import AuditStoreUnavailable
from resurgo.devstack.localstack import REPO, wait_for
from tests.e2e.conftest import Deployment

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(1500)]

JOB = REPO / "tests" / "e2e" / "jobs" / "light_ecc.sbatch"
COMPONENTS = (("worker",), ("controller",), ("worker", "controller"))


def submit(dep: Deployment) -> int:
    directive = {"resurgo": {"mode": "action", "environment": dep.environment}}
    out = subprocess.run(
        ["sbatch", "--parsable", f"--output={dep.workdir / 'job-%j.out'}",
         "--comment=" + json.dumps(directive), str(JOB)],
        capture_output=True, text=True, check=True, cwd=dep.workdir,
        env={**os.environ, "SLURM_CONF": dep.slurm_conf},
    )  # fmt: skip
    return int(out.stdout.strip().split(";")[0])


def slurmctld_log(slurm_conf: str) -> Path:
    text = Path(slurm_conf).read_text()
    found = re.search(r"^SlurmctldLogFile=(\S+)", text, re.M)
    assert found, f"no SlurmctldLogFile in {slurm_conf}"
    return Path(found.group(1))


class SchedulerCommands:
    """Requeues and hold releases of each job, as slurmctld logged them (only lines written
    after this test started are read)."""

    def __init__(self, slurm_conf: str) -> None:
        self.path = slurmctld_log(slurm_conf)
        self.start = self.path.stat().st_size

    def lines(self) -> list[str]:
        with self.path.open("rb") as handle:
            handle.seek(self.start)
            return handle.read().decode(errors="replace").splitlines()

    def count(self, job_id: int) -> Counter[str]:
        found: Counter[str] = Counter()
        for line in self.lines():
            if re.search(rf"\bRequeuing JobId={job_id}\b", line):
                found["requeue"] += 1
            elif re.search(rf"release hold on JobId={job_id}\b", line):
                found["release"] += 1
        return found


def test_exactly_once_under_random_kills(
    deploy: Callable[..., Deployment], capsys: pytest.CaptureFixture[str]
) -> None:
    def say(message: str) -> None:
        # Straight to the terminal, so CI's log shows the rounds and the report of a pass too.
        with capsys.disabled():
            print(message, flush=True)

    rounds = int(os.environ.get("RESURGO_CHAOS_ROUNDS", "20"))
    seed = int(os.environ.get("RESURGO_CHAOS_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    say(f"\nchaos: {rounds} rounds, seed {seed}")
    dep = deploy()
    commands = SchedulerCommands(dep.slurm_conf)
    jobs: list[int] = []
    kills: Counter[str] = Counter()
    in_window = 0
    started = time.monotonic()
    for round_no in range(rounds):
        jobs.append(submit(dep))
        targeted = round_no % 2 == 1
        if targeted:
            wait_for(lambda j=jobs[-1]: commands.count(j)["requeue"], 180, interval=0.05,
                     what=f"the requeue of job {jobs[-1]}")  # fmt: skip
        else:
            time.sleep(rng.uniform(0, 4))
        victims = rng.choice(COMPONENTS)
        for component in victims:
            dep.stack.kill(component)
            kills[component] += 1
        if targeted:
            # Inside the window: requeued, not yet released when the processes died.
            landed = commands.count(jobs[-1])["release"] == 0
            assert landed, f"round {round_no + 1}: the release came before the kill"
            in_window += 1
        time.sleep(rng.uniform(0, 2))
        for component in victims:
            dep.stack.start(component)
        say(f"round {round_no + 1}: job {jobs[-1]}, killed {'+'.join(victims)}"
            + (" inside requeue -> release" if targeted else ""))  # fmt: skip

    def all_completed() -> bool:
        return all(any(e.type == "completed" for e in dep.events(j)) for j in jobs)

    wait_for(all_completed, 900, interval=2, what="every chaos job to complete")

    outcomes: Counter[str] = Counter()
    for job_id in jobs:
        job = dep.job(job_id)
        events = dep.events(job_id)
        steps = Counter(e.data.get("step") for e in events if e.type == "action")
        satisfied = sum(1 for e in events if e.type == "action"
                        and e.data.get("outcome") == "already_satisfied")  # fmt: skip
        outcomes["already_satisfied steps"] += satisfied
        assert job.restarts == 1, f"job {job_id} was requeued {job.restarts} times"
        at_slurm = commands.count(job_id)
        assert at_slurm == Counter({"requeue": 1, "release": 1}), (job_id, at_slurm)
        assert job.state == "COMPLETED" and not job.held, (job_id, job.state)
        assert len({e.event_id for e in events}) == len(events)
        if steps != Counter({"requeue_hold": 1, "exclude_nodes": 1, "release": 1}):
            # Say what the verdict rested on: a lost log line and a wrong rule look alike here.
            verdicts = [e.summary for e in events if e.type in ("attribution", "anomaly")]
            output = dep.workdir / f"job-{job_id}.out"
            tail = output.read_text(errors="replace")[-3000:] if output.exists() else "(none)"
            raise AssertionError(f"job {job_id}: steps {dict(steps)}; verdicts {verdicts}\n"
                                 f"--- output ---\n{tail}")  # fmt: skip
        reconciliations = [e for e in events if e.type == "reconciliation"]
        assert [r.data["status"] for r in reconciliations] == ["converged"], job_id
        assert len({e.workflow_id for e in events}) == 1
        outcomes["completed after one requeue"] += 1
    # Both deployments' workers would serve the shared `resurgo` queue (and write to their own
    # stores): only the outage deployment runs from here.
    dep.stack.stop_all()
    outage = audit_outage_during_a_hold(deploy, say)
    report = {
        "rounds": rounds,
        "kills inside requeue -> release": in_window,
        "audit outage": outage,
        "seed": seed,
        "kills": dict(kills),
        "jobs": len(jobs),
        "outcomes": dict(outcomes),
        "seconds": round(time.monotonic() - started),
    }
    say("chaos report: " + json.dumps(report))


def audit_outage_during_a_hold(
    deploy: Callable[..., Deployment], say: Callable[[str], None]
) -> dict[str, object]:
    """The audit store stops taking writes the moment the job is requeue-held: Resurgo must
    still release it and the job run again meanwhile; once the store takes writes again every
    event lands, once.

    The outage is a `LOCK TABLES ... READ` on this deployment's own table of the shared
    MariaDB: every write from the worker hangs, as against a dead server, while the other
    engineers' databases on the same server are not touched (and nothing is restarted)."""
    dep = deploy(mysql=True)
    commands = SchedulerCommands(dep.slurm_conf)
    url = make_url(dep.store.url)
    job_id = submit(dep)
    dep.wait_event(job_id, "monitoring_started", timeout=120)
    wait_for(lambda: commands.count(job_id)["requeue"], 300, interval=0.05,
             what=f"the requeue of job {job_id}")  # fmt: skip
    lock = pymysql.connect(host=url.host, port=url.port or 3306, user=url.username or "root",
                           password=url.password or "", database=url.database)  # fmt: skip
    down = time.monotonic()
    try:
        with lock.cursor() as cur:
            cur.execute("LOCK TABLES audit_events READ")
        assert commands.count(job_id)["release"] == 0, "released before the outage began"
        wait_for(lambda: commands.count(job_id)["release"] == 1, 400, interval=1,
                 what=f"job {job_id} released while the audit store takes no writes")  # fmt: skip
        released_after = round(time.monotonic() - down)
        say(f"audit outage: job {job_id} released {released_after}s into the outage")
    finally:
        with lock.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        lock.close()

    def completed() -> bool:
        try:
            return any(e.type == "completed" for e in dep.events(job_id))
        except AuditStoreUnavailable:
            return False  # the store is still coming back

    try:
        wait_for(completed, 600, interval=2, what=f"job {job_id} to complete after the outage")
    except TimeoutError:
        raise AssertionError(
            f"job {job_id} not completed; slurm {dep.job(job_id)}\n"
            f"events {[e.type for e in dep.events(job_id)]}\n{describe(dep, job_id)}\n"
            "--- worker ---\n"
            f"{dep.stack.log_tail('worker')}\n--- controller ---\n"
            f"{dep.stack.log_tail('controller')}"
        ) from None
    events = dep.events(job_id)
    assert len({e.event_id for e in events}) == len(events)
    assert Counter(e.data.get("step") for e in events if e.type == "action") == Counter(
        {"requeue_hold": 1, "exclude_nodes": 1, "release": 1}
    ), "\n".join(f"{e.type} {e.event_id} {e.summary[:80]}" for e in events)
    assert commands.count(job_id) == Counter({"requeue": 1, "release": 1})
    job = dep.job(job_id)
    assert job.restarts == 1 and job.state == "COMPLETED" and not job.held
    return {"job": job_id, "released_seconds_into_outage": released_after}


def describe(dep: Deployment, job_id: int) -> str:
    """The workflow's pending activities as Temporal sees them (for a failure message)."""
    import asyncio
    import tomllib

    from temporalio.client import Client

    address = tomllib.loads(dep.stack.config.read_text())["temporal"]["address"]

    async def run() -> str:
        client = await Client.connect(address)
        out = []
        async for wf in client.list_workflows(
            f"WorkflowId STARTS_WITH 'resurgo:{dep.name}:{job_id}:'"
        ):
            desc = await client.get_workflow_handle(wf.id, run_id=wf.run_id).describe()
            out.append(f"{wf.id} {wf.run_id} {desc.status}")
            for act in desc.raw_description.pending_activities:
                out.append(
                    f"  pending {act.activity_type.name} attempt {act.attempt} "
                    f"{act.last_failure.message[:300]}"
                )
        return "\n".join(out)

    try:
        return asyncio.run(run())
    except Exception as exc:  # diagnostics only
        return f"(describe failed: {exc})"
