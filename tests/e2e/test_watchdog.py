"""The fail-open watchdog against real held jobs on the real local Slurm cluster.

No worker, no controller, no Temporal, no database: the config points Temporal and the audit
store at addresses where nothing listens, and the watchdog must not care. Jobs are put in a
Resurgo hold by hand exactly as `SlurmActions.requeue_hold` does (`scontrol requeuehold`, then
the AdminComment from `hold_comment`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resurgo.contracts import JobObservation
from resurgo.devstack.localstack import REPO, wait_for
from resurgo.slurm.actions import hold_comment
from resurgo.slurm.parsers import parse_job
from tests.sshd import SshServer, running_sshd

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(240)]


class Cluster:
    """The shared Slurm cluster, touching only the jobs this test submitted."""

    def __init__(self, slurm_conf: str) -> None:
        self.env = {**os.environ, "SLURM_CONF": slurm_conf, "TZ": "UTC"}
        self.jobs: list[int] = []

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=30)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    def job(self, job_id: int) -> JobObservation:
        return parse_job(self.run("scontrol", "show", "-o", "job", str(job_id)).splitlines()[0])

    def submit(self, name: str) -> int:
        out = self.run(
            "sbatch", "--parsable", "--requeue", "--ntasks=1", "--time=3", "--output=/dev/null",
            f"--job-name={name}", "--wrap", "sleep 60",
        )  # fmt: skip
        job_id = int(out.strip().split(";")[0])
        self.jobs.append(job_id)
        return job_id

    def held_job(self, name: str, admin_comment: str | None) -> int:
        """A running job, requeue-held, then tagged: what Resurgo's requeue_hold leaves."""
        job_id = self.submit(name)
        wait_for(lambda: self.job(job_id).state == "RUNNING", 60, what=f"job {job_id} running")
        self.run("scontrol", "requeuehold", str(job_id))
        wait_for(lambda: self.job(job_id).held, 60, what=f"job {job_id} held")
        if admin_comment is not None:
            self.run("scontrol", "update", f"JobId={job_id}", f"AdminComment={admin_comment}")
        return job_id

    def cancel_all(self) -> None:
        if self.jobs:
            subprocess.run(["scancel", *map(str, self.jobs)], env=self.env, timeout=30)


@pytest.fixture
def cluster(slurm_conf: str) -> Iterator[Cluster]:
    made = Cluster(slurm_conf)
    yield made
    made.cancel_all()


SPOOF = "AdminComment=resurgo:hold key=spoof deadline=2000-01-01T00:00:00Z"


def write_config(path: Path, name: str, slurm_conf: str, ssh: SshServer | None = None) -> Path:
    """Temporal and the audit store point at nothing: the watchdog must not need them."""
    body = [
        "[temporal]",
        'address = "127.0.0.1:1"',
        "[audit]",
        'url = "mysql+pymysql://nobody:nothing@127.0.0.1:1/none"',
        f"[clusters.{name}]",
        f'mode = "{"ssh" if ssh else "local"}"',
        f"slurm_conf = {json.dumps(slurm_conf)}",
    ]
    if ssh:
        body += [f"[clusters.{name}.ssh]", ssh.toml()]
    path.write_text("\n".join(body) + "\n")
    return path


def watchdog_argv(config: Path, name: str, record: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "resurgo.cli.main", "watchdog", "--config", str(config),
        "--cluster", name, "--record", str(record), *extra,
    ]  # fmt: skip


def once(config: Path, name: str, record: Path, *extra: str) -> list[dict[str, object]]:
    done = subprocess.run(
        watchdog_argv(config, name, record, "--once", *extra),
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_watchdog_releases_only_overdue_resurgo_holds(
    cluster: Cluster, slurm_conf: str, tmp_path: Path
) -> None:
    name = "wd" + uuid.uuid4().hex[:8]
    config = write_config(tmp_path / "resurgo.toml", name, slurm_conf)
    key = f"resurgo:{name}:1:0:g1:requeue_hold"
    later = cluster.held_job(
        f"{name}-later", hold_comment(key + "-later", datetime.now(UTC) + timedelta(hours=1))
    )
    untagged = cluster.held_job(f"{name}-untagged", None)
    foreign = cluster.held_job(f"{name}-foreign", "ops: hold for maintenance deadline=2000")
    # User text posing as the tag (the job name is printed unquoted before AdminComment).
    spoofed = cluster.held_job(f"{name} {SPOOF}", None)
    untouched = {j: cluster.job(j) for j in (later, untagged, foreign, spoofed)}
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    due = cluster.held_job(f"{name}-due", hold_comment(key, deadline))

    # Before the deadline, even in act mode: nothing.
    act_record = tmp_path / "act.jsonl"
    assert once(config, name, act_record, "--act") == []
    assert datetime.now(UTC) < deadline, "the machine is too slow for this test's timing"
    assert cluster.job(due).held and cluster.job(due).admin_comment == hold_comment(key, deadline)
    assert not act_record.exists()

    # Past the deadline, observe mode: reported, nothing changed.
    while datetime.now(UTC) <= deadline:
        time.sleep(0.5)
    observe_record = tmp_path / "observe.jsonl"
    reported = once(config, name, observe_record, "--observe")
    assert [(r["job_id"], r["action"], r["mode"]) for r in reported] == [
        (due, "would_release", "observe")
    ]
    assert records(observe_record) == reported
    time.sleep(1)
    assert cluster.job(due).held and cluster.job(due).admin_comment == hold_comment(key, deadline)

    # Act mode, as a long-running process: released, started again, recorded.
    proc = subprocess.Popen(
        watchdog_argv(config, name, act_record, "--act", "--interval", "1"),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: cluster.job(due).state == "RUNNING", 30, what="the overdue job running")
        wait_for(lambda: records(act_record), 10, what="the release record")
        time.sleep(2.5)  # a few more rounds: nothing else is touched, nothing released twice
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    job = cluster.job(due)
    assert job.state == "RUNNING" and job.restarts == 1
    assert job.admin_comment.startswith(f"resurgo:released-by-watchdog key={key} at=")
    [entry] = records(act_record)
    assert entry["job_id"] == due and entry["action"] == "released" and entry["key"] == key
    assert entry["mode"] == "act" and entry["cluster"] == name
    assert entry["deadline"] == deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert json.loads(out.splitlines()[0]) == entry
    for job_id, before in untouched.items():
        now = cluster.job(job_id)
        assert now.held and now.restarts == before.restarts == 1, job_id
        assert now.admin_comment == before.admin_comment, job_id


@pytest.fixture
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def test_watchdog_over_ssh_and_survives_an_unreachable_slurm(
    cluster: Cluster, slurm_conf: str, sshd: SshServer, tmp_path: Path
) -> None:
    name = "wd" + uuid.uuid4().hex[:8]
    config = write_config(tmp_path / "resurgo.toml", name, slurm_conf, ssh=sshd)
    key = f"resurgo:{name}:2:0:g1:requeue_hold"
    overdue = cluster.held_job(f"{name}-overdue", hold_comment(key, datetime.now(UTC)))

    # The login node is down: each round logs and retries, the process keeps running.
    sshd.stop()
    record, log = tmp_path / "ssh.jsonl", tmp_path / "watchdog.log"
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            watchdog_argv(config, name, record, "--act", "--interval", "1"),
            cwd=REPO, stdout=subprocess.PIPE, stderr=log_file, text=True,
        )  # fmt: skip
    try:
        wait_for(lambda: "Slurm unreachable" in log.read_text(), 60, what="a failed round")
        assert proc.poll() is None and cluster.job(overdue).held
        sshd.start()
        # Up to one backoff step (<= 30 s) plus a handshake, on a busy machine.
        wait_for(lambda: cluster.job(overdue).state == "RUNNING", 100, what="release over SSH")
        wait_for(lambda: records(record), 10, what="the release record")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0, log.read_text()
    [entry] = records(record)
    assert entry["job_id"] == overdue and entry["action"] == "released"
    assert cluster.job(overdue).admin_comment.startswith("resurgo:released-by-watchdog")
