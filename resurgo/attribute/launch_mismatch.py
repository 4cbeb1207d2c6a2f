"""A launch whose stated size contradicts the allocation Slurm gave the job.

The job's launch line states how many peers to wait for: torchrun's `--nnodes=4` (or its
agent's `min_nodes : 4`, torch/distributed/launcher/api.py), JAX's
`jax.distributed.initialize(num_processes=4, ...)`. When that number cannot be met by the
allocation the scheduler shows (`NumNodes=1`, `NumTasks=2`), the processes that exist wait in
the rendezvous or the coordination service's barrier until it times out
(`RendezvousTimeoutError`, `DEADLINE_EXCEEDED: Barrier timed out`), on every attempt: the job's
own arguments, application, stop (attribution-labels.md tie-breaker 6; pytorch/examples#1279,
karpathy/nanoGPT#222 for torchrun; ayaka14732/llama-2-jax#20, AI-Hypercomputer/gpu-recipes#2
for JAX). No node is to blame: every node did what it was told. Its kind is a hang: no step
ever started and the processes idled until a timeout ended them (attribution-labels.md, kind).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.liveness import last_progress
from resurgo.contracts import AnomalyKind, Category, LogLine

# torchrun/torch.distributed.run `--nnodes=4`, `--nnodes 2:4` (elastic: the minimum counts),
# and the elastic agent's own launch-config dump `min_nodes    : 4`.
_TORCHRUN = re.compile(r"\b(?:torchrun|torch\.distributed\.(?:run|launch))\b")
_NNODES = re.compile(r"--nnodes[= ](?P<n>\d{1,5})(?::\d{1,5})?\b")
_MIN_NODES = re.compile(r"^\s*min_nodes\s*:\s*(?P<n>\d{1,5})\s*$")
# `jax.distributed.initialize(..., num_processes=4, ...)` as the job printed or quoted it.
_JAX_INIT = re.compile(
    r"\bjax\.distributed\.initialize\([^)]{0,400}?\bnum_processes\s*=\s*(?P<n>\d{1,6})\b"
)
# Waiting for peers that never came: torchrun's rendezvous, the c10d store, JAX's coordination
# service (xla/pjrt/distributed/client.cc: `Failed to connect to distributed JAX controller`,
# `DEADLINE_EXCEEDED: Barrier timed out`).
_TORCH_WAITING = frozenset({"rendezvous_error", "dist_store_timeout"})
_JAX_WAITING = re.compile(
    r"DEADLINE_EXCEEDED: Barrier timed out|Failed to connect to distributed JAX controller"
)
_SCRIPT_LINES = 400


def _stated(
    a: Analysis, pattern: re.Pattern[str], gate: re.Pattern[str] | None
) -> tuple[int, LogLine] | None:
    """The one number the job's launch states (several different ones: no verdict)."""
    found: dict[int, LogLine] = {}
    for entry in [*a.lines[:_SCRIPT_LINES], *a.facts.lines]:
        text = entry.text[:2000]
        if text.lstrip().startswith("#SBATCH"):
            continue
        if gate is not None and not gate.search(text):
            continue
        if (m := pattern.search(text)) is not None:
            found.setdefault(int(m["n"]), entry)
    return next(iter(found.items())) if len(found) == 1 else None


def _field(a: Analysis, name: str) -> int | None:
    value = a.facts.job_fields.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def launch_exceeds_allocation(a: Analysis) -> Verdict | None:
    """The launch waits for more nodes (torchrun) or a different number of processes (JAX)
    than Slurm started, and the job died waiting for them before a single step."""
    if a.running or last_progress(a) is not None:
        return None
    roots = [e for e in a.events if e.root and e.serious and e.origin == "job"]
    waiting = [e for e in roots if e.match.id in _TORCH_WAITING]
    nodes = _field(a, "NumNodes")
    if nodes is None and a.facts.job is not None and a.facts.job.node_list:
        nodes = len(a.facts.job.node_list)
    if nodes is None:  # the job's node list as the output states it, else srun's exits
        nodes = len(set(a.job_nodes())) or None
    if not roots and a.scheduler_outcome() in ("timeout", "timeout_no_checkpoint"):
        # A rendezvous told to wait longer than the job's time limit (`--rdzv_conf timeout=`)
        # prints nothing until Slurm ends the job: a hang of the same launch.
        stated = _stated(a, _NNODES, _TORCHRUN) or _stated(a, _MIN_NODES, None)
        if nodes is not None and stated is not None and stated[0] > nodes:
            return Verdict(
                Category.APPLICATION, "launch|world_larger_than_launched",
                f"the launch waits for {stated[0]} nodes (torchrun --nnodes) but the allocation "
                f"has {nodes}: it waited for nodes never requested until its time limit", 0.85,
                evidence=[stated[1]], kind=AnomalyKind.HANG,
            )  # fmt: skip
    if waiting and all(e.match.id in _TORCH_WAITING for e in roots):
        stated = _stated(a, _NNODES, _TORCHRUN) or _stated(a, _MIN_NODES, None)
        if nodes is not None and stated is not None and stated[0] > nodes:
            return Verdict(
                Category.APPLICATION, "launch|world_larger_than_launched",
                f"the launch waits for {stated[0]} nodes (torchrun --nnodes) but the allocation "
                f"has {nodes}: the rendezvous timed out for nodes never requested", 0.85,
                evidence=[stated[1], *(e.line for e in waiting[:2])], kind=AnomalyKind.HANG,
            )  # fmt: skip
        return None
    jax = [e for e in a.lines if "DEADLINE_EXCEEDED" in e.text or "JAX controller" in e.text]
    jax = [e for e in jax if _JAX_WAITING.search(e.text)]
    tasks = a.facts.num_tasks
    if not jax or tasks is None or any(e.match.id in _TORCH_WAITING for e in roots):
        return None
    stated = _stated(a, _JAX_INIT, None)
    if stated is None or stated[0] == tasks:
        return None
    return Verdict(
        Category.APPLICATION, "launch|world_larger_than_launched",
        f"jax.distributed.initialize(num_processes={stated[0]}) but Slurm started {tasks} "
        "tasks: the coordination service's barrier timed out on processes that never existed",
        0.85, evidence=[stated[1], *jax[:2]], kind=AnomalyKind.HANG,
    )  # fmt: skip
