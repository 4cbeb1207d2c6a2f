"""How sure an application failure is, and so whether it stops the job on its first occurrence.

The job's code, data, configuration or environment fail the same way on any nodes: stop-grade
on the first occurrence (attribution-labels.md: every application failure stops). What is
known to recur (a catalogue entry's determinism, the job's own paths, the job's own code
raising) stops; an error about reaching something shared, a path that may be a mount missing
on one node, or a library's error of no known class is retried first. A CUDA OOM whose memory
another process holds is the node's state, not the job's.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.causes import (
    _first_to_exit,
    _transient,
    job_owned_path,
)
from resurgo.attribute.events import Event
from resurgo.attribute.oom_holders import held_by_the_job
from resurgo.attribute.stages_common import _held_by_other
from resurgo.attribute.tracebacks import GENERIC_APPLICATION_IDS, LIBRARY_CALL_FAILED
from resurgo.contracts import Category, LogLine

# Application errors that reproduce wherever the job runs (a retry cannot help).
DETERMINISTIC_APP = frozenset(
    {
        "python_app_exception",
        "application_shape_mismatch",
        "nccl_invalid_usage",
        "cuda_invalid_device",
        "cuda_device_side_assert",
    }
)
# Application errors that a retry (from the last checkpoint, elsewhere) may well get past.
NONDETERMINISTIC_APP = frozenset(
    {"loss_nan", "nonfinite_values", "cuda_oom", "host_oom_kill", "slurm_oom_kill"}
)
# A path the job names that is missing or forbidden: on one node a mount (retry elsewhere), on
# every rank of every node the job's own data or configuration (failure taxonomy B.8).
CONFIGURED_PATHS = frozenset(
    {"file_not_found", "permission_denied", "container_image_file_missing"}
)


# PyTorch's OOM message accounts for the GPU's memory (c10/cuda/CUDACachingAllocator.cpp): since
# 2.1 `GPU 2 has a total capacity of 79.11 GiB of which 1.06 GiB is free. [Process N has ...]
# Including non-PyTorch memory, this process has 3.12 GiB memory in use`, before it `(GPU 0;
# 11.17 GiB total capacity; 505.96 MiB already allocated; 12.50 MiB free; 530.00 MiB reserved
# in total by PyTorch)`. What is neither free nor this process's is held by other processes on
# that GPU ("something else is hanging on to the memory", pytorch/pytorch#40863).
_SIZE = r"(?P<{0}>[\d.]+) (?P<{0}_unit>bytes|[KMG]iB)"
_TOTAL_FREE = re.compile(
    r"\bGPU (?P<gpu>\d+) has a total capac(?:i)?ty of "
    + _SIZE.format("total")
    + " of which "
    + _SIZE.format("free")
    + " is free"
)
_THIS_PROCESS = re.compile(r"\bthis process has " + _SIZE.format("own") + " memory in use")
_BEFORE_2_1 = re.compile(
    r"\(GPU (?P<gpu>\d+); " + _SIZE.format("total") + r" total capacity; [\d.]+ (?:bytes|[KMG]iB) "
    r"already allocated; "
    + _SIZE.format("free")
    + " free; "
    + _SIZE.format("own")
    + r" reserved in total by PyTorch\)"
)
# `Of the allocated memory 48.15 GiB is allocated by PyTorch, ...`
_BY_PYTORCH = re.compile(
    r"\bOf the allocated memory " + _SIZE.format("alloc") + r" is allocated by PyTorch\b"
)
_GIB = {"bytes": 1 / 1024**3, "KiB": 1 / 1024**2, "MiB": 1 / 1024, "GiB": 1.0}


def _gib(m: re.Match[str], name: str) -> float:
    return float(m[name]) * _GIB[m[f"{name}_unit"]]


# The share of the GPU held by neither free memory nor the failing process above which other
# processes hold it. Since PyTorch 2.1 the message counts the process's whole use ("Including
# non-PyTorch memory, this process has ..."), so a quarter of an 80 GB GPU is no context or
# library overhead; before 2.1 it counted only PyTorch's reserve, leaving the CUDA context and
# other libraries' allocations out, so half.
OTHERS_SHARE = 0.25
OTHERS_SHARE_BEFORE_2_1 = 0.5


def _accounting(message: str) -> tuple[str, float, float, float, float] | None:
    """(GPU index, total, free, this process's GiB, the share of the GPU others must hold to
    count) from an OOM message, if it says."""
    if (old := _BEFORE_2_1.search(message)) is not None:
        return (old["gpu"], _gib(old, "total"), _gib(old, "free"), _gib(old, "own"),
                OTHERS_SHARE_BEFORE_2_1)  # fmt: skip
    tf, own = _TOTAL_FREE.search(message), _THIS_PROCESS.search(message)
    if tf is None or own is None:
        return None
    # (NVML sees no process from inside a container's PID namespace: the message then says
    # `this process has 0 bytes memory in use` beside the GiB PyTorch itself holds, and what
    # other processes hold cannot be told from it.)
    torch = _BY_PYTORCH.search(message)
    if _gib(own, "own") == 0 and torch is not None and _gib(torch, "alloc") > 0:
        return None
    return tf["gpu"], _gib(tf, "total"), _gib(tf, "free"), _gib(own, "own"), OTHERS_SHARE


def _held_outside(message: str, same: list[Event], a: Analysis) -> bool:
    """Much of the GPU is held by processes other than the one that ran out (neither free nor
    its own, see OTHERS_SHARE): another job's leftover, unless two of this job's ranks
    on one node ran out on the same GPU index (the job mapped them onto one GPU)."""
    acc = _accounting(message)
    if acc is None:
        return False
    gpu, total, free, own, share = acc
    if total - free - own < share * total:
        return False
    shared: dict[str | None, set[int | str | None]] = {}
    for e in same:
        if (other := _accounting(e.message)) is not None and other[0] == gpu:
            shared.setdefault(event_node(a, e), set()).add(
                e.rank if e.rank is not None else e.actor
            )
    return all(len(ranks) < 2 for ranks in shared.values())


def application_verdict(
    a: Analysis,
    first: Event,
    same: list[Event],
    victims: set[str],
    nodes: list[str],
    ranks: list[int],
    everywhere: bool,
    summary: str,
    evidence: list[LogLine],
) -> Verdict:
    """The verdict on an application root failure `first` (`same`: its events on every rank)."""
    mid = first.match.id
    on_line = [e for e in a.events if e.line == first.line]
    spread = len({n for e in same if (n := event_node(a, e))}) >= 2
    recurs = mid in a.registry and a.registry.get(mid).determinism == "recurs"
    deterministic = (
        mid in DETERMINISTIC_APP
        or recurs
        or (mid in CONFIGURED_PATHS and everywhere and spread)
        # A checkpoint path only the saving rank writes: the job's configured directory;
        # and permissions do not change on a retry (a missing file may be a mount).
        or (mid in CONFIGURED_PATHS and any(e.checkpoint_save for e in same))
        or (mid in CONFIGURED_PATHS and job_owned_path(a, first.message))  # its own tree
        or mid == "permission_denied"
        # Rank 0 alone reads what the job configures first (its data index, its
        # tokenizer): a mount missing on a node fails every rank there, not rank 0 only.
        or (mid == "file_not_found" and (ranks or _only_task_zero_failed(a)) == [0] and same)
        or (mid in GENERIC_APPLICATION_IDS and not _transient(first))
    ) and not any(e.match.id in NONDETERMINISTIC_APP or "nan" in e.match.tags for e in on_line)
    # The job's code, data, configuration or environment: the same fault comes back on
    # any nodes, so it is stop-grade on its first occurrence (attribution-labels.md). OOM
    # and NaN are the model's or the batch's too; only an exception about reaching
    # something shared (a hub, a store) may pass on a retry.
    job_scoped = mid in GENERIC_APPLICATION_IDS or (
        mid in a.registry and a.registry.get(mid).scope == "job"
    )
    if (odd := _one_node_short_of_gpus(a, mid, same)) is not None:
        return Verdict(
            Category.SYSTEM_SOFTWARE, f"{first.key}|one_node", f"{summary}: only {odd}'s ranks "
            "fail on the GPUs they were given (fewer than the job asks for, or two ranks on "
            "one), the others start: that node's GPU configuration (MIG left enabled, a GPU "
            "missing, its gres.conf)", 0.75,
            culprits=[odd], ranks=ranks, evidence=evidence,
        )  # fmt: skip
    held = _held_by_other(first.message) if mid == "cuda_oom" else None
    if mid == "cuda_oom" and held is None and _held_outside(first.message, same, a):
        held = "gpu"
    if held is not None and not held_by_the_job(a, first.line.text):
        # Another process holds the GPU's memory (a leftover of an earlier job): the
        # node's state, not the job's batch size (attribution-labels tie-breaker 4).
        return Verdict(
            Category.SYSTEM_SOFTWARE, f"oom|held_by_other|{held}", f"{summary}: another "
            "process holds the GPU's memory", 0.75,
            # (a job of one node: the GPU is that node's, whoever printed the message)
            culprits=nodes or _first_to_exit(a, victims)
            or (list(a.node_list) if len(a.node_list) == 1 else []),
            ranks=ranks, evidence=evidence,
        )  # fmt: skip
    if deterministic:
        confidence = 0.95 if everywhere else (0.85 if job_scoped else 0.7)
    elif mid == LIBRARY_CALL_FAILED and not everywhere:
        # Likely the job's use of the library, but one rank's error of no known class:
        # retried once (unless it names a file of the job's own tree: its data).
        confidence = 0.8 if job_owned_path(a, first.message) else 0.65
    elif (mid in GENERIC_APPLICATION_IDS and _transient(first)) or mid == "file_not_found":
        # Reaching something shared, or a path missing on some nodes only (a mount):
        # a retry may pass.
        confidence = 0.6
    else:
        confidence = 0.85 if everywhere else 0.8
    return Verdict(
        Category.APPLICATION, first.key, summary, confidence, ranks=ranks, evidence=evidence
    )


def _only_task_zero_failed(a: Analysis) -> list[int]:
    """[0] when srun saw task 0 alone exit with an error (the rest terminated after it): an
    unlabelled traceback is then task 0's, the job's first rank."""
    failed = {x.task for x in a.scan.exit_order if x.status != "terminated" and x.code != 0}
    return [0] if failed == {0} else []


# Asking for a GPU index the process cannot see: the job's configuration when every node says
# it, one node's GPU setup when only that node's ranks do (a GPU fallen off, MIG mode left on
# from another partition: nvidia-smi's `mig.mode.current`, NVIDIA MIG user guide).
DEVICE_COUNT_IDS = frozenset({"cuda_invalid_device", "nccl_duplicate_gpu"})


# Ray's prefix on an actor's output (`(LLMRayActor pid=112084, ip=10.9.3.5) ...`).
_RAY_ACTOR = re.compile(r"^\((?P<role>\w{1,80}) pid=\d+")


def _one_node_short_of_gpus(a: Analysis, mid: str, same: list[Event]) -> str | None:
    if mid not in DEVICE_COUNT_IDS:
        return None
    roles = {m["role"] for e in same if (m := _RAY_ACTOR.match(e.line.text)) is not None}
    if len(roles) >= 2:
        return None  # (two of the job's own actor roles placed on one GPU: its placement)
    seen = {n for e in same if (n := event_node(a, e)) is not None}
    job_nodes = set(a.job_nodes())
    if len(seen) != 1 or len(job_nodes) < 2 or not seen < job_nodes:
        return None
    return seen.pop()
