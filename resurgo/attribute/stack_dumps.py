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
from dataclasses import dataclass

from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes

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


# py-spy's dump (`Thread 688514 (idle): "MainThread"`, then `function (file:line)` frames,
# innermost first), in a node file, the job's output, or an operator's note (`# ` before it).
# py-spy says `idle` of a thread off the CPU, waiting in a call below Python (a lock, a read).
_THREAD = re.compile(r'^\s*Thread (?:0x[0-9A-Fa-f]+|\d+) \((?P<state>[^)]*)\): "(?P<name>[^"]*)"')
_FRAME = re.compile(r"^\s+(?P<func>[\w<>.]+) \((?P<file>[^():]+):\d+\)\s*$")


@dataclass
class DumpedThread:
    """One dumped main thread: its frames as `file:function`, innermost first."""

    frames: list[str]
    idle: bool


def _body(entry: LogLine) -> str:
    body = strip_prefixes(entry.text).body
    return body[2:] if body.startswith("# ") else body[1:] if body.startswith("#") else body


def dumped_main_threads(lines: Iterable[LogLine]) -> list[DumpedThread]:
    """Every main thread py-spy dumped in `lines`, in order."""
    threads: list[DumpedThread] = []
    current: DumpedThread | None = None
    for entry in lines:
        # Outside a dump only a thread header matters; most lines of a job are not one, and
        # peeling their prefixes was a tenth of attributing a long healthy log.
        if current is None and "Thread " not in entry.text:
            continue
        body = _body(entry)
        if (t := _THREAD.match(body)) is not None:
            current = None
            if t["name"] == "MainThread":
                current = DumpedThread([], idle=t["state"].startswith("idle"))
                threads.append(current)
        elif current is not None and (f := _FRAME.match(body)) is not None:
            current.frames.append(f"{f['file']}:{f['func']}")
        elif current is not None and body.strip():
            current = None
    return [t for t in threads if t.frames]


def main_thread_stacks(files: Iterable[list[LogLine]]) -> list[list[str]]:
    """Each dumped process's main-thread frames as `file` paths, innermost first."""
    return [t.frames for lines in files for t in dumped_main_threads(lines)]


def own_code(frame: str) -> bool:
    """A `file:function` frame of the job's own code, not a library's or the interpreter's."""
    return not _LIBRARY.search(frame.rsplit(":", 1)[0])


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


# CPython's faulthandler (Modules/faulthandler.c; `faulthandler.register(SIGTERM)` or
# `dump_traceback_later`) prints each thread as `Current thread 0x00007f3e4ac90b80 (most recent
# call first):` (or `Thread 0x...`) followed by `  File "/path/x.py", line 56 in <module>`,
# innermost first. Under srun each line carries its task's label, interleaved with the others'.
_FH_THREAD = re.compile(
    r"^(?P<current>Current thread|Thread) 0x[0-9A-Fa-f]+ \(most recent call first\):"
)
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>[\w<>.]+)')


def faulthandler_stacks(lines: Iterable[LogLine]) -> dict[str, list[tuple[str, int, str]]]:
    """Each process's current-thread frames (file, line, function), innermost first, keyed by
    the prefix that tells the processes apart (srun task, rank, host)."""
    stacks: dict[str, list[tuple[str, int, str]]] = {}
    open_: dict[str, list[tuple[str, int, str]] | None] = {}
    for entry in lines:
        p = strip_prefixes(entry.text)
        who = f"{p.task}|{p.rank}|{p.host}"
        if (t := _FH_THREAD.match(p.body)) is not None:
            current = t["current"] == "Current thread" or who not in stacks
            open_[who] = stacks.setdefault(who, []) if current else None
            if current:
                stacks[who].clear()
            continue
        frames = open_.get(who)
        if frames is None:
            continue
        if (f := _FH_FRAME.match(p.body)) is not None:
            frames.append((f["file"], int(f["line"]), f["func"]))
        else:
            open_[who] = None
    return {who: frames for who, frames in stacks.items() if frames}


# A Python traceback (CPython Lib/traceback.py): `Traceback (most recent call last):`, then
# `  File "/path/x.py", line 58, in <module>` frames outermost first (each followed by its
# source line), then the exception. Of a collective that timed out, it shows where that rank
# waited.
_TB_START = re.compile(r"^Traceback \(most recent call last\):")
_TB_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
_TB_END = re.compile(r"^[\w.]+(?:Error|Exception|Timeout)\b.*(?i:timed? ?out)")


def timeout_tracebacks(lines: Iterable[LogLine]) -> dict[str, list[tuple[str, int, str]]]:
    """Each process's traceback of a timed-out operation (frames innermost first), keyed like
    `faulthandler_stacks`."""
    done: dict[str, list[tuple[str, int, str]]] = {}
    open_: dict[str, list[tuple[str, int, str]]] = {}
    for entry in lines:
        p = strip_prefixes(entry.text)
        who = f"{p.task}|{p.rank}|{p.host}"
        if _TB_START.match(p.body):
            open_[who] = []
        elif who in open_:
            if (f := _TB_FRAME.match(p.body)) is not None:
                open_[who].append((f["file"], int(f["line"]), f["func"]))
            elif p.body[:1] not in (" ", "\t", ""):
                frames = open_.pop(who)
                if _TB_END.match(p.body) and frames and who not in done:
                    done[who] = frames[::-1]
    return done


def _own_place(frames: list[tuple[str, int, str]]) -> tuple[str, int] | None:
    return next(((f, n) for f, n, _ in frames if not _LIBRARY.search(f)), None)


_POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})


def _collective(frames: list[tuple[str, int, str]]) -> str | None:
    return next((func for f, _, func in frames[:6] if _DISTRIBUTED.search(f"{f}:{func}")), None)


def _in_collective(frames: list[tuple[str, int, str]]) -> bool:
    return any(_DISTRIBUTED.search(f"{f}:{func}") for f, _, func in frames[:6])


def diverged_collective(lines: Iterable[LogLine]) -> str | None:
    """Dumps of a stuck job whose processes wait at different places of the job's own code,
    the odd ones out blocked in a collective (a barrier or all-reduce only they call): the
    job's ranks took different paths through its collectives, a deadlock of its code (a
    rank-0-only barrier). A process stuck outside any collective (in a kernel, on a dead GPU)
    while the others wait in one is not this. Returns the odd ones' place, else None."""
    lines = list(lines)
    stacks = faulthandler_stacks(lines)
    if len(stacks) < 2:
        stacks = timeout_tracebacks(lines)
    if len(stacks) < 2:
        return None
    places: dict[tuple[str, int], list[list[tuple[str, int, str]]]] = {}
    for frames in stacks.values():
        own = _own_place(frames)
        if own is None:
            return None
        places.setdefault(own, []).append(frames)
    if len(places) < 2:
        return None
    most = max(len(group) for group in places.values())
    odd = [place for place, group in places.items() if len(group) < most]
    if not odd or not all(_in_collective(f) for p in odd for f in places[p]):
        return None
    waits = {_collective(f) for group in places.values() for f in group}
    if waits & _POINT_TO_POINT or len(waits) < 2:
        # Pipeline stages wait in sends and receives at different places by design; every
        # rank in the same collective is not a divergence either.
        return None
    file, line = odd[0]
    return f"{file}:{line}"
