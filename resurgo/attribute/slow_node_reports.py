"""Lines of a job's output (or an admin's notes in it) that name one slow node among its peers.

- Per-node summaries written as `host value` pairs after a heading that says they are per
  node: `per-node fwd+bwd (ms, mean of last 200): gpu-11 301 | gpu-12 298 | gpu-13 604`,
  `per-node allreduce busbw (GB/s) at init: lm-0 188.1 lm-1 187.6 lm-2 47.3`. The heading's
  unit says whether lower (a time) or higher (a bandwidth) is better; one node
  PER_NODE_RATIO behind the others' median is the slow one.
- Pairwise bandwidth tests between two nodes at a time (the NCCL tests README: run
  `all_reduce_perf` across two nodes to find a bad one): `n201-n202 371 | n205-n206 93`,
  `(rk2-05,rk2-06) 11.2 GB/s`, or nccl-tests' own `# Avg bus bandwidth : 96.657` under a
  heading naming the pair (`## pair gx-113,gx-114`). The node every slow pair has in common
  and no normal pair has is the slow one.
"""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import LogLine

PER_NODE_RATIO = 2.0  # as rank_tables.HOST_FIELD_RATIO
PAIR_RATIO = 0.75  # as rank_tables.PAIR_RATIO
MIN_PAIRS = 3
MIN_NODES = 3
PAIR_HEADING_LINES = 12  # how far below its heading a pair's `# Avg bus bandwidth` may be

_PER_NODE = re.compile(r"(?i)\bper[- _](?:node|host)\b")
_DURATION = re.compile(r"(?i)\b(?:ms|s|sec|seconds|time|wait|latency|duration)\b")
_RATE = re.compile(r"(?i)\b(?:busbw|algbw|bandwidth|throughput|tflops?)\b|[GM]B/s\b|Gb/s\b")
_HOST_VALUE = re.compile(
    r"(?<![\w.-])(?P<host>[A-Za-z][\w.-]{0,62}\d)\s+(?P<value>\d+(?:\.\d+)?)\b"
)
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)")
_HEADING = re.compile(r"(?i)\bpair\b|===|---|<->")  # a line introducing one pair's run
# (The pair's figure may be labelled: `gpu03<->gpu01 busbw 48.9 GB/s`, nccl-tests' column names.)
_NUMBER = re.compile(r"\s*\)?\s*[:=]?\s*(?:(?:bus|alg)bw|bw|bandwidth)?\s*[:=]?\s*(\d+(?:\.\d+)?)")


def _per_node_lists(a: Analysis) -> tuple[set[str], list[LogLine]]:
    for entry in reversed(a.lines):
        text = entry.text
        if not _PER_NODE.search(text) or ":" not in text:
            continue
        head, _, rest = text.partition(":")
        while not _HOST_VALUE.search(rest) and ":" in rest:
            more, _, rest = rest.partition(":")
            head += ":" + more
        pairs = [(m["host"], float(m["value"])) for m in _HOST_VALUE.finditer(rest)]
        hosts = {h for h, _ in pairs}
        if len(hosts) < MIN_NODES or len(hosts) != len(pairs):
            continue
        if a.node_list and not all(a.topo.hosts.canonical(h) for h in hosts):
            continue
        values = dict(pairs)
        # (a rate's unit holds a time: `GB/s` is a bandwidth, higher is better)
        lower = not _RATE.search(head)
        if lower and not _DURATION.search(head):
            continue
        host = max(values, key=values.__getitem__) if lower else min(values, key=values.__getitem__)
        rest_median = statistics.median(v for h, v in values.items() if h != host)
        ratio = (
            (values[host] / max(rest_median, 1e-9))
            if lower
            else rest_median / max(values[host], 1e-9)
        )
        if ratio >= PER_NODE_RATIO:
            return {a.topo.hosts.canonical(host) or host}, [entry]
        return set(), []  # the latest summary decides
    return set(), []


def _pairs(a: Analysis) -> list[tuple[tuple[str, str], float, LogLine]]:
    """(node pair, bandwidth, line) of each pairwise result naming two of the job's nodes."""
    hosts = sorted(set(a.node_list), key=len, reverse=True)
    if len(hosts) < 2:
        return []
    name = "|".join(re.escape(h) for h in hosts)
    pair = re.compile(rf"(?<![\w.-])\(?({name})\s*(?:[-,/]|<->|<=>)\s*({name})(?![\w.-])")
    # A pair names two hosts: a line holding fewer than two of the names' first letters skips
    # the regex (an alternation of every node name, the dearest test on every line).
    heads = sorted({h[:3] for h in hosts})
    out: list[tuple[tuple[str, str], float, LogLine]] = []
    heading: tuple[tuple[str, str], int] | None = None
    for index, entry in enumerate(a.lines):
        text = entry.text
        if sum(text.count(h) for h in heads) < 2 and heading is None:
            continue
        found = [(m, _NUMBER.match(text, m.end())) for m in pair.finditer(text)]
        valued = [(m, n) for m, n in found if n is not None and m[1] != m[2]]
        for m, n in valued:
            assert n is not None
            out.append(((m[1], m[2]), float(n[1]), entry))
        if (
            len(found) == 1
            and not valued
            and (text.startswith("#") or _HEADING.search(text) is not None)
            and found[0][0][1] != found[0][0][2]
        ):
            heading = ((found[0][0][1], found[0][0][2]), index)
            continue
        if heading is not None and (bw := _AVG_BUSBW.match(text.strip())) is not None:
            if index - heading[1] <= PAIR_HEADING_LINES:
                out.append((heading[0], float(bw[1]), entry))
            heading = None
    return out


def _slow_pairs(a: Analysis) -> tuple[set[str], list[LogLine]]:
    pairs = _pairs(a)
    if len(pairs) < MIN_PAIRS:
        return set(), []
    median = statistics.median(bw for _, bw, _ in pairs)
    slow = [p for p in pairs if p[1] < PAIR_RATIO * median]
    fast = [p for p in pairs if p[1] >= PAIR_RATIO * median]
    if not slow or not fast:
        return set(), []
    common = set(slow[0][0]).intersection(*(set(p[0]) for p in slow))
    common -= {n for p in fast for n in p[0]}
    if len(common) != 1:
        return set(), []
    return common, [line for _, _, line in slow[:2]]


# A per-host breakdown of the step: `per-host step breakdown (ms): jx-31 compute=5710 wait=2740 |
# jx-33 compute=8420 wait=21 | ...`. In a synchronous job every host waits in the collective for
# the slowest one: the host that computes longest while waiting next to nothing is the one the
# others wait for (NVRx usage guide: a straggler makes the other ranks wait).
_SEGMENT_HOST = re.compile(r"^\s*(?P<host>[A-Za-z][\w.-]{0,62}\d)\s+(?P<fields>\w+=.*)$")
_FIELD = re.compile(r"\b(?P<key>[A-Za-z]\w{0,40})=(?P<value>\d+(?:\.\d+)?)\b")
WAIT_SHARE = 0.2  # the slow host waits less than this share of the others' median wait
COMPUTE_RATIO = 1.2  # and computes this much longer than their median


def _waited_for(a: Analysis) -> tuple[set[str], list[LogLine]]:
    for entry in reversed(a.lines):
        text = entry.text
        if "wait" not in text or not _PER_NODE.search(text) or "|" not in text:
            continue
        rows: dict[str, dict[str, float]] = {}
        for segment in text.partition(":")[2].split("|"):
            if (m := _SEGMENT_HOST.match(segment)) is not None:
                rows[m["host"]] = {f["key"]: float(f["value"]) for f in _FIELD.finditer(segment)}
        if len(rows) < MIN_NODES or (a.node_list and not all(map(a.topo.hosts.canonical, rows))):
            continue
        wait = next((k for k in next(iter(rows.values())) if "wait" in k.lower()), None)
        work = [k for k in next(iter(rows.values())) if k != wait]
        if wait is None or not work or any({wait, *work} - set(r) for r in rows.values()):
            continue
        host = min(rows, key=lambda h: rows[h][wait])
        others = [r for h, r in rows.items() if h != host]
        waited = statistics.median(r[wait] for r in others)
        longer = any(
            rows[host][k] >= COMPUTE_RATIO * statistics.median(r[k] for r in others) for k in work
        )
        if waited > 0 and rows[host][wait] <= WAIT_SHARE * waited and longer:
            return {a.topo.hosts.canonical(host) or host}, [entry]
        return set(), []
    return set(), []


# A straggler detector's own verdict naming one node: `STRAGGLER: rank 16 (gx-303, local GPU 0)
# score 0.74`, `straggler detected: node gpu07`.
_VERDICT = re.compile(r"(?i)\bstragglers?\b(?:\s+(?:detected|found|flagged))?\s*[:=]\s*\S")


def _detector_verdicts(a: Analysis) -> tuple[set[str], list[LogLine]]:
    if len(a.node_list) < 2:
        return set(), []
    alternatives = "|".join(re.escape(h) for h in sorted(a.node_list, key=len, reverse=True))
    name = re.compile(rf"(?<![\w.-])({alternatives})(?![\w-])")
    named: list[tuple[set[str], LogLine]] = []
    for entry in a.lines:
        said = _VERDICT.search(entry.text) if "traggler" in entry.text.lower() else None
        if said is not None and (hosts := set(name.findall(entry.text[said.start() :]))):
            named.append((hosts, entry))
    if not named or any(hosts != named[0][0] for hosts, _ in named) or len(named[0][0]) != 1:
        return set(), []
    return named[0][0], [line for _, line in named[-2:]]


def slow_nodes_named(a: Analysis) -> tuple[set[str], list[LogLine]]:
    """The one node a per-node summary or a pairwise test puts far behind, and its lines."""
    for reader in (_slow_pairs, _per_node_lists, _waited_for, _detector_verdicts):
        nodes, lines = reader(a)
        if nodes:
            return nodes, lines
    return set(), []


# How many GPUs (ranks) each node runs, where the job or an operator says so: with the node
# list it places a rank the reports name (attribution-labels.md: global rank = node index x
# GPUs per node + local rank).
_PER_NODE_COUNT = re.compile(
    r"(?i)\b(?P<a>\d{1,2}) GPUs? (?:per node|each|/node)\b|--gpus-per-node[= ](?P<b>\d{1,2})\b|"
    r"--nproc[_-]per[_-]node[= ](?P<c>\d{1,2})\b|\bSLURM_GPUS_ON_NODE=(?P<d>\d{1,2})\b|"
    r"--ntasks-per-node[= ](?P<e>\d{1,2})\b"
)


def ranks_per_node(a: Analysis) -> int | None:
    for entry in (*a.header, *a.lines[:200], *a.facts.lines):
        if (m := _PER_NODE_COUNT.search(entry.text)) is not None:
            count = int(next(g for g in m.groups() if g))
            return count if count > 0 else None
    return None
