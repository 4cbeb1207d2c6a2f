"""`resurgo demo`: a real recovery on the local Slurm cluster, start to finish, unattended.

Starts what is missing (Slurm cluster, Temporal dev server with its Web UI), runs the worker and
the controller, submits an opted-in 2-node DDP job that fails on one node, and follows the audit
trail until the job completes on other nodes. Exit 0 only if the recovery converged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from resurgo.audit.store import AuditStore, StoredAuditEvent
from resurgo.cli.timeline import render_timeline
from resurgo.contracts import AuditEventType
from resurgo.devstack.devserver import start_dev_server
from resurgo.devstack.localstack import REPO, LocalStack, write_config

console = Console(width=None if sys.stdout.isatty() else 160)
FINAL_TYPES = {AuditEventType.COMPLETED, AuditEventType.JOB_GONE, AuditEventType.DIRECTIVE_INVALID}
UI_PORT = 8233


def start_slurm() -> str:
    done = subprocess.run(
        ["bash", str(REPO / "infra/slurm/start.sh"), "--resume-nodes"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"Slurm did not start:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return [ln for ln in done.stdout.splitlines() if ln.startswith("SLURM_CONF=")][-1][11:]


def submit(slurm_conf: str, workdir: Path, fault: str, fault_node: str, mode: str) -> int:
    directive = {"resurgo": {"mode": mode, "environment": "demo"}}
    env = {
        "SLURM_CONF": slurm_conf,
        "RESURGO_FAULT": fault,
        "RESURGO_FAULT_AT": "30",
        "RESURGO_REPO": str(REPO),
    }
    if fault_node:
        env["RESURGO_FAULT_NODE"] = fault_node
    else:
        env["RESURGO_FAULT_RANK"] = "1"
    out = subprocess.run(
        [
            "sbatch", "--parsable", "--nodes=2", "--job-name=resurgo-demo",
            f"--output={workdir / 'job-%j.out'}",
            "--comment=" + json.dumps(directive, separators=(",", ":")),
            str(REPO / "infra/demo/train.sbatch"),
            "--iters", "80", "--ckpt-every", "10", "--sleep-per-iter", "0.1",
        ],
        capture_output=True, text=True, env={**os.environ, **env}, check=True, cwd=workdir,
    )  # fmt: skip
    return int(out.stdout.strip().split(";")[0])


def follow(store: AuditStore, job_id: int, timeout: float) -> list[StoredAuditEvent]:
    """Print audit events as they land; return them all once the job's story ends."""
    seen: list[StoredAuditEvent] = []
    deadline = time.monotonic() + timeout
    after = None
    while time.monotonic() < deadline:
        batch = store.query(job_id=job_id, after_id=after, limit=500)
        for event in batch:
            seen.append(event)
            after = event.id
            console.print(
                f"[dim]{event.at:%H:%M:%S}[/dim] [bold]{event.type:<20}[/bold] {event.summary}"
            )
        if any(e.type in FINAL_TYPES for e in seen) or any(
            e.type == AuditEventType.RECONCILIATION and e.data.get("status") == "abandoned"
            for e in seen
        ):
            return seen
        time.sleep(0.5)
    return seen


def run_demo(*, workdir: Path, fault: str, fault_node: str, mode: str, keep_ui: bool = True) -> int:
    workdir.mkdir(parents=True, exist_ok=True)
    console.rule("Resurgo demo")
    console.print("starting the local 4-node Slurm cluster ...")
    slurm_conf = start_slurm()
    console.print("starting Temporal (dev server, SQLite, Web UI) ...")
    server = start_dev_server(
        db_file=str(workdir / "temporal.db"), log_file=str(workdir / "temporal.log"),
        ui_port=UI_PORT,
    )  # fmt: skip
    audit_url = f"sqlite:///{workdir / 'audit.db'}"
    config = write_config(
        workdir / "resurgo.toml",
        temporal_address="127.0.0.1:7233",
        audit_url=audit_url,
        slurm_conf=slurm_conf,
        acknowledge=True,
        environment="demo",
        loose_breaker=True,
    )
    console.print(
        f"config {config}: cluster 'local' with acknowledge_scheduler_actions = true "
        "(the operator's explicit opt-in to scheduler actions)"
    )
    stack = LocalStack(config=config, logdir=workdir / "logs")
    stack.start_all()
    try:
        job_id = submit(slurm_conf, workdir, fault, fault_node, mode)
        console.print(
            f"submitted job {job_id} ({mode} mode, fault {fault!r} on "
            f"{fault_node or 'the node running rank 1'}); log {workdir / f'job-{job_id}.out'}"
        )
        store = AuditStore(audit_url)
        events = follow(store, job_id, timeout=600)
    finally:
        stack.stop_all()
    console.rule(f"audit timeline of job {job_id}")
    render_timeline(events, console)
    workflow_id = events[0].workflow_id if events else "?"
    console.print(
        f"Temporal UI: http://localhost:{UI_PORT}/namespaces/default/workflows/{workflow_id}"
    )
    converged = any(
        e.type == AuditEventType.RECONCILIATION and e.data.get("status") == "converged"
        for e in events
    )
    completed = any(e.type == AuditEventType.COMPLETED for e in events)
    if server is not None and keep_ui:
        console.print(
            f"the Temporal dev server keeps running (pid {server.pid}) so the UI stays up; "
            f"stop it with: kill {server.pid}"
        )
    elif server is not None:
        server.terminate()
        server.wait(30)
    if mode == "action" and not (converged and completed):
        console.print("[red]recovery did not converge[/red]; logs in " + str(workdir / "logs"))
        return 1
    console.print("[green]recovery converged and the job completed[/green]")
    return 0
