#!/usr/bin/env python3
"""The compose quickstart's `demo-trainer`: submit the opted-in demo job with a fault through
infra/demo/submit.py, then follow its audit trail until Resurgo's recovery is complete.

    python infra/docker/demo_trainer.py [--fault ecc] [--fault-node node2] [--mode action]
        [--workdir /var/tmp/resurgo-demo] [--environment demo] [--timeout 900] [--dry-run]

Exit 0 when (action mode) the recovery converged and the job completed, or (observe mode) the
job's story ended; 1 otherwise. `--dry-run` prints the submit command and exits.
The audit store is the config's `[audit] url` (compose: RESURGO_AUDIT__URL_FILE, a secret),
else $RESURGO_AUDIT_URL.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUBMIT = REPO / "infra" / "demo" / "submit.py"


def submit_command(args: argparse.Namespace) -> list[str]:
    cmd = [
        sys.executable, str(SUBMIT),
        "--nodes", "2", "--mode", args.mode, "--environment", args.environment,
        "--fault", args.fault, "--fault-at", "30",
        "--out", str(Path(args.workdir) / "job-%j.out"),
        "--iters", "80", "--ckpt-every", "10", "--sleep-per-iter", "0.1",
    ]  # fmt: skip
    cmd += ["--fault-node", args.fault_node] if args.fault_node else ["--fault-rank", "1"]
    return cmd


def wait_for_slurm(timeout: float) -> None:
    """The Slurm container is healthy before this one starts; still, give sbatch a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(["scontrol", "ping"], capture_output=True).returncode == 0:
            return
        time.sleep(2)
    raise SystemExit("Slurm did not answer `scontrol ping`")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--fault", default=os.environ.get("DEMO_FAULT", "ecc"))
    p.add_argument("--fault-node", default=os.environ.get("DEMO_FAULT_NODE", ""))
    p.add_argument(
        "--mode", default=os.environ.get("DEMO_MODE", "action"), choices=["action", "observe"]
    )
    p.add_argument("--environment", default=os.environ.get("DEMO_ENVIRONMENT", "demo"))
    p.add_argument("--workdir", default=os.environ.get("DEMO_WORKDIR", "/var/tmp/resurgo-demo"))
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--dry-run", action="store_true", help="print the submit command and exit")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)

    cmd = submit_command(args)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0

    from resurgo.audit.store import AuditStore, store_url_from_env
    from resurgo.cli.timeline import render_timeline
    from resurgo.devstack.demo import console, follow

    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    wait_for_slurm(120)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=args.workdir, check=False)
    if done.returncode != 0:
        print(done.stderr or done.stdout, file=sys.stderr)
        return 1
    job_id = int(done.stdout.strip().splitlines()[-1])
    console.print(
        f"submitted job {job_id} ({args.mode} mode, fault {args.fault!r}); "
        f"log {Path(args.workdir) / f'job-{job_id}.out'}"
    )
    from resurgo.config import load_config

    store = AuditStore(load_config().audit.url or store_url_from_env())
    events = follow(store, job_id, timeout=args.timeout)
    console.rule(f"audit timeline of job {job_id}")
    render_timeline(events, console)
    if events:
        console.print(
            "Temporal UI: http://localhost:8233/namespaces/default/workflows/"
            f"{events[0].workflow_id}"
        )
    converged = any(
        e.type == "reconciliation" and e.data.get("status") == "converged" for e in events
    )
    completed = any(e.type == "completed" for e in events)
    if args.mode == "action" and not (converged and completed):
        console.print("[red]recovery did not converge[/red]")
        return 1
    console.print("[green]done[/green]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
