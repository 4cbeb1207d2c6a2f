"""Hangs the job's own code or configuration caused: evidence that the ranks can never meet.

Three kinds of evidence show that a stuck job waits for something its own code or launch never
provides, so a retry runs into it again (attribution-labels.md: collective mismatches and
deadlocks in user code are `application`; wrong launch scripts too; action stop):

- PyTorch's ProcessGroupNCCL watchdog names, per rank, the work that timed out (`WorkNCCL(
  SeqNum=21, OpType=ALLGATHER, NumelIn=1, NumelOut=8, ...)`, torch/csrc/distributed/c10d/
  ProcessGroupNCCL.cpp). Sequence numbers count the collectives each rank issued in one process
  group, so at the same number every rank must be in the same collective with the same element
  count (NCCL requires matching counts for all-reduce, broadcast, reduce, all-gather,
  reduce-scatter). Ranks in different collectives, or in one all-reduce with different sizes,
  at one sequence number issued different collectives: a rank-dependent branch (evaluation or
  logging on rank 0 only, rank-dependent metric keys). TORCH_DISTRIBUTED_DEBUG=DETAIL reports
  the same as `Collectives differ in the following aspects` (ProcessGroupWrapper.cpp).
- vLLM's Ray executor warns `The number of required GPUs exceeds the total number of available
  GPUs in the placement group` when the Ray cluster it joined has fewer GPUs than its parallel
  size, then waits for the placement group (`Waiting for creating a placement group of specs
  for N seconds`, vllm/executor/ray_utils.py `_wait_until_pg_ready`). Waiting until the job is
  killed, the job asked for more than it gave Ray (a tensor-parallel size over the job's GPUs,
  a local Ray instance started because RAY_ADDRESS was not set; vllm-project/vllm#8908).
- py-spy dumps of a stuck job where one process waits on its DataLoader workers' queue
  (torch/utils/data/dataloader.py `_try_get_data`, which only gives up when a worker dies) while
  the other processes wait in a collective for it: the job's data pipeline deadlocked, its
  peers wait forever (pytorch/pytorch#76287; bigscience tr11 chronicles). Not when a node's
  logs show a fault (a file system that stopped answering stalls the workers alike).
- py-spy dumps of a stuck job whose processes are each blocked in a different collective the
  job's own code calls at different places (`barrier` under a rank-0-only `save_best`, the others
  in the next epoch's `all_reduce`): they can never meet (pytorch/pytorch#54059). Only where the
  collectives are called straight from the job's code (not a parallel framework's process
  groups, where ranks wait in different groups' collectives behind one lost rank) and no
  node shows a fault.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.cascade_roots import mismatch_report
from resurgo.attribute.noted_stacks import noted_stacks_diverge
from resurgo.attribute.save_timeouts import save_outlasts_timeout
from resurgo.attribute.stack_dumps import DumpedThread, dumped_main_threads, own_code
from resurgo.attribute.stages_common import _rank
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import strip_prefixes

_WORK = re.compile(
    r"\bWorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel>\d+))?"
)
_PG = re.compile(r"\bPG(?: ID)? (\d+)\b")
# Collectives whose element count is the same on every rank (NCCL's count argument must match);
# all-to-all, gather/scatter and point-to-point sizes differ by rank legitimately.
_SAME_COUNT = frozenset(
    {
        "ALLREDUCE",
        "BROADCAST",
        "REDUCE",
        "ALLGATHER",
        "_ALLGATHER_BASE",
        "REDUCE_SCATTER",
        "_REDUCE_SCATTER_BASE",
    }
)
_POINT_TO_POINT = frozenset({"SEND", "RECV", "RECVANYSOURCE", "_SEND", "_RECV"})


def watchdog_mismatch(a: Analysis) -> Verdict | None:
    """Watchdog timeouts at one sequence number of one process group naming different
    collectives, or one collective with different element counts: the ranks issued different
    collectives (the job's code)."""
    at: dict[str, dict[tuple[str, str], list[LogLine]]] = {}
    ranks: dict[tuple[str, str, str], set[int]] = {}
    seqs: dict[tuple[str, str, str], dict[int, tuple[int, LogLine]]] = {}
    for e in a.events:
        if not (e.cascade and e.match.kind == AnomalyKind.HANG) or "WorkNCCL(" not in e.message:
            continue
        if a.kill_order is not None and e.order > a.kill_order:
            continue
        m = _WORK.search(e.message)
        if m is None or m["op"] in _POINT_TO_POINT:
            continue
        pg = _PG.search(e.message)
        where = f"{pg.group(1) if pg else '?'}/{m['seq']}"
        what = (m["op"], m["numel"] or "")
        at.setdefault(where, {}).setdefault(what, []).append(e.line)
        if (r := _rank(e)) is not None:
            ranks.setdefault((where, *what), set()).add(r)
            seqs.setdefault((pg.group(1) if pg else "?", *what), {})[r] = (int(m["seq"]), e.line)
    if (ahead := _ranks_ahead(a, seqs)) is not None:
        return ahead
    for where, kinds in at.items():
        ops = {op for op, _ in kinds}
        sizes = {n for op, n in kinds if op in _SAME_COUNT and n}
        if len(ops) < 2 and not (len(ops) == 1 and ops <= _SAME_COUNT and len(sizes) >= 2):
            continue
        groups = sorted(kinds.items(), key=lambda kv: len(kv[1]))
        odd = sorted(ranks.get((where, *groups[0][0]), set()))
        described = ", ".join(
            f"{op}{f' of {n} elements' if n else ''} on {len(ls)} rank(s)" for (op, n), ls in groups
        )
        return Verdict(
            Category.APPLICATION, f"hang|collective_mismatch|{'/'.join(sorted(ops))}",
            f"the ranks timed out in different collectives at sequence number "
            f"{where.split('/')[-1]} ({described}): the job's code issued different collectives "
            "on some ranks", 0.85, ranks=odd,
            evidence=[line for _, ls in groups for line in ls[:2]], kind=AnomalyKind.HANG,
        )  # fmt: skip
    return None


AHEAD_SHARE = 0.25  # at most this share of the reporting ranks one collective ahead


def _ranks_ahead(
    a: Analysis, seqs: dict[tuple[str, str, str], dict[int, tuple[int, LogLine]]]
) -> Verdict | None:
    """A few ranks timed out one collective ahead of all the others in the same collective
    (`SeqNum=41221` where the rest wait at `SeqNum=41220`, same op and size): an all-reduce
    cannot complete on one rank before the others join it, so those ranks issued one
    collective the others never did (a rank-local skip or branch in the job's code). Only
    where no node shows a fault (a lost rank leaves its peers at one number, not ahead)."""
    for (_pg, op, _numel), by_rank in seqs.items():
        numbers = sorted({seq for seq, _ in by_rank.values()})
        if len(numbers) != 2 or numbers[1] - numbers[0] != 1 or op not in _SAME_COUNT:
            continue
        ahead = sorted(r for r, (seq, _) in by_rank.items() if seq == numbers[1])
        if len(ahead) > AHEAD_SHARE * len(by_rank) or len(by_rank) < 4 or _faults(a):
            continue
        behind = next(line for seq, line in by_rank.values() if seq == numbers[0])
        return Verdict(
            Category.APPLICATION, "hang|collective_mismatch|ahead",
            f"rank{'s' if len(ahead) > 1 else ''} {', '.join(map(str, ahead))} timed out in "
            f"{op} number {numbers[1]} while the other ranks wait in number {numbers[0]}: "
            f"{'they' if len(ahead) > 1 else 'it'} issued a collective the others never did "
            "(a rank-local branch or skip in the job's code)", 0.8,
            ranks=ahead, evidence=[by_rank[ahead[0]][1], behind], kind=AnomalyKind.HANG,
        )  # fmt: skip
    return None


_PG_SHORT = re.compile(r"\bThe number of required \w+s exceeds the total number of available "
                       r"\w+s in the placement group\b")  # fmt: skip
_PG_WAIT = re.compile(r"\bWaiting for creating a placement group of specs for \d+ seconds\b")
_KILLED = frozenset({"timeout", "timeout_no_checkpoint", "owner_cancelled", "admin_cancelled"})


def placement_never_satisfied(a: Analysis, outcome: str | None) -> Verdict | None:
    """vLLM found fewer GPUs in its Ray cluster than it needs and then waited for its placement
    group until the job was killed: the job's launch asked for what it never gave Ray."""
    if outcome not in _KILLED:
        return None
    before = a.lines[: a.kill_order] if a.kill_order is not None else a.lines
    first = next((i for i, e in enumerate(before) if _PG_SHORT.search(e.text)), None)
    if first is None:
        return None
    short = before[first]
    waits = [e for e in before[first:] if _PG_WAIT.search(e.text)]
    tail = [e for e in before[-5:] if e.text.strip() and not e.text.lstrip().startswith("#")]
    if len(waits) < 2 or not tail or not _PG_WAIT.search(tail[-1].text):
        return None  # the placement group was granted after all (the job moved on)
    return Verdict(
        Category.APPLICATION, "hang|placement_group_unsatisfiable", "the job's Ray cluster has "
        "fewer GPUs than vLLM's parallel size needs; it waited for its placement group until "
        "the job was killed (the launch's parallel size or Ray cluster)", 0.8,
        evidence=[short, waits[-1]], kind=AnomalyKind.HANG,
    )  # fmt: skip


_DATALOADER_WAIT = re.compile(r"torch/utils/data/dataloader\.py:_(?:try_get_data|get_data)$")
_COLLECTIVE_FRAME = re.compile(
    r"\b(?:broadcast|all_reduce|all_gather\w*|reduce_scatter\w*|barrier|recv|send) "
    r"\((?:\S*/)?torch/distributed/distributed_c10d\.py:\d+\)"
)


# A thread blocked waiting for another to hand it something (queue.Queue.get, an Event or a
# Condition: CPython Lib/queue.py, Lib/threading.py; multiprocessing's queues): a dead producer
# (a prefetch thread that raised, whose `Exception in thread ...` ended only that thread) leaves
# the consumer there for good.
_WAIT_PRIMITIVE = re.compile(
    r"^(?:queue|threading|multiprocessing/queues|multiprocessing/connection|selectors)\.py:"
    r"(?:get|wait|_poll|poll|select|acquire)$"
)
TOP_FRAMES = 4


def _waits_in_own_code(thread: DumpedThread) -> str | None:
    """The job's own frame that called a wait primitive at the top of a stack, if any. Idle
    in the job's own frame itself is a wait below Python that line made (`with self._lock:`,
    `time.sleep`: a C call has no Python frame of its own for py-spy to show)."""
    frames = thread.frames
    if thread.idle and own_code(frames[0]):
        return frames[0]
    top = frames[:TOP_FRAMES]
    if not top or not _WAIT_PRIMITIVE.match(top[0]):
        return None
    for f in top[1:]:
        if _WAIT_PRIMITIVE.match(f):
            continue
        return f if own_code(f) else None
    return None


def dataloader_deadlock(a: Analysis, outcome: str | None) -> Verdict | None:
    """A stuck job's dump shows a process waiting on its DataLoader workers, not in any
    collective, while the others wait in collectives; no node shows a fault."""
    hung = any(e.cascade and e.match.kind == AnomalyKind.HANG for e in a.events)
    if outcome not in _KILLED and not hung:
        return None
    lines = [*a.lines, *(e for ls in a.node_logs.values() for e in ls)]
    waiting = [
        t for t in dumped_main_threads(lines)
        if (any(_DATALOADER_WAIT.search(f) for f in t.frames[:8]) or _waits_in_own_code(t))
        # (torchrun's `@record` wrapper, torch/distributed/elastic, sits at the bottom of
        # every rank's stack: not a collective)
        and not any("torch/distributed/" in f and "/elastic/" not in f for f in t.frames)
    ]  # fmt: skip
    if not waiting:
        return None
    if not hung and not any(_COLLECTIVE_FRAME.search(strip_prefixes(e.text).body) for e in lines):
        return None  # nothing shows the others waiting for it
    if not _nodes_clean(a):
        return None
    frames = waiting[0].frames
    if (own := _waits_in_own_code(waiting[0])) is not None:
        what = f"on a lock, queue or event in the job's own code (py-spy: {own[-100:]})"
    else:
        last = max(i for i, f in enumerate(frames) if "torch/utils/data/" in f)
        where = frames[last + 1] if last + 1 < len(frames) else frames[last]  # its caller
        what = (
            "on its DataLoader workers (py-spy: torch/utils/data/dataloader.py _try_get_data "
            f"under {where[-100:]})"
        )
    return Verdict(
        Category.APPLICATION, "hang|dataloader_deadlock", f"a process waits forever {what} "
        "while its peers wait in a collective for it", 0.8,
        evidence=[*a.lines[-2:]], kind=AnomalyKind.HANG,
    )  # fmt: skip


# Collectives of torch.distributed (distributed_c10d.py), wrapped by c10d_logger.py's `wrapper`
# in recent releases; point-to-point sends and receives wait at different places by design.
_C10D = re.compile(r"torch/distributed/(?:distributed_c10d|c10d_logger)\.py:(?P<func>\w+)$")
_COLLECTIVES = frozenset(
    {
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "broadcast",
        "reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "broadcast_object_list",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "scatter",
        "all_to_all",
        "all_to_all_single",
    }
)


def _called_collective(frames: list[str]) -> tuple[str, str] | None:
    """The collective a dumped main thread is blocked in and the job's own frame that called
    it, when it is called straight from the job's code."""
    op, i = None, 0
    while i < len(frames) and (m := _C10D.search(frames[i])) is not None:
        op = op or m["func"]
        i += 1
    if op not in _COLLECTIVES or i >= len(frames):
        return None
    caller = frames[i]
    return (op or "", caller) if own_code(caller) else None


def _nodes_clean(a: Analysis) -> bool:
    """Some node's kernel log was looked at, and nothing but the job's own errors is serious."""
    kernel = ("dmesg_", "journal_", "syslog_", "console_")
    if not any(ls and ls[0].source.startswith(kernel) for ls in a.node_logs.values()):
        return False  # nodes not looked at: a stalled file system would look the same
    return not _faults(a)


def _faults(a: Analysis) -> bool:
    """Anything serious but the job's own errors, in its output or its nodes' files."""
    return any(
        e.serious and e.root and e.category != Category.APPLICATION
        for e in (*a.node_events, *a.events)
    )


def dumps_in_different_collectives(a: Analysis, outcome: str | None) -> Verdict | None:
    """Every dumped process of a stuck job blocked in a collective its own code calls, in
    different collectives at different places: the ranks took different paths."""
    hung = any(e.cascade and e.match.kind == AnomalyKind.HANG for e in a.events)
    if outcome not in _KILLED and not hung and not a.running:
        return None
    threads = dumped_main_threads([*a.lines, *(e for ls in a.node_logs.values() for e in ls)])
    waits = [_called_collective(t.frames) for t in threads]
    if len(waits) < 2 or any(w is None for w in waits):
        return None
    ops = {w[0] for w in waits if w}
    callers = sorted({w[1] for w in waits if w})
    if len(ops) < 2 or len(callers) < 2 or not _nodes_clean(a):
        return None
    return Verdict(
        Category.APPLICATION, "hang|collective_mismatch|py_spy", "py-spy dumps show the "
        f"processes blocked in different collectives ({', '.join(sorted(ops))}) called from "
        f"different places of the job's code ({', '.join(c[-60:] for c in callers[:3])}): "
        "they can never meet", 0.8, evidence=a.lines[-2:], kind=AnomalyKind.HANG,
    )  # fmt: skip


# What a launcher or the teardown prints for a rank (torchrun's agent, srun, a traceback): not
# the rank's own work.
_LAUNCHER = re.compile(
    r"torch\.distributed|torchrun|elastic|signal|srun|slurmstepd|Traceback|Error|error|NCCL|"
    r"Exception|frame #|terminate|\(exitcode: -?\d+\) local_rank:"
    # The lines of torchrun's ChildFailedError summary (its rules, `<script> FAILED`,
    # `Failures:`, `Root Cause (first observed failure):`, `[1]:` and each failure's fields:
    # torch/distributed/elastic/multiprocessing/errors/__init__.py, `format_msg`).
    r"|^\s*(?:=+|-+|Failures:|Root Cause \(first observed failure\):|\[\d+\]:|"
    r"<NO_OTHER_FAILURES>|\S+ FAILED|(?:time|host|rank|exitcode|error_file|traceback)\s*:.*)\s*$"
)
# A line whose own text names the rank that printed it (`[...] INFO: Rank 0: run_predictions`).
_SAYS_RANK = re.compile(r"(?:^|\s|\])Rank (\d{1,6}):\s")
# A traceback's frame; the indented line under it is that frame's source, not output.
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')


def busy_while_others_wait(a: Analysis) -> Verdict | None:
    """Every rank but one reports its collective timing out, and that one goes on printing
    its own output after their timeouts: it is alive and busy elsewhere in the job's code (an
    evaluation, plots, a save only rank 0 runs), the others wait in a collective it never
    reaches. The code path is the job's (pytorch/pytorch#54059), not the node's."""
    waits = [e for e in a.events if e.match.kind == AnomalyKind.HANG and e.origin == "job"]
    if not waits:
        return None
    waiting = {r for e in waits if (r := _rank(e)) is not None}
    first = min(e.order for e in waits)
    seen: set[int] = set()
    in_frame: set[int] = set()
    busy: dict[int, LogLine] = {}
    for i, entry in enumerate(a.lines):
        pre = strip_prefixes(entry.text)
        rank = pre.rank if pre.rank is not None else pre.task
        if rank is None and (said := _SAYS_RANK.search(pre.body)) is not None:
            rank = int(said[1])  # (a logger that names its rank: `INFO: Rank 0: ...`)
        if rank is None:
            continue
        seen.add(rank)
        code = rank in in_frame and pre.body.startswith(" ")
        in_frame.discard(rank)
        if _FRAME.match(pre.body):
            in_frame.add(rank)
            continue
        if (
            i > first
            and rank not in waiting
            and pre.body.strip()
            and not code
            and not _LAUNCHER.search(pre.body)
        ):
            busy[rank] = entry
    if len(waiting) < 2 or len(seen - waiting) != 1 or len(busy) != 1:
        return None
    ((rank, line),) = busy.items()
    if any(e.serious and _rank(e) == rank for e in a.events) or _faults(a):
        return None  # (it failed itself, or a node shows a fault; its printing after the
        # others' timeouts says it was alive and busy, with or without node files)
    return Verdict(
        Category.APPLICATION, "hang|one_rank_elsewhere", f"rank {rank} went on with its own "
        f"work ({strip_prefixes(line.text).body[:100]}) while every other rank waited in a "
        "collective for it: a code path only it runs", 0.8,
        ranks=[rank], evidence=[waits[0].line, line], kind=AnomalyKind.HANG,
    )  # fmt: skip


def application_hang(a: Analysis, outcome: str | None) -> Verdict | None:
    """Evidence that a stuck job waits on its own code or launch (see the module's doc)."""
    if any(e.hardware and e.serious for e in (*a.events, *a.node_events)):
        return None  # a hardware fault explains a stall first (stages_hardware decides)
    return (
        mismatch_report(a)
        or watchdog_mismatch(a)
        or placement_never_satisfied(a, outcome)
        or dataloader_deadlock(a, outcome)
        or dumps_in_different_collectives(a, outcome)
        or busy_while_others_wait(a)
        or save_outlasts_timeout(a)
        or autotuning_until_the_limit(a, outcome)
        or collective_after_training(a)
        or noted_stacks_diverge(a)
    )


# torch.compile's max-autotune benchmarking each new shape (torch/_inductor/select_algorithm.py:
# `AUTOTUNE flex_attention(1x24x32760x128, ...)`, then `SingleProcess AUTOTUNE benchmarking
# takes 42.2 seconds and 315.1 seconds precompiling for 40 choices`).
_AUTOTUNED = re.compile(r"\bAUTOTUNE benchmarking takes \d+(?:\.\d+)? seconds\b")
_AUTOTUNE_SHAPE = re.compile(r"^AUTOTUNE \w+\((?P<shape>[^)]{1,300})\)")
MIN_AUTOTUNED_SHAPES = 5


def autotuning_until_the_limit(a: Analysis, outcome: str | None) -> Verdict | None:
    """A job killed at its time limit before its first training step, having spent the run
    autotuning kernels for one new shape after another: the job's compile mode
    (`mode="max-autotune"` over shapes that keep changing; NVlabs/LongLive#75), not the
    scheduler and not a node."""
    if outcome != "timeout" or (a.scan.max_iteration or 0) > 1:
        return None
    tuned = [e for e in a.lines if "AUTOTUNE" in e.text and _AUTOTUNED.search(e.text)]
    shapes = {
        m["shape"] for e in a.lines
        if "AUTOTUNE " in e.text and (m := _AUTOTUNE_SHAPE.match(strip_prefixes(e.text).body))
    }  # fmt: skip
    if len(tuned) < MIN_AUTOTUNED_SHAPES or len(shapes) < MIN_AUTOTUNED_SHAPES:
        return None
    return Verdict(
        Category.APPLICATION, "hang|autotuning_until_time_limit",
        f"the job autotuned kernels for {len(shapes)} shapes one after another and never "
        "reached a training step before its time limit: its torch.compile mode (max-autotune "
        "over changing shapes)", 0.8, evidence=[tuned[0], tuned[-1]], kind=AnomalyKind.HANG,
    )  # fmt: skip


def collective_after_training(a: Analysis) -> Verdict | None:
    """The framework said training finished (`Trainer.fit` stopped: `max_epochs=60` reached,
    `Training completed`), no step followed, and then a collective timed out: code after the
    loop (a rank-0-only save or evaluation calling a barrier, an uneven final all-reduce) ran
    a collective that not every rank reached; the others had returned. The job's own control
    flow, which ends every run the same way (attribution-labels.md: application hang)."""
    done = a.scan.completed_line
    if done is None or _faults(a):
        return None
    at = next((i for i in range(len(a.lines) - 1, -1, -1) if a.lines[i] is done), None)
    if at is None or any(o > at for o in a.scan.advances):
        return None
    timeouts = [
        e for e in a.events
        if e.order > at and e.cascade and e.serious and e.match.kind == AnomalyKind.HANG
    ]  # fmt: skip
    if not timeouts:
        return None
    return Verdict(
        Category.APPLICATION, "hang|collective_after_training",
        f"training finished ({done.text.strip()[:80]}), then a collective timed out: code after "
        "the training loop called a collective that not every rank reached", 0.85,
        evidence=[done, *(e.line for e in timeouts[:2])], kind=AnomalyKind.HANG,
    )  # fmt: skip
