"""The audit store (real MariaDB) goes away mid-recovery: audit writes are retried, land once it
is back, and nothing is duplicated or done twice."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable

import pymysql
import pytest

from tests.e2e.conftest import Deployment
from tests.e2e.test_chaos import submit as submit_light
from tests.mariadb import ensure_mariadb

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.mysql, pytest.mark.timeout(600)]


def mariadb_up() -> bool:
    try:
        pymysql.connect(host="127.0.0.1", port=3306, user="root", connect_timeout=2).close()
    except pymysql.err.OperationalError:
        return False
    return True


def test_audit_writes_survive_a_mariadb_outage(deploy: Callable[..., Deployment]) -> None:
    dep = deploy(mysql=True)
    job_id = submit_light(dep)
    dep.wait_event(job_id, "attempt_started", timeout=120)
    subprocess.run(["mariadb-admin", "--protocol=tcp", "-h127.0.0.1", "-uroot", "shutdown"],
                   check=True, timeout=60)  # fmt: skip
    try:
        assert not mariadb_up()
        time.sleep(15)  # the job fails meanwhile; advice cannot be recorded, so nothing is done
        held_while_down = dep.job(job_id)
        assert held_while_down.restarts == 0, "acted before the advice was recorded"
    finally:
        ensure_mariadb()
    assert mariadb_up()
    dep.wait_event(job_id, "completed", timeout=300)
    events = dep.events(job_id)
    assert len({e.event_id for e in events}) == len(events)
    counts = Counter(e.type for e in events)
    for kind in ("anomaly", "attribution", "advice", "reconciliation", "completed"):
        assert counts[kind] == 1, counts
    assert Counter(e.data.get("step") for e in events if e.type == "action") == Counter(
        {"requeue_hold": 1, "exclude_nodes": 1, "release": 1}
    )
    assert dep.job(job_id).restarts == 1
