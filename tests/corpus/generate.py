#!/usr/bin/env python3
"""Produce the real-run bundles of the attribution corpus on the local test Slurm cluster.

    export SLURM_CONF=/var/lib/resurgo-slurm/local/etc/slurm.conf
    .venv/bin/python tests/corpus/generate.py                 # every real case (~15 min)
    .venv/bin/python tests/corpus/generate.py --only 'ecc-*'   # some of them (fnmatch)
    .venv/bin/python tests/corpus/generate.py --list           # the cases and their labels

Each case submits `infra/demo/train.sbatch` (real `torch.distributed` DDP over gloo, one process
per Slurm task, `srun -l --kill-on-bad-exit=1`) with a fault injected through the trainer's
`RESURGO_FAULT*` environment, waits for the moment the case captures (the job's end, a stall
while it still runs, a given iteration) and writes `tests/corpus/<name>/`:

- `job.log`: the job's output file as Slurm wrote it;
- `scheduler.txt`: `scontrol show -o job <id>`, `scontrol show -o node <its nodes>` and the job's
  lines from the slurmctld log, captured at that moment;
- `dmesg_<node>.txt`: the kernel-style lines the trainer wrote (`--kernel-log`), for faults that
  announce a GPU error the way the driver does, under the name of the node that ran the rank;
- `slurmd_<node>.txt` (some cases): the job's lines from that node's slurmd log;
- `expected.json`: the label, derived from the fault design and Slurm's actual allocation
  (rank r runs on NodeList[r // tasks_per_node]), never from the attribution code.

Labels follow the rules in `tests/corpus/README.md`. Timestamps, job ids and pids differ on every
run; the labels do not. The cluster is shared: at most `--parallel` (default 2, the maximum
allowed) jobs at a time, only our own jobs are ever cancelled or requeued, no job carries a
Resurgo directive (no `--comment`), and nodes are never drained or resumed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent
SBATCH_SCRIPT = REPO / "infra" / "demo" / "train.sbatch"
SLURM_LOG_DIR = Path("/var/lib/resurgo-slurm/local/log")
SMALL = ["--hidden", "256", "--batch", "64"]
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}
PROGRESS = re.compile(r"^\s*\d+: +iteration +(\d+)/", re.M)


@dataclass
class Case:
    name: str
    nodes: int
    fault: str = "none"
    rank: str | None = None  # RESURGO_FAULT_RANK
    node_index: int | None = None  # fault on the node at this index of the allocation
    at: int = 10
    tpn: int = 1  # --ntasks-per-node
    iters: int = 30
    trainer: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    sbatch: list[str] = field(default_factory=list)
    # when to capture: "end" (job terminal), "stall" (running, no output for `stall` s),
    # "iteration" (running, progress reached `until`), "cancel" (scancel at `until`, then end),
    # "requeue" (end, requeue once (optionally excluding the culprit), end again)
    capture: str = "end"
    until: int = 0
    stall: float = 12.0
    exclude_culprit: bool = False
    every_attempt: bool = False
    prerun_iters: int = 0  # a first job that leaves a checkpoint this one resumes from
    slurmd: bool = False
    # label
    kind: str = "crash"
    category: str = "unknown"
    culprit: str = "fault"  # "fault": the node(s) of the faulting rank(s); "none": no culprit
    action: str = "requeue"
    note: str = ""


def _cases() -> list[Case]:
    c: list[Case] = []
    crash_unknown = {"kind": "crash", "category": "unknown", "culprit": "fault"}
    # A rank SIGKILLed: its node is named, the cause is unknown -> plain requeue.
    for name, nodes, rank, at, tpn in [
        ("sigkill-2n-r1", 2, "1", 12, 1),
        ("sigkill-3n-r0", 3, "0", 9, 1),
        ("sigkill-4n-r2", 4, "2", 17, 1),
        ("sigkill-2n-2tpn-r2", 2, "2", 15, 2),
        ("sigkill-3n-r2-late", 3, "2", 26, 1),
    ]:
        c.append(Case(name, nodes, "sigkill", rank, at=at, tpn=tpn, **crash_unknown))
    for name, nodes, rank, at, tpn in [
        ("segfault-2n-r0", 2, "0", 8, 1),
        ("segfault-3n-r1", 3, "1", 14, 1),
        ("segfault-4n-r3", 4, "3", 10, 1),
        ("segfault-2n-2tpn-r1", 2, "1", 11, 2),
    ]:
        # A native crash without hardware evidence on its host: framework/node software (B.14).
        c.append(Case(name, nodes, "segfault", rank, at=at, tpn=tpn, kind="crash",
                      category="system_software", action="requeue_excluding_nodes"))  # fmt: skip
    # An exception on one rank: the application's (no node to blame), not proven deterministic.
    for name, nodes, rank, at in [
        ("exception-2n-r1", 2, "1", 12),
        ("exception-3n-r0", 3, "0", 7),
        ("exception-4n-r2", 4, "2", 19),
    ]:
        c.append(Case(name, nodes, "exception", rank, at=at, kind="crash",
                      category="application", culprit="none", action="requeue"))  # fmt: skip
    # The same exception on every rank: stop.
    for name, nodes, at, tpn in [
        ("exception-all-2n", 2, 12, 1),
        ("exception-all-3n", 3, 5, 1),
        ("exception-all-4n", 4, 21, 1),
        ("exception-all-2n-2tpn", 2, 9, 2),
    ]:
        c.append(Case(name, nodes, "exception", "all", at=at, tpn=tpn, kind="crash",
                      category="application", culprit="none", action="stop"))  # fmt: skip
    hw = {"kind": "crash", "culprit": "fault", "action": "requeue_excluding_nodes"}
    for name, nodes, rank, at, tpn in [
        ("ecc-2n-r1", 2, "1", 12, 1),
        ("ecc-3n-r0", 3, "0", 8, 1),
        ("ecc-4n-r2", 4, "2", 16, 1),
        ("ecc-2n-2tpn-r3", 2, "3", 13, 2),
    ]:
        c.append(Case(name, nodes, "ecc", rank, at=at, tpn=tpn, category="hardware_gpu", **hw))
    for name, nodes, rank, at in [
        ("gpu-xid-2n-r1", 2, "1", 11),
        ("gpu-xid-3n-r2", 3, "2", 15),
        ("gpu-xid-4n-r0", 4, "0", 9),
    ]:
        c.append(Case(name, nodes, "gpu_xid", rank, at=at, category="hardware_gpu", **hw))
    for name, nodes, rank, at in [
        ("nccl-2n-r0", 2, "0", 10),
        ("nccl-3n-r1", 3, "1", 13),
        ("nccl-4n-r3", 4, "3", 7),
    ]:
        c.append(Case(name, nodes, "nccl", rank, at=at, category="hardware_network", **hw))
    for name, nodes, rank, at in [
        ("ib-2n-r1", 2, "1", 14),
        ("ib-3n-r2", 3, "2", 9),
        ("ib-4n-r1", 4, "1", 18),
    ]:
        c.append(Case(name, nodes, "ib", rank, at=at, category="hardware_network", **hw))
    # Checkpoint save fails with ENOSPC (shared storage full): system software, no node.
    for name, nodes, at in [("ckpt-fail-2n", 2, 10), ("ckpt-fail-3n", 3, 20)]:
        c.append(Case(name, nodes, "ckpt_fail", None, at=at, trainer=["--ckpt-every", "10"],
                      category="system_software", culprit="none", action="requeue"))  # fmt: skip
    # NaN loss: the application (data/model), but a retry from the checkpoint may pass it.
    for name, nodes, rank, at in [
        ("nan-2n-r1", 2, "1", 12),
        ("nan-3n-r0", 3, "0", 9),
        ("nan-4n-r2", 4, "2", 22),
    ]:
        c.append(Case(name, nodes, "nan", rank, at=at, category="application", culprit="none",
                      action="requeue"))  # fmt: skip
    # A rank hangs; its peers hit the gloo timeout. Not the peers: the silent rank.
    for name, nodes, rank, at in [
        ("hang-timeout-2n-r1", 2, "1", 9),
        ("hang-timeout-3n-r2", 3, "2", 12),
        ("hang-timeout-4n-r0", 4, "0", 8),
    ]:
        c.append(Case(name, nodes, "hang", rank, at=at, trainer=["--collective-timeout", "8"],
                      kind="hang", category="unknown", action="requeue"))  # fmt: skip
    # Hangs captured while the job still runs (no error anywhere): hang/unknown, no culprit.
    for name, nodes, fault, rank, at in [
        ("hang-running-2n-r1", 2, "hang", "1", 10),
        ("hang-running-3n-r0", 3, "hang", "0", 14),
        ("hang-silent-2n", 2, "hang_silent", None, 8),
        ("hang-silent-4n", 4, "hang_silent", None, 16),
    ]:
        c.append(Case(name, nodes, fault, rank, at=at, capture="stall",
                      trainer=["--collective-timeout", "600"], kind="hang", category="unknown",
                      culprit="none", action="requeue"))  # fmt: skip
    # One slow rank (per-rank timing on), captured while running: straggler on its node, cause
    # unknown; the policy excludes a named straggler node.
    for name, nodes, rank, at in [
        ("straggler-2n-r1", 2, "1", 5),
        ("straggler-3n-r2", 3, "2", 4),
        ("straggler-4n-r0", 4, "0", 6),
    ]:
        c.append(Case(name, nodes, "slow", rank, at=at, iters=200, capture="iteration",
                      until=at + 14, trainer=["--per-rank-timing"],
                      env={"RESURGO_FAULT_SLOWDOWN": "0.25"}, kind="straggler",
                      category="unknown", culprit="fault",
                      action="requeue_excluding_nodes"))  # fmt: skip
    healthy = {"kind": "none", "category": "none", "culprit": "none", "action": "none"}
    c += [
        Case("healthy-2n", 2, **healthy),
        Case(
            "healthy-3n-per-rank-timing", 3, trainer=["--per-rank-timing"], slurmd=True, **healthy
        ),
        Case("healthy-4n", 4, iters=40, **healthy),
        Case(
            "healthy-2n-2tpn-cpp-info-noise",
            2,
            tpn=2,
            env={"TORCH_CPP_LOG_LEVEL": "INFO"},
            **healthy,
        ),
        Case("healthy-3n-resumed", 3, iters=40, prerun_iters=20, **healthy),
        Case("healthy-4n-2tpn-timing", 4, tpn=2, trainer=["--per-rank-timing"], **healthy),
        # Requeued once after an ECC error, then the second attempt completes: healthy now.
        Case(
            "requeued-ecc-then-completed",
            2,
            "ecc",
            "1",
            at=12,
            capture="requeue",
            exclude_culprit=True,
            **healthy,
        ),
        # Same fault on every attempt; attempt 1 runs without the first culprit node: only the
        # node of the last attempt is to blame.
        Case(
            "requeued-ecc-twice-excluded",
            2,
            "ecc",
            "1",
            at=12,
            capture="requeue",
            exclude_culprit=True,
            every_attempt=True,
            category="hardware_gpu",
            culprit="fault",
            action="requeue_excluding_nodes",
        ),
    ]
    # TORCH_DISTRIBUTED_DEBUG=DETAIL makes DDP's init segfault on every rank here (torch 2.13,
    # gloo): the same native crash everywhere is the software's and names no node.
    c.append(
        Case(
            "segfault-every-rank-ddp-debug-detail",
            2,
            tpn=2,
            env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "TORCH_CPP_LOG_LEVEL": "INFO"},
            category="system_software",
            culprit="none",
            action="requeue",
        )
    )
    # Scheduler outcomes.
    c += [
        Case(
            "timeout-2n",
            2,
            iters=100000,
            trainer=["--sleep-per-iter", "0.05"],
            sbatch=["--time=1"],
            category="scheduler",
            culprit="none",
            action="requeue",
            note="TIME LIMIT while making progress",
        ),
        Case(
            "timeout-3n-hang-silent",
            3,
            "hang_silent",
            None,
            at=8,
            iters=100000,
            trainer=["--collective-timeout", "600"],
            sbatch=["--time=1"],
            category="scheduler",
            culprit="none",
            action="requeue",
            note="ran into its time limit after going quiet; the scheduler's outcome",
        ),
        Case(
            "cancelled-by-owner-2n",
            2,
            iters=100000,
            trainer=["--sleep-per-iter", "0.05"],
            capture="cancel",
            until=25,
            category="scheduler",
            culprit="none",
            action="none",
        ),
        Case(
            "cancelled-by-owner-3n-hang",
            3,
            "hang_silent",
            None,
            at=6,
            iters=1000,
            trainer=["--collective-timeout", "600"],
            capture="cancel",
            until=0,
            category="scheduler",
            culprit="none",
            action="none",
        ),
    ]
    # Stragglers seen only once the job is over (it completed, slowly): still the slow node.
    for name, nodes, rank in [
        ("straggler-completed-2n-r0", 2, "0"),
        ("straggler-completed-3n-r2", 3, "2"),
    ]:
        c.append(Case(name, nodes, "slow", rank, at=4, trainer=["--per-rank-timing"],
                      env={"RESURGO_FAULT_SLOWDOWN": "0.3"}, kind="straggler",
                      category="unknown", action="requeue_excluding_nodes"))  # fmt: skip
    # Other node names: pinned allocations.
    for name, fault, rank, nodelist, category, action, kind in [
        (
            "ecc-node3-4-r0",
            "ecc",
            "0",
            "node[3-4]",
            "hardware_gpu",
            "requeue_excluding_nodes",
            "crash",
        ),
        ("sigkill-node2-4-r1", "sigkill", "1", "node2,node4", "unknown", "requeue", "crash"),
        (
            "ib-node2-3-r0",
            "ib",
            "0",
            "node[2-3]",
            "hardware_network",
            "requeue_excluding_nodes",
            "crash",
        ),
        ("hang-timeout-node3-4-r1", "hang", "1", "node[3-4]", "unknown", "requeue", "hang"),
        (
            "segfault-node2-3-r1",
            "segfault",
            "1",
            "node[2-3]",
            "system_software",
            "requeue_excluding_nodes",
            "crash",
        ),
    ]:
        trainer = ["--collective-timeout", "8"] if fault == "hang" else []
        c.append(Case(name, 2, fault, rank, at=11, sbatch=[f"--nodelist={nodelist}"],
                      trainer=trainer, kind=kind, category=category, action=action))  # fmt: skip
    c += [
        Case(
            "nccl-2n-2tpn-r2",
            2,
            "nccl",
            "2",
            at=9,
            tpn=2,
            category="hardware_network",
            action="requeue_excluding_nodes",
        ),
        Case(
            "ckpt-fail-4n",
            4,
            "ckpt_fail",
            None,
            at=10,
            trainer=["--ckpt-every", "10"],
            category="system_software",
            culprit="none",
            action="requeue",
        ),
        Case(
            "exception-all-3n-2tpn",
            3,
            "exception",
            "all",
            at=15,
            tpn=2,
            category="application",
            culprit="none",
            action="stop",
        ),
    ]
    # Variation with slurmd logs alongside.
    for case in c:
        if case.name in ("sigkill-3n-r0", "ecc-4n-r2", "exception-all-3n", "hang-timeout-3n-r2"):
            case.slurmd = True
    return c


# ------------------------------------------------------------------------------------ slurm
def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def show_job(job_id: int) -> dict[str, str]:
    out = run(["scontrol", "show", "-o", "job", str(job_id)]).stdout.strip()
    fields: dict[str, str] = {}
    for m in re.finditer(r"(?:^| )([A-Z][\w:/]*)=(\S*)", out):
        fields.setdefault(m.group(1), m.group(2))
    fields["_raw"] = out
    return fields


def expand(hostlist: str) -> list[str]:
    out = run(["scontrol", "show", "hostnames", hostlist]).stdout.split()
    return out


def wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def sbatch(case: Case, work: Path, log: Path, extra_env: dict[str, str], iters: int) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESURGO_FAULT")}
    env["RESURGO_REPO"] = str(REPO)
    env.update(extra_env)
    cmd = [
        "sbatch", "--parsable", f"--nodes={case.nodes}", f"--ntasks-per-node={case.tpn}",
        "--job-name=resurgo-corpus", f"--output={log}", *case.sbatch, str(SBATCH_SCRIPT),
        "--iters", str(iters), *SMALL, *case.trainer,
    ]  # fmt: skip
    proc = run(cmd, env=env, cwd=work)
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch failed: {proc.stderr or proc.stdout}")
    return int(proc.stdout.strip().split(";")[0])


def fault_env(case: Case, work: Path, attempt_every: bool) -> dict[str, str]:
    if case.fault == "none":
        return dict(case.env)
    env = {
        "RESURGO_FAULT": case.fault,
        "RESURGO_FAULT_AT": str(case.at),
        "RESURGO_FAULT_ONCE": "0" if attempt_every else "1",
        "RESURGO_KERNEL_LOG": str(work / "kernel.log"),
        **case.env,
    }
    if case.rank is not None:
        env["RESURGO_FAULT_RANK"] = case.rank
    return env


def terminal(job_id: int) -> bool:
    return show_job(job_id).get("JobState", "") in TERMINAL


def capture_scheduler(job_id: int) -> tuple[str, list[str]]:
    job = show_job(job_id)
    nodes = expand(job.get("NodeList", "")) if job.get("NodeList", "(null)") != "(null)" else []
    parts = [f"# scontrol show -o job {job_id}", job["_raw"]]
    if nodes:
        out = run(["scontrol", "show", "-o", "node", ",".join(nodes)]).stdout.strip()
        parts += [f"# scontrol show -o node {','.join(nodes)}", out]
    ctld = _log_lines(SLURM_LOG_DIR / "slurmctld.log", job_id)
    if ctld:
        parts += ["# slurmctld.log (this job)", *ctld]
    return "\n".join(parts) + "\n", nodes


def _log_lines(path: Path, job_id: int) -> list[str]:
    if not path.exists():
        return []
    pat = re.compile(rf"(?:JobId=|StepId=|job_id=|\[){job_id}(?:\b|\.)")
    with path.open(errors="replace") as fh:
        return [line.rstrip("\n") for line in fh if pat.search(line)]


def progress(log: Path) -> int:
    text = log.read_text(errors="replace") if log.exists() else ""
    found = PROGRESS.findall(text)
    return int(found[-1]) if found else -1


# ------------------------------------------------------------------------------------- cases
def run_case(case: Case, out_root: Path, work_root: Path, lock: threading.Lock) -> str:
    work = work_root / case.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "job.log"
    if case.prerun_iters:
        pre = sbatch(case, work, work / "prerun.log", {"RESURGO_CKPT_DIR": str(work / "ckpt")},
                     case.prerun_iters)  # fmt: skip
        wait(lambda: terminal(pre), 300, f"prerun job {pre}")
    env = fault_env(case, work, case.every_attempt)
    if case.prerun_iters:
        env["RESURGO_CKPT_DIR"] = str(work / "ckpt")
    job_id = sbatch(case, work, log, env, case.iters)
    nodes_used: list[str] = []
    try:
        if case.capture in ("end", "requeue"):
            wait(lambda: terminal(job_id), 400, f"job {job_id} to end")
            if case.capture == "requeue":
                first = show_job(job_id)
                nodes_used = expand(first["NodeList"])
                culprit = _fault_nodes(case, nodes_used)
                run(["scontrol", "requeuehold", str(job_id)])
                wait(lambda: show_job(job_id).get("JobState") == "PENDING", 60, "requeue")
                if case.exclude_culprit and culprit:
                    run(["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={culprit[0]}"])
                run(["scontrol", "release", str(job_id)])
                run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
                wait(lambda: show_job(job_id).get("JobState") not in ("PENDING",), 200, "rerun")
                wait(lambda: terminal(job_id), 400, f"job {job_id} attempt 1 to end")
            time.sleep(2.0)
            text, nodes = capture_scheduler(job_id)
            shutil.copy(log, work / "captured.log")
        elif case.capture == "stall":
            wait(lambda: progress(log) >= case.at - 1, 200, "the fault iteration")
            last = -1
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < case.stall:
                size = log.stat().st_size
                if size != last:
                    last, quiet_since = size, time.monotonic()
                time.sleep(0.5)
            shutil.copy(log, work / "captured.log")
            text, nodes = capture_scheduler(job_id)
        elif case.capture == "iteration":
            wait(lambda: progress(log) >= case.until, 300, f"iteration {case.until}")
            shutil.copy(log, work / "captured.log")
            text, nodes = capture_scheduler(job_id)
        elif case.capture == "cancel":
            if case.until:
                wait(lambda: progress(log) >= case.until, 300, f"iteration {case.until}")
            else:
                wait(lambda: progress(log) >= case.at - 1, 300, "the fault iteration")
                time.sleep(6)
            run(["scancel", str(job_id)])
            wait(lambda: terminal(job_id), 120, f"job {job_id} to be cancelled")
            time.sleep(2.0)
            text, nodes = capture_scheduler(job_id)
            shutil.copy(log, work / "captured.log")
        else:
            raise ValueError(case.capture)
    finally:
        if not terminal(job_id):
            run(["scancel", str(job_id)])  # our own job, captured already
    culprits = _fault_nodes(case, nodes) if case.culprit == "fault" else []
    with lock:
        dest = out_root / case.name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.copy(work / "captured.log", dest / "job.log")
        (dest / "scheduler.txt").write_text(text)
        kernel = work / "kernel.log"
        if kernel.exists() and kernel.stat().st_size and culprits:
            shutil.copy(kernel, dest / f"dmesg_{culprits[0]}.txt")
        if case.slurmd:
            for node in nodes:
                lines = _log_lines(SLURM_LOG_DIR / f"slurmd.{node}.log", job_id)
                if lines:
                    (dest / f"slurmd_{node}.txt").write_text("\n".join(lines) + "\n")
        expected = {
            "kind": case.kind,
            "category": case.category,
            "culprit_nodes": culprits,
            "action": case.action,
            "origin": "real",
            "fault": {
                "kind": case.fault,
                "rank": case.rank,
                "at": case.at,
                "nodes": case.nodes,
                "tasks_per_node": case.tpn,
                "capture": case.capture,
            },
            "slurm_job_id": job_id,
            "note": case.note,
        }
        (dest / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    return f"{case.name}: job {job_id} on {','.join(nodes)} -> {culprits or '-'}"


def _fault_nodes(case: Case, nodes: list[str]) -> list[str]:
    """Nodes running the faulting ranks: Slurm's block layout puts rank r on nodes[r // tpn]."""
    if case.fault == "none" or not nodes:
        return []
    world = case.nodes * case.tpn
    if case.rank is None:
        ranks = [world - 1]
    elif case.rank == "all":
        ranks = list(range(world))
    else:
        ranks = [int(r) for r in case.rank.split(",")]
    return sorted({nodes[r // case.tpn] for r in ranks})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", action="append", help="case name pattern (fnmatch), repeatable")
    p.add_argument("--out", type=Path, default=CORPUS)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/resurgo-corpus"))
    p.add_argument("--parallel", type=int, default=2, choices=[1, 2])
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    cases = _cases()
    if args.only:
        cases = [c for c in cases if any(fnmatch.fnmatch(c.name, pat) for pat in args.only)]
    if args.list:
        for c in cases:
            print(f"{c.name:34} {c.fault:12} {c.kind:9} {c.category:17} {c.action}")
        return 0
    if "SLURM_CONF" not in os.environ:
        print("set SLURM_CONF (see infra/slurm/env.sh)", file=sys.stderr)
        return 2
    lock = threading.Lock()
    failed = 0
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = {pool.submit(run_case, c, args.out, args.workdir, lock): c for c in cases}
        for future, case in futures.items():
            try:
                print(future.result(), flush=True)
            except Exception as exc:
                failed += 1
                print(f"{case.name}: FAILED {exc!r}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
