"""End-to-end fixtures: a Resurgo deployment (real processes) per test, on its own cluster name.

Every test gets a unique cluster name (so its own `slurm.<name>` task queue) and a unique
directive environment (so its controller discovers only its own jobs), on the shared real Slurm
cluster and the shared real Temporal dev server.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from resurgo.audit.store import AuditStore, StoredAuditEvent
from resurgo.contracts import JobObservation
from resurgo.devstack.localstack import REPO, LocalStack, wait_for, write_config
from resurgo.slurm.parsers import parse_job
from tests.mariadb import ensure_mariadb, fresh_database

SBATCH = REPO / "infra" / "demo" / "train.sbatch"


@dataclass
class Deployment:
    name: str
    environment: str
    stack: LocalStack
    store: AuditStore
    slurm_conf: str
    workdir: Path

    def submit(
        self,
        *,
        mode: str = "action",
        fault: str | None = None,
        fault_rank: str | None = "1",
        fault_at: int = 12,
        fault_once: bool = True,
        iters: int = 40,
        comment: str | None = None,
        name: str = "resurgo-e2e",
        extra_directive: dict[str, object] | None = None,
        trainer_args: tuple[str, ...] = (),
        fault_env: dict[str, str] | None = None,
    ) -> int:
        directive = {"resurgo": {"mode": mode, "environment": self.environment,
                                 **(extra_directive or {})}}  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("RESURGO_FAULT")}
        env.update(SLURM_CONF=self.slurm_conf, RESURGO_REPO=str(REPO))
        if fault:
            env.update(
                RESURGO_FAULT=fault,
                RESURGO_FAULT_AT=str(fault_at),
                RESURGO_FAULT_ONCE="1" if fault_once else "0",
            )
            if fault_rank is not None:
                env["RESURGO_FAULT_RANK"] = fault_rank
            env.update(fault_env or {})
        argv = [
            "sbatch", "--parsable", "--nodes=2", f"--job-name={name}",
            f"--output={self.workdir / 'job-%j.out'}",
            "--comment=" + (comment if comment is not None else json.dumps(directive)),
            str(SBATCH), "--iters", str(iters), "--ckpt-every", "5", "--sleep-per-iter", "0.05",
            "--hidden", "256", "--batch", "64", *trainer_args,
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=self.workdir)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> JobObservation:
        out = subprocess.run(
            ["scontrol", "show", "-o", "job", str(job_id)],
            capture_output=True, text=True, env={**os.environ, "SLURM_CONF": self.slurm_conf,
                                                 "TZ": "UTC"}, check=True,
        )  # fmt: skip
        return parse_job(out.stdout.splitlines()[0])

    def events(self, job_id: int) -> list[StoredAuditEvent]:
        return list(self.store.iter_all(job_id=job_id, cluster=self.name))

    def wait_event(
        self,
        job_id: int,
        type_: str,
        timeout: float = 180,
        where: Callable[[StoredAuditEvent], bool] | None = None,
    ) -> StoredAuditEvent:
        def found() -> StoredAuditEvent | None:
            for event in self.events(job_id):
                if event.type == type_ and (where is None or where(event)):
                    return event
            return None

        try:
            return wait_for(found, timeout, what=f"audit event {type_} for job {job_id}")  # type: ignore[no-any-return]
        except TimeoutError:
            types = [e.type for e in self.events(job_id)]
            raise AssertionError(
                f"no {type_} event; got {types}\n"
                f"--- controller ---\n{self.stack.log_tail('controller')}\n"
                f"--- worker ---\n{self.stack.log_tail('worker')}"
                f"\n--- job log ---\n{self.job_log(job_id)[-3000:]}"
            ) from None

    def job_log(self, job_id: int) -> str:
        path = self.workdir / f"job-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def cancel(self, job_id: int) -> None:
        subprocess.run(["scancel", str(job_id)], env={**os.environ, "SLURM_CONF": self.slurm_conf})


@pytest.fixture
def deploy(
    tmp_path: Path, temporal_address: str, slurm_conf: str
) -> Iterator[Callable[..., Deployment]]:
    made: list[Deployment] = []
    cleanups: list[Callable[[], None]] = []

    def make(
        *,
        acknowledge: bool = True,
        mysql: bool = False,
        controller_env: dict[str, str] | None = None,
    ) -> Deployment:
        name = "t" + uuid.uuid4().hex[:8]
        if mysql:
            url, drop = fresh_database(ensure_mariadb())
            cleanups.append(drop)
        else:
            url = f"sqlite:///{tmp_path / f'{name}-audit.db'}"
        config = write_config(
            tmp_path / f"{name}.toml", temporal_address=temporal_address, audit_url=url,
            cluster=name, slurm_conf=slurm_conf, acknowledge=acknowledge, environment=name,
            discovery_interval=0.5, loose_breaker=True,
        )  # fmt: skip
        workdir = tmp_path / name
        workdir.mkdir()
        stack = LocalStack(config=config, logdir=workdir / "logs", cluster=name)
        stack.start("worker")
        stack.start("controller", controller_env)
        dep = Deployment(name, name, stack, AuditStore(url), slurm_conf, workdir)
        made.append(dep)
        return dep

    yield make
    for dep in made:
        dep.stack.stop_all()
        dep.store.close()
    for cleanup in cleanups:
        cleanup()
