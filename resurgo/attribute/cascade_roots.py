"""Root failures a cascade hides: the first error is not always printed first, nor by its own
srun task alone.

- A rank that raised while its peers waited: when one rank dies of its own exception, the
  others block in their next collective until ProcessGroupNCCL's watchdog times them out
  (pytorch/pytorch#118369; hiyouga/LlamaFactory#7396). The dead rank's traceback can reach the
  output after its peers' timeouts (its stderr flushed at exit), and under `torchrun` one srun
  task holds several ranks, so its task's first line is another rank's timeout. The rank that
  never reported a timeout and raised an exception of its own is the root, its task is not a
  victim.
- torchrun's `ChildFailedError` summary names the first failure (`Root Cause (first observed
  failure)`) and, when the child recorded it (`@record`), its exception in the `traceback :`
  field (torch/distributed/elastic/multiprocessing/errors/__init__.py, `_FAILURE_FORMAT_
  TEMPLATE`: the child's `py_callstack`, indented below the field). That exception is the
  child's own failure, however the other ranks were torn down.
- PyTorch's collective fingerprint check (TORCH_DISTRIBUTED_DEBUG=DETAIL, ProcessGroupWrapper:
  `Detected mismatch between collectives on ranks. Rank 7 is running collective: ...`) is a
  diagnosis of the job's own collectives, printed by whichever rank detects it, usually after
  its own watchdog timeout: the job's code issued different collectives on different ranks
  (attribution-labels.md: collective mismatches are `application`).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.events import ElasticFailure, Event
from resurgo.attribute.kind_bounds import silent_until_killed
from resurgo.attribute.oom_blocks import block_of, oom_blocks
from resurgo.attribute.topology import split_host_prefix
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.registry import PatternMatch

# `[Rank 3] Watchdog caught collective operation timeout` (the rank a timeout line is about).
_RANK_IN_MESSAGE = re.compile(r"\[(?:PG \d+ )?Rank (\d+)\]")
# Registry entries that are the fingerprint check's own report of a mismatch.
MISMATCH_REPORTS = frozenset({"collective_mismatch"})
# The `traceback :` field of a torchrun failure record, and how far its indented callstack goes.
_TRACEBACK_FIELD = re.compile(r"^\s*traceback\s*:\s*(?P<value>.*)$")
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception)(?::|$)")
_BLOCK_END = re.compile(r"^\s*(?:=+|-+|\[\d+\]:)\s*$")
CALLSTACK_LINES = 60


def _timed_out_rank(e: Event) -> int | None:
    if (m := _RANK_IN_MESSAGE.search(e.message)) is not None:
        return int(m.group(1))
    return e.rank


def silent_rank_errors(a: Analysis, victims: set[str]) -> list[Event]:
    """Application errors raised by ranks that reported no timeout while their peers' collectives
    timed out, hidden because their srun task's first line is another rank's timeout."""
    timeouts = [
        e for e in a.events
        if e.cascade and e.serious and e.match.kind == AnomalyKind.HANG
    ]  # fmt: skip
    if not timeouts:
        return []
    waited = {r for e in timeouts if (r := _timed_out_rank(e)) is not None}
    cut = a.kill_order
    return [
        e for e in a.events
        if e.root and e.serious and e.category == Category.APPLICATION
        and e.actor in victims and e.rank is not None and e.rank not in waited
        and (cut is None or e.order < cut)
    ]  # fmt: skip


def elastic_exception(a: Analysis, f: ElasticFailure) -> tuple[PatternMatch, str, LogLine] | None:
    """The exception torchrun's failure record carries for its child, read like the child's own
    line: the `traceback :` value, or the last exception line of the callstack below it."""
    if not (0 <= f.order < len(a.lines)):
        return None
    entry = a.lines[f.order]
    m = _TRACEBACK_FIELD.match(_body(a, entry))
    if m is None:
        return None
    value = m["value"].strip()
    if value.startswith(("Signal ", "To enable traceback", "<N/A>", "<NONE>")):
        return None
    found: tuple[str, LogLine] | None = (value, entry) if _EXCEPTION.match(value) else None
    for below in a.lines[f.order + 1 : f.order + 1 + CALLSTACK_LINES]:
        body = _body(a, below)
        if _BLOCK_END.match(body) or _TRACEBACK_FIELD.match(body):
            break
        if _EXCEPTION.match(body):
            found = (body.strip(), below)
    if found is None:
        return None
    text, line = found
    roots = [m for m in a.registry.scan(text) if m.role == "root"]
    app = [m for m in roots if m.category == Category.APPLICATION]
    return (app[0], text, line) if app and len(app) == len(roots) else None


def _body(a: Analysis, entry: LogLine) -> str:
    return strip_prefixes(split_host_prefix(entry.text, a.topo.host_prefixes)[1]).body


def elastic_verdict(a: Analysis, f: ElasticFailure, node: str | None) -> Verdict | None:
    """torchrun's first observed failure with the child's own application exception."""
    found = elastic_exception(a, f)
    if found is None:
        return None
    match, text, line = found
    return Verdict(
        Category.APPLICATION, f"elastic|{match.id}", f"rank {f.rank} on {node or '?'} failed "
        f"first with its own exception: {text[:160]}", 0.85,
        ranks=[f.rank] if f.rank is not None else [], evidence=[f.line, line],
        kind=AnomalyKind.CRASH,
    )  # fmt: skip


def mismatch_report(a: Analysis) -> Verdict | None:
    """The collective fingerprint check's report of ranks in different collectives: the job's
    code. A hang when the watchdog timed out first (a rank never reached the check)."""
    reports = [e for e in a.events if e.match.id in MISMATCH_REPORTS and e.serious]
    if not reports:
        return None
    first = reports[0]
    timed_out = any(
        e.cascade and e.serious and e.match.kind == AnomalyKind.HANG and e.order < first.order
        for e in a.events
    )
    return Verdict(
        Category.APPLICATION, "collective_mismatch|fingerprint", f"{first.message[:200]}: the "
        "job's code issued different collectives on different ranks", 0.85,
        ranks=[r for e in reports[:1] if (r := e.rank) is not None],
        evidence=[e.line for e in reports[:3]],
        # (Or when no process ended of it and the job sat silent until Slurm killed it.)
        kind=AnomalyKind.HANG if timed_out or silent_until_killed(a) else AnomalyKind.CRASH,
    )  # fmt: skip


# What peers print when another process of the job vanished (NCCL's own wording for
# ncclSystemError/ncclRemoteError: "can be also caused by unexpected exit of a remote peer").
PEER_EXIT_SYMPTOMS = frozenset(
    {"nccl_system_error", "nccl_remote_error", "nccl_socket_peer_closed", "nccl_comm_aborted",
     "nccl_watchdog_timeout"}
)  # fmt: skip
# ... and what a DataLoader prints when the kernel killed one of its workers (torch/utils/data/
# _utils/signal_handling.py; the bus-error hint is its generic line for a dead worker).
KILL_SYMPTOMS = PEER_EXIT_SYMPTOMS | {
    "dataloader_worker_killed",
    "dataloader_shm_bus_error",
    "slurm_oom_kill",
}
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Killed")


def oom_killed_child(a: Analysis) -> Event | None:
    """The kernel OOM-kill of the very process torchrun reports killed (`exitcode: -9 ... (pid:
    48115)`), when the job's own errors are only what peers print once a process vanished:
    the kill is the root, the communication errors its cascade (the `exitcode: -9 ... (pid: N)`
    record as in hpcaitech/ColossalAI#3595; Linux mm/oom_kill.c `Killed process N`)."""
    killed = {f.pid for f in a.scan.elastic if f.exitcode == -9 and f.pid is not None}
    roots = [e for e in a.events if e.origin == "job" and e.root and e.serious]
    for e in roots:
        if e.match.id == "dataloader_worker_killed" and (w := _WORKER_KILLED.search(e.message)):
            killed.add(int(w["pid"]))  # (a DataLoader worker SIGKILLed: its pid)
        if e.match.id == _DEEPSPEED_SIGNAL and e.match.groups.get("signal_number") == "9":
            # DeepSpeed's launcher names no pid with the child's -9; it lists its children as
            # it kills the rest (`Killing subprocess 410126`): the kernel's report picks one.
            killed.update(_deepspeed_children(a))
    if not killed or any(not _kill_symptom(e) for e in roots):
        return None
    blocks = oom_blocks(a.node_logs)  # (the kernel's report names the pid it killed)
    for e in a.node_events:
        if e.match.id != "host_oom_kill" or not a.in_job(e.node):
            continue
        if (block := block_of(blocks, e.line)) is not None and block.killed_pid in killed:
            return e
    return None


_DEEPSPEED_SIGNAL = "deepspeed_launcher_child_signal"
_DS_CHILD = re.compile(r"\bsigkill_handler\] Killing subprocess (?P<pid>\d{1,10})\b")


def _deepspeed_children(a: Analysis) -> set[int]:
    return {
        int(m["pid"]) for e in a.lines
        if "Killing subprocess" in e.text and (m := _DS_CHILD.search(e.text)) is not None
    }  # fmt: skip


def _kill_symptom(e: Event) -> bool:
    """What peers or the DataLoader print once a process was killed (its `Unexpected
    segmentation fault/bus error encountered in worker` is the handler's line for any dead
    worker, torch/csrc/DataLoader.cpp)."""
    return (
        e.match.id in KILL_SYMPTOMS
        or e.match.id == _DEEPSPEED_SIGNAL
        or "encountered in worker" in e.line.text
    )
