"""Stragglers: one node's ranks persistently slower than the rest.

Read from per-rank timings in any format the scan recognised (the demo's `step_time_ms`, other
per-rank time fields, cross-rank timer summaries), straggler reports, degraded GPU metrics and
node-side throttling messages.
"""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.debug_modes import slow_debug_mode
from resurgo.attribute.detector_reports import detected_stragglers
from resurgo.attribute.gc_pauses import gc_pause_slowdown
from resurgo.attribute.node_diagnostics import degraded_nodes, diagnose_slow_nodes
from resurgo.attribute.noted_baseline import own_slowdown_cause, slower_than_noted
from resurgo.attribute.periodic_work import periodic_own_work
from resurgo.attribute.rank_phases import COMPUTE, HOST_WORK, node_quiet, own_work_lines
from resurgo.attribute.rank_tables import read_rank_reports
from resurgo.attribute.series import actor_fields, jobwide_slowdown
from resurgo.attribute.stack_dumps import _DISTRIBUTED, _LIBRARY, main_thread_stacks
from resurgo.attribute.step_phases import EXTRA_WORK_KEY, own_work
from resurgo.attribute.summary_stragglers import slow_in_summaries
from resurgo.attribute.uneven_work import uneven_work
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import strip_prefixes

STRAGGLER_RATIO = 1.5
STRAGGLER_WINDOW = 10
STRAGGLER_MIN_MS = 10.0  # below this, per-rank differences are timer noise
# What a slow rank's own output says when its slowness is the code's, not its node's:
# torch._dynamo giving up on recompiling (torch/_dynamo/convert_frame.py) and CPython's
# `gc.set_debug(gc.DEBUG_STATS)` reports of long collections (Modules/gcmodule.c).
_SUMMARY_RANK = re.compile(r"\((?:global )?rank[\s=:]+(\d{1,7})")
_APPLICATION_SLOWNESS = re.compile(
    r"torch\._dynamo hit config\.(?:cache_size_limit|recompile_limit)|"
    r"\bgc: done, .*\b\d+\.\d+s elapsed"
)


_NO_STRAGGLER = re.compile(r"(?i)\bno stragglers? (?:detected|found)\b")
_UNEVEN_PIPELINE = re.compile(
    r"--(?:decoder-(?:first|last)-pipeline-num-layers|num-layers-in-(?:first|last)-pipeline-stage"
    r"|pipeline-model-parallel-layout)\b"
)

Samples = dict[int, list[tuple[int, float, str]]]


def _slow_ranks(samples: Samples) -> tuple[list[int], dict[int, str], float]:
    """Ranks whose recent median is STRAGGLER_RATIO x the others' (a minority), their nodes,
    and how far behind the slowest one is."""
    per_rank: dict[int, list[float]] = {}
    node_of: dict[int, str] = {}
    for rank, taken in samples.items():
        recent = sorted(taken)[-STRAGGLER_WINDOW * 2 :]
        if len(recent) >= 3:
            per_rank[rank] = [ms for _, ms, _ in recent]
            node_of[rank] = recent[-1][2]
    slow: list[int] = []
    worst = 0.0
    if len(per_rank) >= 2:
        medians = {r: statistics.median(v) for r, v in per_rank.items()}
        for rank, value in medians.items():
            baseline = statistics.median([m for r, m in medians.items() if r != rank])
            if value >= STRAGGLER_RATIO * baseline and value - baseline >= STRAGGLER_MIN_MS:
                slow.append(rank)
                worst = max(worst, value / baseline if baseline > 0 else float("inf"))
        if len(slow) * 2 > len(per_rank):
            slow = []
    return slow, node_of, worst


def stragglers(a: Analysis, *, timings_only: bool = False) -> Verdict | None:
    """Who slows the job and why (None: nobody); up to four stages ask, so worked out once."""
    found = a.once(
        f"stragglers:{timings_only}",
        lambda: (
            _stragglers(a, timings_only=timings_only)
            or (None if timings_only else slow_debug_mode(a))
        ),
    )
    return None if found is None else found.copy()


def _stragglers(a: Analysis, *, timings_only: bool = False) -> Verdict | None:
    # The demo's per-rank compute times; else whichever per-rank time field (step, data,
    # forward...) singles ranks out the most: in a synchronous job every rank's whole step
    # takes as long as the slowest one's, so only a part of it can show who is slow.
    slow, node_of, _ = _slow_ranks(a.scan.timings)
    slow_key = ""
    if not a.scan.timings:
        by_key = a.scan.field_times
        if not by_key:
            # Per-rank fields of ranks whose nodes the topology cannot place (no node list):
            # who is slow still shows; which node does not.
            by_key = {
                key.removeprefix("field:"): {
                    actor: [(s.order, s.value, "") for s in samples]
                    for actor, samples in by_actor.items() if isinstance(actor, int)
                }
                for key, by_actor in actor_fields(a).items()
            }  # fmt: skip
        # A rank long in a collective's wait (`allreduce_wait`) waits for the slow ones.
        found = [
            (_slow_ranks(by_rank), key) for key, by_rank in by_key.items()
            if "wait" not in key.lower() or HOST_WORK.search(key)
        ]  # fmt: skip
        (slow, node_of, _), slow_key = max(
            found, key=lambda f: (bool(f[0][0]), f[0][2]), default=(([], {}, 0.0), "")
        )
    summary_nodes, summary_ranks, summary_lines = slow_in_summaries(
        a, STRAGGLER_RATIO, STRAGGLER_WINDOW
    )
    reports = read_rank_reports(a)
    for rank, node in reports.ranks.items():
        host = a.topo.hosts.canonical(node) if node else a.topo.node_of(rank, rank)
        if host is None and node is None:
            host = _node_major(a, rank, reports.world)
        slow.append(rank)
        if host is not None:
            node_of[rank] = host
    rotating = reports.rotating
    host = _one_node(a, reports.rotating_ranks, reports.world) if rotating else None
    if host is not None and diagnose_slow_nodes(a, [host]) is not None:
        # The slowest rank changes from report to report, but every one of them runs on the
        # same node, and that node's own diagnostics show why it is slow (a foreign process
        # on its GPUs, a degraded link): the node, not the job. (Without them, one node's
        # ranks being slowest is what a pipeline's heavier last stage looks like.)
        for rank in sorted(set(reports.rotating_ranks)):
            slow.append(rank)
            node_of[rank] = host
        rotating = False
    summary_nodes |= {n for n in reports.nodes if a.topo.hosts.canonical(n) or a.in_job(n)}
    summary_lines += reports.lines[-4:]
    if timings_only and not slow and not summary_nodes:
        return None
    summary_ranks |= {int(r) for e in summary_lines for r in _SUMMARY_RANK.findall(e.text)}
    detected = detected_stragglers(a)  # (a detector's verdicts: rank, section, node)
    for d in detected:
        slow.append(d.rank)
        node_of[d.rank] = d.node
        slow_key = slow_key or (d.section or "")
    gpu_named = any(d.section is None for d in detected)
    phase = slow_key or reports.phase  # the job's own timer that singled the slow ranks out
    code = _application_straggler(
        a,
        sorted(set(slow) | summary_ranks),
        rotating,
        reports.ranks,
        reports.known,
        extra_work=bool(
            EXTRA_WORK_KEY.search(slow_key)
            or HOST_WORK.search(slow_key)
            or HOST_WORK.search(reports.phase)
        ),
        compute=gpu_named or bool(COMPUTE.search(phase) and not HOST_WORK.search(phase)),
        gpus_steady=reports.gpus_steady,
    )
    if code is not None:
        return code
    # (FlagScale's report says `No stragglers detected.` when there are none)
    report = [
        e for e in a.events
        if e.match.id == "straggler_report" and not _NO_STRAGGLER.search(e.line.text)
    ]  # fmt: skip
    degraded = [f for f in a.metric_findings if f.severity == "degraded" and a.in_job(f.host)]
    warn = [
        e for e in a.node_events
        if e.match.kind == AnomalyKind.STRAGGLER and e.root and a.in_job(e.node)
    ]  # fmt: skip
    # Nodes whose own diagnostics show a slowing state their peers lack (a link trained below
    # its width, a governor at powersave): where the job prints one rank's rhythm only, they
    # are the straggler's only trace.
    outliers = degraded_nodes(a) if a.running else []
    if not (slow or report or degraded or warn or summary_nodes or outliers):
        return own_work(a) or _one_rank_in_own_code(a) or periodic_own_work(a) or _jobwide(a)
    nodes = {node_of[r] for r in slow if node_of.get(r)} | summary_nodes
    for e in report:
        named = {n for n in a.node_list if re.search(rf"\b{re.escape(n)}\b", e.line.text)}
        if not named:
            # NVRx: "Calculated score (rank, score): [(5, 0.61)]", or "rank 5" / "Rank 5".
            pairs = re.findall(r"\((\d+),\s*[01]?\.\d+\)|\b[Rr]ank[ =:]+(\d+)\b", e.line.text)
            for pair in pairs:
                rank = int(pair[0] or pair[1])
                node = a.topo.node_of(rank, rank)
                if node is not None:
                    named.add(node)
                    slow.append(rank)
        nodes |= named
    if not nodes:
        nodes = {f.host for f in degraded} | {e.node for e in warn if e.node}
        if _everywhere(a, nodes):
            # Every node degraded the same way (all GPUs throttling hot): the room's cooling
            # or power, shared by all; no node to exclude (attribution-labels.md, hardware_host
            # covers chassis power and cooling).
            return Verdict(
                Category.HARDWARE_HOST, "straggler|shared_degradation",
                f"every node of the job is degraded ({degraded[0].what if degraded else 'warn'})"
                ": a shared cause (cooling, power), no node to exclude", 0.6,
                evidence=[f.line for f in degraded[:3]] + [e.line for e in warn[:3]],
                kind=AnomalyKind.STRAGGLER,
            )  # fmt: skip
    culprits = sorted(n for n in nodes if a.in_job(n))
    if not culprits and outliers:
        culprits = outliers
    explained = [f for f in degraded if f.host in culprits]
    explained_logs = [e for e in warn if e.node in culprits]
    category = Category.UNKNOWN
    confidence = 0.6
    evidence: list[LogLine] = []
    if explained:
        category, confidence = explained[0].category, 0.8
        evidence += [f.line for f in explained]
    elif explained_logs:
        category, confidence = explained_logs[0].category, 0.75
        evidence += [e.line for e in explained_logs]
    if (diagnosed := diagnose_slow_nodes(a, culprits)) is not None:
        # The node's own diagnostics say why it is slow (a setting, a degraded link): that
        # decides the category over a symptom (low clocks in DCGM) or an unknown.
        category, confidence = diagnosed[0], 0.8
        evidence = diagnosed[1] + evidence
    evidence += _last_timing_lines(a, slow)
    evidence += [e.line for e in report] + summary_lines
    if (
        category == Category.UNKNOWN
        and HOST_WORK.search(phase)
        and (
            node_quiet(a, culprits, checked=True) or _fast_beside(a, slow, culprits, reports.world)
        )
    ):
        # The slow ranks lose their time in host-side work of the job's own code (input
        # pipeline, callbacks, logging) and their nodes' own logs, checked, show nothing (or
        # the same nodes' other ranks do that work at the usual speed: the node's CPUs,
        # storage and network serve them well; what the slow ranks are given is the cause).
        return Verdict(
            Category.APPLICATION, "straggler|application",
            f"straggler in the application ({phase} is where rank"
            f"{'s' if len(set(slow)) > 1 else ''} {', '.join(map(str, sorted(set(slow))))} "
            "lose their time; their nodes show no fault)", 0.6,
            ranks=sorted(set(slow)), evidence=evidence,
            kind=AnomalyKind.STRAGGLER,
        )  # fmt: skip
    where = ", ".join(culprits) or "unknown nodes"
    slow = sorted(set(slow))
    which = f" (rank{'s' if len(slow) > 1 else ''} {', '.join(map(str, slow))})" if slow else ""
    return Verdict(
        category, "straggler", f"straggler on {where}{which}", confidence,
        culprits=culprits, ranks=sorted(slow), evidence=evidence, kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _last_timing_lines(a: Analysis, ranks: list[int], per_rank: int = 2) -> list[LogLine]:
    """The last `per_rank` lines with a time each slow rank printed, rank by rank: one pass
    from the end, stopping once every rank has its lines."""
    wanted = set(ranks)
    found: dict[int, list[LogLine]] = {r: [] for r in wanted}
    missing = len(wanted)
    for entry in reversed(a.lines):
        if not missing:
            break
        if "time" not in entry.text:
            continue
        pre = strip_prefixes(entry.text)
        for rank in {pre.rank, pre.task}:
            if rank in wanted and rank is not None and len(found[rank]) < per_rank:
                found[rank].append(entry)
                missing -= len(found[rank]) == per_rank
    return [e for rank in ranks for e in reversed(found.get(rank, []))]


def _everywhere(a: Analysis, nodes: set[str]) -> bool:
    known = set(a.node_list)
    return len(known) >= 3 and known <= nodes


def _said_by(text: str, rank: int) -> bool:
    pre = strip_prefixes(text)
    return rank in (pre.rank, pre.task)


def _shares_node_with_peers(
    a: Analysis, rank: int, reported: dict[int, str | None], known: dict[int, str]
) -> bool:
    """Other ranks run on this rank's node (so the node itself is not what is slow)."""
    world = min(max(a.topo.world_size() or 0, read_rank_reports(a).world), 4096)
    node = reported.get(rank) or a.topo.node_of(rank, rank) or _node_major(a, rank, world)
    if node is None:
        return False
    if any(n == node for r, n in reported.items() if r != rank):
        return False
    if any(n == node for r, n in known.items() if r != rank):
        return True
    peers = [
        r for r in range(world)
        if r != rank and (a.topo.node_of(r, r) or _node_major(a, r, world)) == node
    ]  # fmt: skip
    return bool(peers)


def _application_straggler(
    a: Analysis,
    slow: list[int],
    rotating: bool,
    reported: dict[int, str | None],
    known: dict[int, str],
    *,
    extra_work: bool = False,
    compute: bool = False,
    gpus_steady: bool = False,
) -> Verdict | None:
    """Slowness that is the code's: only rank 0 (it does the job's extra work: logging,
    evaluation, checkpoint I/O, as the NVRx usage guide notes), a slowest rank that moves
    around every report, or slow ranks whose own output shows recompilation or long GC."""
    # Both signs hold one of these literals: most lines skip the regex.
    signs = [
        e for e in a.lines
        if ("dynamo" in e.text or "gc: " in e.text) and _APPLICATION_SLOWNESS.search(e.text)
    ]  # fmt: skip
    own = [e for e in signs if slow and any(_said_by(e.text, r) for r in slow)]
    why = ""
    if slow and own and len(own) * 2 > len(signs):
        # (most such lines are the slow ranks': recompiles spread over every rank are noise)
        why = "the slow ranks' own output shows the code's recompilation or garbage collection"
    elif slow and (work := own_work_lines(a, slow)) and node_quiet(a, _nodes_of(a, slow, reported)):
        why = "the slow ranks' own output shows the job's extra work (evaluation, logging)"
        own = work
    elif slow and (work := uneven_work(a, slow)):
        why = "the slow ranks are given more work than the others: the job's own data split"
        own = work
    elif (
        slow == [0]
        and not compute
        and (extra_work or _shares_node_with_peers(a, 0, reported, known))
    ):
        why = "only rank 0 is slow: it does extra work for the whole job"
    elif rotating and not slow:
        why = "the slowest rank changes from report to report"
        own = signs
        # The job's launch gives some pipeline stages more layers than others (Megatron-LM
        # arguments.py): their ranks are slower by construction, whichever of them is last.
        split = [e for e in (*a.header, *a.lines[:200]) if _UNEVEN_PIPELINE.search(e.text)]
        if split and not own:
            why += "; the launch splits layers unevenly across pipeline stages"
            own = split[:1]
        reported_lines = [e for e in a.lines[-400:] if "individual performance" in e.text]
        if gpus_steady and not own and reported_lines:
            # NVRx's individual scores compare each GPU with its own best: all steady while the
            # relative ones flag a different rank each time, the ranks differ by their work
            # (NVRx straggler detection docs), not by a degrading GPU.
            why += "; every GPU keeps its own best speed"
            own = reported_lines[-1:]
    if not why:
        return None
    return Verdict(
        Category.APPLICATION if (own or slow == [0]) else Category.UNKNOWN,
        "straggler|application", f"straggler in the application ({why})", 0.6,
        ranks=slow, evidence=own[-3:], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _nodes_of(a: Analysis, ranks: list[int], reported: dict[int, str | None]) -> list[str]:
    found = (reported.get(r) or a.topo.node_of(r, r) for r in ranks)
    return [n for n in found if n is not None]


def _one_rank_in_own_code(a: Analysis) -> Verdict | None:
    """Stack dumps (py-spy) of a job still advancing: one process busy in the job's own code
    (a callback, its logging) while the others wait for it in a collective. The code makes
    everybody wait on that rank's extra work (NVRx usage guide: rank 0's extra work)."""
    from resurgo.attribute.liveness import still_progressing  # (liveness reads stragglers)

    stacks = main_thread_stacks([*a.node_logs.values(), a.lines])
    if len(stacks) < 2 or not still_progressing(a):
        return None
    waiting = [s for s in stacks if any(_DISTRIBUTED.search(f) for f in s)]
    busy = [
        own for s in stacks if s not in waiting
        and (own := next((f for f in s if not _LIBRARY.search(f.rsplit(":", 1)[0])), None))
    ]  # fmt: skip
    if len(busy) != 1 or len(waiting) != len(stacks) - 1:
        return None
    return Verdict(
        Category.APPLICATION, "straggler|application",
        f"straggler in the application (one process is busy in the job's own code at "
        f"{busy[0][-120:]} while {len(waiting)} wait for it in a collective)", 0.6,
        kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _jobwide(a: Analysis) -> Verdict | None:
    """Throughput dropped for the whole job, with no rank singled out."""
    found = jobwide_slowdown(a)
    noted = slower_than_noted(a) if found is None and a.running else None
    found = found or noted
    if found is None:
        return gc_pause_slowdown(a)  # (a decline too gentle to read alone, with its cause)
    summary = (
        f"job-wide slowdown: {found.metric} {found.baseline:.4g} -> {found.recent:.4g} "
        f"({found.ratio:.2f}x slower), no rank or node singled out"
    )
    if noted is not None and (mode := slow_debug_mode(a)) is not None:
        return mode  # (a debugging mode the job switched on: its own slowness)
    # (A setting of the job's slows it from its first step: a change of rhythm mid-run is not it)
    if noted is not None and (cause := own_slowdown_cause(a)) is not None:
        why, lines = cause
        return Verdict(
            Category.APPLICATION, f"straggler|application|{found.metric}",
            f"{summary}: {why}", 0.65, evidence=[*lines, *found.lines], kind=AnomalyKind.STRAGGLER,
        )  # fmt: skip
    return Verdict(
        Category.UNKNOWN, f"straggler|jobwide|{found.metric}", summary, 0.5,
        evidence=found.lines, kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _one_node(a: Analysis, ranks: list[int], world: int) -> str | None:
    """The one node all these (two or more different) ranks run on, where it is known."""
    if len(set(ranks)) < 2 or len(a.node_list) < 2:
        return None
    hosts = {a.topo.node_of(r, r) or _node_major(a, r, world) for r in ranks}
    return hosts.pop() if len(hosts) == 1 and None not in hosts else None


def _fast_beside(a: Analysis, slow: list[int], nodes: list[str], world: int) -> bool:
    """Every one of these nodes also runs ranks of the job that are not slow."""
    fast = {a.topo.node_of(r, r) or _node_major(a, r, world) for r in range(world) if r not in slow}
    return bool(nodes) and set(nodes) <= fast


def _node_major(a: Analysis, rank: int, world: int) -> str | None:
    """Global rank → node where only the world size is known: node-major placement
    (attribution-labels.md; torchrun and srun's default block distribution)."""
    nodes = a.node_list
    if not nodes or world < len(nodes) or world % len(nodes) or rank >= world:
        return None
    return nodes[rank // (world // len(nodes))]
