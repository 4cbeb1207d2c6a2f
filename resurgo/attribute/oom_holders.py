"""Whose processes hold a GPU's memory when PyTorch reports an out-of-memory error.

PyTorch's message (c10/cuda/CUDACachingAllocator.cpp, since 2.1) lists NVML's processes on the
GPU (`Process N has 39.36 GiB memory in use`) and the failing process's own allocator. Every
holder being the job's own (two ranks on one GPU, or the failing process itself) makes the OOM
the job's configuration, not another job's leftover (attribution-labels.md tie-breaker 4).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.detect.lines import strip_prefixes

_HOLDER = re.compile(r"\bProcess (\d+) has \d+(?:\.\d+)? GiB memory in use")
# The job's own process ids as its launchers print them: torchrun's `(pid: N)` and `Sending
# process N closing signal`, NCCL's `host:pid:tid [dev]`, DeepSpeed's `Killing subprocess N`
# (deepspeed/launcher/launch.py sigkill_handler), Ray's `(ActorName pid=N)` log prefix.
_OWN_PID = re.compile(
    r"\(pid: (\d+)\)|\bSending process (\d+) closing signal|^\S+?:(\d+):\d+ \[\d+\] NCCL"
    r"|\bKilling subprocess (\d+)\b"
)
_RAY_PID = re.compile(r"\(\w+ pid=(\d+)(?:,|\))")  # (the normaliser peels it off the body)
# PyTorch's accounting of the failing process's own memory (CUDACachingAllocator.cpp since 2.1:
# `Process N has 39.36 GiB memory in use. Of the allocated memory 38.34 GiB is allocated by
# PyTorch, and 385.64 MiB is reserved by PyTorch but unallocated`): NVML lists the failing
# process itself among the holders, so a lone holder using what this process's allocator holds
# (plus the CUDA context) is this process.
_ONE_HOLDER = re.compile(r"\bProcess \d+ has (?P<held>\d+(?:\.\d+)?) GiB memory in use\b")
_OWN_ALLOCATED = re.compile(
    r"\bOf the allocated memory (?P<alloc>\d+(?:\.\d+)?) GiB is allocated by PyTorch, and "
    r"(?P<res>\d+(?:\.\d+)?) (?P<unit>[KMG]iB) is reserved by PyTorch but unallocated"
)
CONTEXT_SLACK_GIB = 2.0  # the CUDA context and libraries' own memory beside the allocator's


def held_by_the_job(a: Analysis, message: str) -> bool:
    """Every process an OOM message names as holding the GPU's memory is one of the job's own
    (two ranks mapped to one GPU): the job's configuration, not another job's leftover."""
    holders = set(_HOLDER.findall(message))
    if not holders:
        return False
    if len(holders) == 1 and _holder_is_this_process(message):
        return True
    return holders <= job_pids(a)


def job_pids(a: Analysis) -> set[str]:
    """The process ids the job's own output names as its processes (its launchers' lines)."""
    own: set[str] = set()
    for entry in a.lines:
        pre = strip_prefixes(entry.text)
        for m in _OWN_PID.finditer(pre.body):
            own.update(g for g in m.groups() if g)
        if pre.offset and (ray := _RAY_PID.search(entry.text, 0, pre.offset)) is not None:
            own.add(ray.group(1))
    return own


def _holder_is_this_process(message: str) -> bool:
    held, own = _ONE_HOLDER.search(message), _OWN_ALLOCATED.search(message)
    if held is None or own is None:
        return False
    scale = {"KiB": 1 / 1024**2, "MiB": 1 / 1024, "GiB": 1.0}[own["unit"]]
    mine = float(own["alloc"]) + float(own["res"]) * scale
    return mine <= float(held["held"]) <= mine + CONTEXT_SLACK_GIB
