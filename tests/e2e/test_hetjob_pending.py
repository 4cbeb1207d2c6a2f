"""A heterogeneous job that has not run yet (issue 16): its workflow's monitoring_started records
each component's own job id as discovery listed it, so a component's id already names the
hetjob in the API before any attempt started (real Slurm, Temporal, worker and controller)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable

from resurgo.devstack.localstack import REPO
from resurgo.slurm.json_records import Listing
from tests.e2e.conftest import Deployment
from tests.e2e.hetjob_names import gateway_reads


def test_a_pending_hetjobs_component_id_names_it(
    deploy: Callable[..., Deployment], temporal_address: str
) -> None:
    dep = deploy()
    directive = {"resurgo": {"mode": "action", "environment": dep.environment}}
    env = {**os.environ, "SLURM_CONF": dep.slurm_conf, "TZ": "UTC"}
    done = subprocess.run(
        ["sbatch", "--parsable", "--begin=now+1hour", f"--output={dep.workdir / 'job-%j.out'}",
         "--comment=" + json.dumps(directive), str(REPO / "tests/e2e/jobs/het_task.sbatch")],
        capture_output=True, text=True, cwd=dep.workdir, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    leader = int(done.stdout.strip().split(";")[0])
    try:
        begun = dep.wait_event(leader, "monitoring_started", timeout=120)
        out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, env=env,
                             check=True).stdout  # fmt: skip
        parts = Listing(out).components(leader)
        assert [p["job_state"] for p in parts] == ["PENDING", "PENDING"], parts
        own_ids = [p["job_id"] for p in parts]
        assert begun.data["components"] == [
            {"component": f"{leader}+0", "job_id": own_ids[0]},
            {"component": f"{leader}+1", "job_id": own_ids[1]},
        ]
        assert not any(e.type == "attempt_started" for e in dep.events(leader))
        said = f"{own_ids[1]} is component {leader}+1 of heterogeneous job {leader}"
        detail, timeline, page = gateway_reads(dep, temporal_address, own_ids[1])
        assert detail.job_id == leader and detail.live and detail.named_by == said
        assert detail.workflow_id == begun.workflow_id
        assert timeline.named_by == said and page.named_by == said
        assert begun.id in [e.id for e in page.events]
    finally:
        dep.cancel(leader)
