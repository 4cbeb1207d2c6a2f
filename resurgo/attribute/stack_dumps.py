"""Where a hung job's processes were stuck, from `py-spy dump` output in the bundle.

Operators attach `py-spy dump --pid N` of the ranks of a hung job (py-spy prints each thread as
`Thread 71402 (idle): "MainThread"` followed by its frames, innermost first, as
`function (file:line)`). When every dumped main thread is blocked in the job's own code, and
none in a collective or the distributed stack, the job deadlocked itself (a queue, a lock, a
barrier of its own): the job's code, which a retry runs into again (attribution-labels.md:
deadlocks in user code are `application`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from resurgo.contracts import LogLine

_THREAD = re.compile(r'^\s*Thread (?:0x[0-9A-Fa-f]+|\d+) \([^)]*\): "(?P<name>[^"]*)"')
_FRAME = re.compile(r"^\s+(?P<func>[\w<>.]+) \((?P<file>[^():]+):\d+\)\s*$")
# Frames of the Python standard library, of installed packages, or of the interpreter itself.
# (py-spy shortens installed packages' paths to `torch/cuda/streams.py`.)
_LIBRARY = re.compile(
    r"(?:^|/)(?:site-packages|dist-packages|lib/python\d[\w.]*)/|^<frozen |^(?:threading|queue|"
    r"selectors|socket|subprocess|multiprocessing/\w+|concurrent/futures/\w+|asyncio/\w+)\.py$|"
    r"^(?:torch|deepspeed|transformers|lightning|pytorch_lightning|accelerate|megatron|numpy|apex|"
    r"triton|torchmetrics|datasets|nemo|composer)/"
)
# The distributed stack and collectives: a rank waiting there waits for its peers.
_DISTRIBUTED = re.compile(
    r"(?i)torch/distributed|nccl|deepspeed/comm|megatron/core/parallel|barrier|all_?reduce|"
    r"all_?gather|broadcast|reduce_scatter|synchronize"
)


def main_thread_stacks(files: Iterable[list[LogLine]]) -> list[list[str]]:
    """Each dumped process's main-thread frames as `file` paths, innermost first."""
    stacks: list[list[str]] = []
    for lines in files:
        current: list[str] | None = None
        for entry in lines:
            if (t := _THREAD.match(entry.text)) is not None:
                current = [] if t["name"] == "MainThread" else None
                if current is not None:
                    stacks.append(current)
            elif current is not None and (f := _FRAME.match(entry.text)) is not None:
                current.append(f"{f['file']}:{f['func']}")
            elif current is not None and entry.text.strip():
                current = None
    return [s for s in stacks if s]


def deadlocked_in_job_code(
    node_logs: Mapping[str, list[LogLine]], job_log: list[LogLine] | None = None
) -> str | None:
    """The job's own frame every dumped main thread is blocked under, when all are blocked in
    the job's code and none in the distributed stack; else None. (Dumps come in node files,
    or pasted into the job's output.)"""
    stacks = main_thread_stacks([*node_logs.values(), *([job_log] if job_log else [])])
    if len(stacks) < 2:
        return None
    owners: set[str] = set()
    for frames in stacks:
        if any(_DISTRIBUTED.search(f) for f in frames):
            return None
        own = next((f for f in frames if not _LIBRARY.search(f.rsplit(":", 1)[0])), None)
        if own is None:
            return None
        owners.add(own)
    # The same place in every process: one deadlock, not processes caught at random points.
    return owners.pop() if len(owners) == 1 else None
