"""Per-rank and per-pair performance reports in a job's output: who is slow, consistently.

Formats read (public sources):
- NVRx (NVIDIA/nvidia-resiliency-ext, straggler_det_callback.py / straggler reporting): the
  `GPU relative performance:` / `GPU individual performance:` blocks whose `Worst performing`
  lists hold `Rank=42 Node=dgx-b-06 Score=0.64`, and `StragglerId(rank=43, node='dgx-b-06')`.
  A score is a rank's speed relative to the best (1.0); NVRx's default threshold is 0.7.
- Megatron-LM StragglerDetector (megatron/core/utils.py): `MnRtt/Rnk: 3287.70ms/26 |
  MxRtt/Rnk: 4109.62ms/21 | ...` per report: the slowest rank and how far behind it is.
- Megatron-LM timers with `--timing-log-option all` (megatron/core/timers.py): `times across
  ranks (ms):`, then a timer name line (`  batch-generator:`) and `rank  N: 1.80` lines.
- Composer's GlobalStragglerDetector (mosaicml/composer#3342): `MinThroughput/Rank:
  58.41TF/Rank-0` and `MaxThroughput/Rank: 129.99TF/Rank-12` per report.
- nccl-tests (NVIDIA/nccl-tests): `# Avg bus bandwidth    : 187.01` after a run whose command
  line names its nodes (`srun -N2 -w gpu-c-17,gpu-c-18 ... all_reduce_perf`): pairwise sweeps.
- The job's own per-rank phase timers and Horovod's stall reports (`rank_phases`).

`read_rank_reports` returns the slow ranks (or nodes) reported consistently, and whether the
reports instead name a different rank each time (jitter that moves around: no culprit).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.rank_phases import lagging_in_stalls, phase_reports
from resurgo.attribute.section_reports import section_reports
from resurgo.attribute.slow_node_reports import ranks_per_node, slow_nodes_named
from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

NVRX_SCORE_THRESHOLD = 0.7  # NVRx's default gpu_relative/individual_perf_threshold
MEGATRON_SPREAD = 1.15  # MxRtt over MnRtt that makes a report's slowest rank a straggler
TIMER_RATIO = 1.5
TIMER_MIN_MS = 10.0
PAIR_RATIO = 0.75  # a pair below this share of the median pair bandwidth is slow
MIN_REPORTS = 3
RECENT_REPORTS = 10

_NVRX_RANK = re.compile(r"\bRank=(\d{1,7})\s+Node=([\w.-]+)\s+Score=(\d*\.?\d+)")
# (The callback's logger may name itself first: `megatron.bridge.NVRxStragglerDetection: GPU
# relative performance:`.)
_NVRX_HEADER = re.compile(r"(?:^|: )GPU (?:relative|individual) performance:\s*$")
_NVRX_ID = re.compile(r"StragglerId\(rank=(\d{1,7}),\s*node='([\w.-]+)'\)")
_PERF_DICT = re.compile(r"GPUs relative perf: \{([^{}]*)\}")
_RANK_FIELD = re.compile(r"\b(?:Mn|Mx)\w{2,3}/Rnk:\s*[\d.]+[A-Za-z%]*/(\d{1,6})\b")
_MEGATRON_RTT = re.compile(
    r"\bMnRtt/Rnk:\s*(?P<mn>\d+(?:\.\d+)?)ms/(?P<mnr>\d+)\s*\|\s*MxRtt/Rnk:\s*"
    r"(?P<mx>\d+(?:\.\d+)?)ms/(?P<mxr>\d+)"
)
# Composer's GlobalStragglerDetector (mosaicml/composer#3342, callbacks/
# global_straggler_detector.py, after Megatron-LM's): rank 0 logs each metric's extreme and
# its rank, `MinThroughput/Rank: 58.41TF/Rank-0` (its `_ValueWithRank.__str__`; some loggers
# print `58.41TF/0`). The lowest throughput's rank is the slowest one.
_COMPOSER_EXTREME = re.compile(
    r"\b(?P<which>Min|Max)Throughput/Rank:\s*(?P<value>\d+(?:\.\d+)?)\s*[A-Za-z]*/(?:Rank-)?"
    r"(?P<rank>\d{1,7})\b"
)
_TIMER_HEADER = re.compile(r"^\s*times across ranks \(ms\):\s*$")
_TIMER_NAME = re.compile(r"^\s*([\w.-][\w .-]{0,60}):\s*$")
_TIMER_RANK = re.compile(r"^\s*rank\s+(\d{1,7}):\s*(\d+(?:\.\d+)?)\s*$")
_PERF_COMMAND = re.compile(r"\b\w+_perf\b")
_NODES_ARG = re.compile(r"(?:\s-w\s*|--nodelist[= ]|-H\s*|--host[= ])([A-Za-z][\w.\[\],-]*)")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)")


@dataclass
class RankReports:
    ranks: dict[int, str | None] = field(default_factory=dict)
    """Ranks the reports consistently name as slow → their node where the report says it."""
    nodes: set[str] = field(default_factory=set)
    """Nodes named without a rank (pairwise tests)."""
    known: dict[int, str] = field(default_factory=dict)
    """Every rank → node pair the reports print (flagged or not)."""
    world: int = 0
    """Ranks the tables print (highest + 1): with the node list, places ranks node-major."""
    rotating: bool = False
    """Reports named a slow rank, but a different one each time."""
    rotating_ranks: list[int] = field(default_factory=list)
    """The ranks the recent reports named, when `rotating` (they may share one node)."""
    seen_world: int = 0
    """The highest rank any report's extremes named, plus one: the world, failing a better
    source, where it divides among the nodes."""
    lines: list[LogLine] = field(default_factory=list)
    phase: str = ""
    """The job's own timer column that singled the slow ranks out (`rank_phases`)."""
    gpus_steady: bool = False
    """NVRx's individual scores (each rank against its own best) stayed above the threshold
    in every report: no GPU degraded, the ranks differ by the work they are given."""


def _bodies(a: Analysis) -> list[tuple[int, str]]:
    return [(i, strip_prefixes(e.text).body) for i, e in enumerate(a.lines)]


def _nvrx(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    reports: list[set[tuple[int, str | None]]] = []
    current: set[tuple[int, str | None]] | None = None
    in_worst = False
    individual: list[set[tuple[int, str | None]]] = []
    for order, body in bodies:
        if "performance:" in body and _NVRX_HEADER.search(body):
            current = set()
            (individual if "individual" in body else reports).append(current)
            # (Some wrappers list the ranks under the header with no Worst/Best split: a
            # score below the threshold is flagged wherever it is listed.)
            in_worst = True
            continue
        if "Worst performing" in body:
            in_worst = True
            continue
        if "Best performing" in body:
            in_worst = False
            continue
        if (k := _NVRX_RANK.search(body)) is not None:
            out.known.setdefault(int(k.group(1)), k.group(2))
            out.world = max(out.world, int(k.group(1)) + 1)
        if in_worst and current is not None and (m := _NVRX_RANK.search(body)):
            if float(m.group(3)) < NVRX_SCORE_THRESHOLD:
                current.add((int(m.group(1)), m.group(2)))
                out.lines.append(a.lines[order])
            continue
        if "relative perf: {" in body and (d := _PERF_DICT.search(body)) is not None:
            # NVRx's per-rank score dicts (`Rank 0 GPUs relative perf: {0: 0.99, 1: 1.0, ...}`)
            # print every rank of the job: the world size.
            ranks = [int(r) for r in re.findall(r"(\d{1,7}):\s*[\d.]+", d.group(1))]
            out.world = max(out.world, max(ranks, default=-1) + 1)
        if "StragglerId(" in body:
            flagged: set[tuple[int, str | None]] = {(int(r), n) for r, n in _NVRX_ID.findall(body)}
            if flagged:
                reports.append(flagged)
                out.lines.append(a.lines[order])
    _consistent([r for r in reports if r], out)
    out.gpus_steady = len(individual) >= MIN_REPORTS and not any(individual)


def _consistent(reports: list[set[tuple[int, str | None]]], out: RankReports) -> None:
    recent = reports[-RECENT_REPORTS:]
    if not recent:
        return
    counts = Counter(item for report in recent for item in report)
    steady = {item for item, c in counts.items() if c * 2 > len(recent)}
    if steady:
        for rank, node in steady:
            out.ranks[rank] = node
    elif len(recent) >= MIN_REPORTS:
        out.rotating = True


def _megatron_detector(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    slow: list[tuple[int, int]] = []
    for order, body in bodies:
        m = _MEGATRON_RTT.search(body) if "MxRtt" in body else None
        if m is None:
            continue
        low, high = float(m.group("mn")), float(m.group("mx"))
        # (Every extreme the report prints names a rank: over many reports the highest of
        # them is the world's last rank, which places ranks on nodes node-major.)
        named = [int(r) for r in _RANK_FIELD.findall(body)]
        out.seen_world = max(out.seen_world, max(named, default=-1) + 1)
        if low > 0 and high / low >= MEGATRON_SPREAD:
            slow.append((int(m.group("mxr")), order))
    _blame_recurring(a, slow, out)


def _blame_recurring(a: Analysis, slow: list[tuple[int, int]], out: RankReports) -> None:
    """(rank, line) of each report naming a slow rank: the rank most recent reports name, or
    `rotating` when no one rank dominates."""
    if len(slow) < MIN_REPORTS:
        return
    recent = slow[-RECENT_REPORTS:]
    rank, count = Counter(r for r, _ in recent).most_common(1)[0]
    if count >= MIN_REPORTS and count * 2 > len(recent):
        out.ranks.setdefault(rank, None)
        out.lines += [a.lines[o] for r, o in recent if r == rank][-2:]
    else:
        out.rotating = True
        out.rotating_ranks = [r for r, _ in recent]
        out.lines += [a.lines[o] for _, o in recent[-2:]]


def _composer_detector(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    """Composer's reports: the lowest-throughput rank, when the highest is MEGATRON_SPREAD
    above it, report after report (the same test as Megatron's round-trip extremes)."""
    slow: list[tuple[int, int]] = []
    low: tuple[float, int, int] | None = None
    for order, body in bodies:
        m = _COMPOSER_EXTREME.search(body) if "Throughput/Rank" in body else None
        if m is None:
            continue
        value, rank = float(m["value"]), int(m["rank"])
        out.world = max(out.world, rank + 1)
        if m["which"] == "Min":
            low = (value, rank, order)
        elif low is not None:
            if low[0] > 0 and value / low[0] >= MEGATRON_SPREAD:
                slow.append((low[1], low[2]))
            low = None
    _blame_recurring(a, slow, out)


def _megatron_timers(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    tables: list[dict[str, dict[int, float]]] = []
    name: str | None = None
    first_line: dict[int, int] = {}
    for order, body in bodies:
        if not tables and "across ranks" not in body:
            continue  # (most lines: no table has begun yet)
        if "across ranks" in body and _TIMER_HEADER.match(body):
            tables.append({})
            name = None
            continue
        if not tables:
            continue
        if (m := _TIMER_RANK.match(body)) and name is not None:
            tables[-1].setdefault(name, {})[int(m.group(1))] = float(m.group(2))
            out.world = max(out.world, int(m.group(1)) + 1)
            first_line.setdefault(len(tables), order)
            continue
        if (n := _TIMER_NAME.match(body)) and "rank" not in body:
            name = n.group(1).strip()
            continue
        name = None
    flagged: list[set[tuple[int, str | None]]] = []
    for table in tables[-RECENT_REPORTS:]:
        slow: set[tuple[int, str | None]] = set()
        for values in table.values():
            if len(values) < 2:
                continue
            median = statistics.median(values.values())
            ranks = {
                r for r, v in values.items()
                if v >= TIMER_RATIO * median and v - median >= TIMER_MIN_MS
            }  # fmt: skip
            if ranks and len(ranks) * 2 < len(values):
                slow |= {(r, None) for r in ranks}
        if slow:
            flagged.append(slow)
    if flagged:
        before = len(out.ranks)
        _consistent(flagged, out)
        if len(out.ranks) > before and first_line:
            out.lines.append(a.lines[first_line[max(first_line)]])


def _pairwise(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    runs: list[tuple[list[str], float, int]] = []
    nodes: list[str] | None = None
    for order, body in bodies:
        if "_perf" in body and _PERF_COMMAND.search(body) and (m := _NODES_ARG.search(body)):
            try:
                nodes = expand_hostlist(m.group(1))
            except ParseError:
                nodes = None
            continue
        if nodes and "bus bandwidth" in body and (bw := _AVG_BUSBW.match(body.strip())):
            runs.append((nodes, float(bw.group(1)), order))
            nodes = None
    pairs = [r for r in runs if len(r[0]) == 2]
    if len(pairs) < 3:
        return
    median = statistics.median(bw for _, bw, _ in pairs)
    slow = [p for p in pairs if p[1] < PAIR_RATIO * median]
    fast = [p for p in pairs if p[1] >= PAIR_RATIO * median]
    if not slow:
        return
    common = set(slow[0][0]).intersection(*(set(p[0]) for p in slow))
    common -= {n for p in fast for n in p[0]}
    if len(common) == 1:
        out.nodes |= common
        out.lines += [a.lines[o] for _, _, o in slow[:2]]


# A job's own per-node profile lines: `[perf] step=1600 host=l40s-03 compute_ms=1718
# intra_node_reduce_ms=1021` or `host=gpu-z23 inter_node_allreduce_busbw_GBps=64.3`.
_HOST_FIELD = re.compile(r"\bhost(?:name)?=(?P<host>[A-Za-z][\w.-]{0,62})")
_NUMERIC_FIELD = re.compile(r"\b(?P<key>[A-Za-z][\w]{1,60})=(?P<value>\d+(?:\.\d+)?)(?![\w.])")
# Units of a duration (lower is better) and of a rate (higher is better).
_DURATION_KEY = re.compile(r"(?i)(?:_ms|_us|_s|_sec|_seconds|time)$")
_RATE_KEY = re.compile(r"(?i)(?:bw|gbps|gb_s|mbps|tflops|tps|throughput|per_sec)$|bandwidth")
HOST_FIELD_RATIO = 2.0  # a node this many times worse than the others' median, every time


def _per_host_fields(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    """One node consistently far worse than its peers in a per-node field the job prints."""
    by_key: dict[str, list[dict[str, tuple[float, int]]]] = {}
    for order, body in bodies:
        if "host" not in body or "=" not in body or (h := _HOST_FIELD.search(body)) is None:
            continue
        for m in _NUMERIC_FIELD.finditer(body):
            key = m["key"]
            if key.lower() in ("step", "iter", "iteration", "rank", "epoch"):
                continue
            rounds = by_key.setdefault(key, [])
            if not rounds or h["host"] in rounds[-1]:
                rounds.append({})  # a new report round begins when a host repeats
            rounds[-1][h["host"]] = (float(m["value"]), order)
    for key, rounds in by_key.items():
        lower = bool(_DURATION_KEY.search(key))
        if not lower and not _RATE_KEY.search(key):
            continue
        worst: list[tuple[str, int]] = []
        for r in rounds:
            if len(r) < 3:
                continue
            values = {host: v for host, (v, _) in r.items()}
            host = max(values, key=values.get) if lower else min(values, key=values.get)  # type: ignore[arg-type]
            rest = statistics.median(v for n, v in values.items() if n != host)
            ratio = values[host] / rest if lower else rest / max(values[host], 1e-9)
            if ratio >= HOST_FIELD_RATIO:
                worst.append((host, r[host][1]))
        hosts = {h for h, _ in worst}
        if len(worst) >= 2 and len(hosts) == 1 and len(worst) * 2 > len(rounds):
            node = a.topo.hosts.canonical(worst[0][0]) or worst[0][0]
            out.nodes.add(node)
            out.lines += [a.lines[o] for _, o in worst[-2:]]
            return


# One line summing up a phase per node over many steps: `per-rank data wait (s, last 200
# iters): ranks 0-3 (rtx-51) 0.004 | ranks 4-7 (rtx-52) 0.003 | ranks 8-11 (rtx-53) 0.371`,
# `step time per node: gpu01=410ms gpu02=405ms gpu03=980ms`.
_HOST_VALUE = re.compile(
    r"\((?P<paren>[A-Za-z][\w.-]{0,62})\)\s*[:=]?\s*(?P<pv>\d+(?:\.\d+)?)"
    r"|(?<![\w.-])(?P<host>[A-Za-z][\w.-]{0,62}\d)\s*[:=]\s*(?P<hv>\d+(?:\.\d+)?)"
)
_SUMMARY_DURATION = re.compile(r"(?i)\b(?:wait|time|latency|duration|stall)\b|\(m?s\b|\bm?s\)")
_SUMMARY_RATE = re.compile(r"(?i)\b(?:bandwidth|busbw|algbw|throughput|tflops?)\b|/s\b")
MIN_SUMMARY_HOSTS = 3
SUMMARY_LINES = 2000  # where the latest summary is looked for (the output's end)
# Per-rank or per-device keys that name no host (where no node list says what a host is).
_NOT_A_HOST = re.compile(r"(?i)^(?:rank|r|gpu|cuda|dev(?:ice)?|worker|proc|local_rank)_?\d+$")


def _per_host_summary(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    """A summary line whose per-node values put one node HOST_FIELD_RATIO behind the others'
    median (a summary over many steps: one line is a consistent report)."""
    for order, body in reversed(bodies[-SUMMARY_LINES:]):
        if body.count("(") + body.count("=") + body.count(":") < MIN_SUMMARY_HOSTS:
            continue
        pairs = [
            (m["paren"] or m["host"], float(m["pv"] or m["hv"])) for m in _HOST_VALUE.finditer(body)
        ]
        hosts = {
            h for h, _ in pairs
            if (a.topo.hosts.canonical(h) or h in a.node_logs)
            and (a.node_list or not _NOT_A_HOST.match(h))
        }  # fmt: skip
        values = {h: v for h, v in pairs if h in hosts}
        if len(values) < MIN_SUMMARY_HOSTS or len(values) != len(pairs):
            continue
        head = body[: body.find(next(iter(values)))]
        lower = bool(_SUMMARY_DURATION.search(head))
        if not lower and not _SUMMARY_RATE.search(head):
            continue
        host = max(values, key=values.__getitem__) if lower else min(values, key=values.__getitem__)
        rest = statistics.median(v for h, v in values.items() if h != host)
        ratio = values[host] / max(rest, 1e-9) if lower else rest / max(values[host], 1e-9)
        if ratio >= HOST_FIELD_RATIO:
            out.nodes.add(a.topo.hosts.canonical(host) or host)
            out.lines.append(a.lines[order])
        return  # the latest summary decides


# A job's own cross-rank summary naming its slowest ranks against the median: `slowest 8 ranks
# by (data+h2d): 16,17,18,19,20,21,22,23 (0.93s) | median (data+h2d) 0.34s`.
_SLOWEST_LIST = re.compile(
    r"(?i)\bslowest (?:\d{1,5} )?ranks?(?: by [^:]{1,60})?:\s*(?P<ranks>\d{1,7}(?:\s*,\s*\d{1,7})*)"
    r"\s*\((?P<value>\d+(?:\.\d+)?)\s*m?s?\)"
)
_MEDIAN = re.compile(
    r"(?i)\bmedian\b(?:\s*\([^()]{0,60}\))?[^|\d]{0,60}?(?<![\w.])(?P<median>\d+(?:\.\d+)?)"
)


def _slowest_lists(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    """Summaries naming the same slow ranks TIMER_RATIO behind the median, report after report."""
    reports: list[set[tuple[int, str | None]]] = []
    lines: list[int] = []
    for order, body in bodies:
        if "slowest" not in body or (m := _SLOWEST_LIST.search(body)) is None:
            continue
        median = _MEDIAN.search(body, m.end())
        if median is None or float(median["median"]) <= 0:
            continue
        if float(m["value"]) < TIMER_RATIO * float(median["median"]):
            reports.append(set())
            continue
        reports.append({(int(r), None) for r in re.findall(r"\d+", m["ranks"])})
        lines.append(order)
    if len([r for r in reports if r]) < MIN_REPORTS:
        return
    before = len(out.ranks)
    _consistent(reports, out)
    if len(out.ranks) > before:
        out.lines += [a.lines[o] for o in lines[-2:]]


def _phase_tables(a: Analysis, bodies: list[tuple[int, str]], out: RankReports) -> None:
    """The job's own per-rank phase tables and Horovod's stall reports (`rank_phases`)."""
    tables = phase_reports(a, bodies)
    for rank, host in tables.known.items():
        out.known.setdefault(rank, host)
    out.world = max(out.world, tables.world)
    before = len(out.ranks)
    if any(tables.reports):
        _consistent(tables.reports, out)
    if len(out.ranks) > before:
        out.phase = Counter(tables.phases[-RECENT_REPORTS:]).most_common(1)[0][0]
        out.lines += tables.lines[-2:]
        return
    stalls, stalled = lagging_in_stalls(a)
    if len(stalls) >= MIN_REPORTS:
        _consistent(stalls, out)
        out.world = max(out.world, *(r + 1 for s in stalls for r, _ in s))
        if len(out.ranks) > before:
            out.lines += stalled[-2:]


def _section_tables(a: Analysis, out: RankReports) -> None:
    """Per-section straggler reports (`section_reports`): the ranks they name consistently,
    and the section where those ranks lose their time."""
    reports = section_reports(a.lines)
    if not any(rep.ranks for rep in reports):
        return  # (reports of no straggler: nothing moves around either)
    before = len(out.ranks)
    _consistent([{(r, rep.nodes.get(r)) for r in rep.ranks} for rep in reports], out)
    if len(out.ranks) > before:
        named = [rep for rep in reports if rep.ranks]
        out.phase = out.phase or named[-1].phase()
        out.lines += named[-1].lines[-2:]
        for rep in named:
            for rank, node in rep.nodes.items():
                out.known.setdefault(rank, node)


def read_rank_reports(a: Analysis) -> RankReports:
    cached: RankReports | None = getattr(a, "_rank_reports", None)
    if cached is not None:
        return cached
    out = RankReports()
    bodies = _bodies(a)
    _nvrx(a, bodies, out)
    _megatron_detector(a, bodies, out)
    _composer_detector(a, bodies, out)
    _megatron_timers(a, bodies, out)
    _pairwise(a, bodies, out)
    _per_host_fields(a, bodies, out)
    _slowest_lists(a, bodies, out)
    _phase_tables(a, bodies, out)
    _section_tables(a, out)
    if not out.nodes:
        named, lines = slow_nodes_named(a)  # per-node lists, pairwise tests (slow_node_reports)
        out.nodes |= named
        out.lines += lines
    if not out.nodes:
        _per_host_summary(a, bodies, out)
    ranks = [*out.ranks, *out.rotating_ranks]
    per_node = ranks_per_node(a) if ranks and not out.world and a.node_list else None
    if per_node and max(ranks) < per_node * len(a.node_list):
        # Reports that name ranks only: placed node-major from the GPUs per node the job says.
        out.world = per_node * len(a.node_list)
    elif ranks and not out.world and a.node_list and out.seen_world % len(a.node_list) == 0:
        out.world = out.seen_world  # (else from every rank the reports' extremes named)
    if out.ranks or out.nodes:
        out.rotating = False
    a._rank_reports = out  # type: ignore[attr-defined]
    return out
