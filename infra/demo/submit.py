#!/usr/bin/env python3
"""Submit the demo job (train.sbatch) with a Resurgo directive and optional fault; print job id.

    python infra/demo/submit.py --nodes 2 --fault ecc --fault-node node2 --mode action \
        --out /tmp/demo.log [--iters 200 --sleep-per-iter 0.1] [-- extra trainer args]

The directive goes in ``--comment`` as ``{"resurgo": {"mode": ...}}`` (plus --environment,
--policy, --max-attempts, --directive-extra JSON fields). ``--no-directive`` submits without
opting in. Fault settings travel as RESURGO_FAULT* env (sbatch exports the environment); any
RESURGO_FAULT* already in this process's env is dropped so it cannot leak into the job.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SBATCH_SCRIPT = REPO / "infra" / "demo" / "train.sbatch"


def build_directive(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"mode": args.mode}
    if args.environment:
        body["environment"] = args.environment
    if args.policy:
        body["policy"] = args.policy
    if args.max_attempts is not None:
        body["max_attempts"] = args.max_attempts
    if args.directive_extra:
        extra = json.loads(args.directive_extra)
        if not isinstance(extra, dict):
            raise SystemExit("--directive-extra must be a JSON object")
        body.update(extra)
    return {"resurgo": body}


def build_command(args: argparse.Namespace, trainer_args: Sequence[str]) -> list[str]:
    cmd = [args.sbatch, "--parsable", f"--nodes={args.nodes}", f"--job-name={args.job_name}"]
    if not args.no_directive:
        cmd.append("--comment=" + json.dumps(build_directive(args), separators=(",", ":")))
    if args.out:
        cmd.append(f"--output={args.out}")
    if args.partition:
        cmd.append(f"--partition={args.partition}")
    if args.exclude:
        cmd.append(f"--exclude={args.exclude}")
    if args.nodelist:
        cmd.append(f"--nodelist={args.nodelist}")
    if args.hold:
        cmd.append("--hold")
    cmd.append(str(SBATCH_SCRIPT))
    if args.iters is not None:
        cmd += ["--iters", str(args.iters)]
    if args.sleep_per_iter is not None:
        cmd += ["--sleep-per-iter", str(args.sleep_per_iter)]
    if args.ckpt_every is not None:
        cmd += ["--ckpt-every", str(args.ckpt_every)]
    if args.collective_timeout is not None:
        cmd += ["--collective-timeout", str(args.collective_timeout)]
    if args.per_rank_timing:
        cmd.append("--per-rank-timing")
    cmd += list(trainer_args)
    return cmd


def build_env(args: argparse.Namespace, base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("RESURGO_FAULT")}
    env.setdefault("RESURGO_REPO", str(REPO))
    if args.fault and args.fault != "none":
        env["RESURGO_FAULT"] = args.fault
        for name, value in (
            ("RESURGO_FAULT_NODE", args.fault_node),
            ("RESURGO_FAULT_RANK", args.fault_rank),
            ("RESURGO_FAULT_AT", args.fault_at),
            ("RESURGO_FAULT_SLOWDOWN", args.fault_slowdown),
        ):
            if value is not None:
                env[name] = str(value)
        env["RESURGO_FAULT_ONCE"] = "0" if args.fault_every_attempt else "1"
    return env


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    trainer_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, trainer_args = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--out", help="job log (sbatch --output); default resurgo-demo-%%j.out")
    p.add_argument("--job-name", default="resurgo-demo")
    p.add_argument("--partition")
    p.add_argument("--exclude", help="sbatch --exclude node list")
    p.add_argument("--nodelist", help="sbatch --nodelist")
    p.add_argument("--hold", action="store_true", help="submit held")
    p.add_argument("--mode", default="observe", choices=["observe", "action"])
    p.add_argument("--environment")
    p.add_argument("--policy")
    p.add_argument("--max-attempts", type=int)
    p.add_argument("--directive-extra", help="JSON object merged into the directive")
    p.add_argument("--no-directive", action="store_true", help="do not opt in (no --comment)")
    p.add_argument("--fault", default=None, help="exception|sigkill|segfault|hang|... ")
    p.add_argument("--fault-node")
    p.add_argument("--fault-rank")
    p.add_argument("--fault-at", type=int)
    p.add_argument("--fault-slowdown", type=float)
    p.add_argument(
        "--fault-every-attempt",
        action="store_true",
        help="RESURGO_FAULT_ONCE=0 (default: only the first attempt)",
    )
    p.add_argument("--iters", type=int)
    p.add_argument("--sleep-per-iter", type=float)
    p.add_argument("--ckpt-every", type=int)
    p.add_argument("--collective-timeout", type=float)
    p.add_argument("--per-rank-timing", action="store_true")
    p.add_argument("--sbatch", default="sbatch", help="sbatch executable")
    p.add_argument("--dry-run", action="store_true", help="print the command, do not submit")
    return p.parse_args(argv), trainer_args


def main(argv: Sequence[str] | None = None) -> int:
    args, trainer_args = parse_args(sys.argv[1:] if argv is None else argv)
    cmd = build_command(args, trainer_args)
    env = build_env(args, dict(os.environ))
    if args.dry_run:
        fault_env = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith("RESURGO_FAULT")
        )
        print(f"{fault_env} {shlex.join(cmd)}".strip())
        return 0
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr or proc.stdout)
        return proc.returncode
    print(proc.stdout.strip().split(";")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
