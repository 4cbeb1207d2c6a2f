"""Exactly once under chaos: SIGKILL the worker and/or the controller at random moments while
jobs go through detect -> attribute -> act -> verify, restart them, and check the invariants.

Rounds: $RESURGO_CHAOS_ROUNDS (default 20); seed: $RESURGO_CHAOS_SEED (default random, printed).
Each round submits a job whose first attempt fails with an ECC error on task 1, waits a random
0-4 s, kills a random set of processes, waits a random 0-2 s and restarts them. Invariants, for
every job: exactly one requeue (Slurm's Restarts == 1), the job completed, nothing left held,
every audit event present once, and the workflow converged.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable

import pytest

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
    jobs: list[int] = []
    kills: Counter[str] = Counter()
    started = time.monotonic()
    for round_no in range(rounds):
        jobs.append(submit(dep))
        time.sleep(rng.uniform(0, 4))
        victims = rng.choice(COMPONENTS)
        for component in victims:
            dep.stack.kill(component)
            kills[component] += 1
        time.sleep(rng.uniform(0, 2))
        for component in victims:
            dep.stack.start(component)
        say(f"round {round_no + 1}: job {jobs[-1]}, killed {'+'.join(victims)}")

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
        assert job.state == "COMPLETED" and not job.held, (job_id, job.state)
        assert len({e.event_id for e in events}) == len(events)
        assert steps == Counter({"requeue_hold": 1, "exclude_nodes": 1, "release": 1}), steps
        reconciliations = [e for e in events if e.type == "reconciliation"]
        assert [r.data["status"] for r in reconciliations] == ["converged"], job_id
        assert len({e.workflow_id for e in events}) == 1
        outcomes["completed after one requeue"] += 1
    report = {
        "rounds": rounds,
        "seed": seed,
        "kills": dict(kills),
        "jobs": len(jobs),
        "outcomes": dict(outcomes),
        "seconds": round(time.monotonic() - started),
    }
    say("chaos report: " + json.dumps(report))
