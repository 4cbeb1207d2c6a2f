"""Per-rank phase timers a job prints of its own, and what a slow rank's phase says about why.

Formats read:
- one line per report, a column list then one `rN=a|b` entry per rank: `[rank-timing] per-rank
  ms/batch (fwd+bwd | callbacks): r0=1060|544 r1=1037|3 ...` (a Composer/Lightning Timer
  callback's summary, the shape of DeepSpeed's `time (ms) | forward: ... | backward: ...`
  breakdown gathered across ranks);
- a CSV table with a `rank` column (and optionally a host column), one row per rank, one
  column per phase: `rank,host,forward_backward,generate_samples_rank0,allreduce_wait` (what a
  job's own Timer callback or `torch.distributed.gather_object` of its timers writes);
- one line per rank per report, the rank by its label or prefix: `name=value` timer fields
  (`batch_cost: 1.88 data_cost: 1.47`) or `|`-separated cells with a unit (`rank 2 | step 10 |
  data 0.198s | fwd 0.041s | step 0.361s`);
- Horovod's stall inspector (horovod/common/stall_inspector.cc) naming the same missing ranks
  report after report while training goes on: those ranks arrive late at every collective.

A column in which a minority of ranks take TIMER_RATIO x the median (and TIMER_MIN_MS more) is
where those ranks lose their time. Its name says whose time it is: forward/backward/compute is
the GPU (the node's hardware when it alone is slow); input pipeline, callbacks, logging,
evaluation, sample generation are host-side work of the job's own code: with the GPU on par
and the node's own logs quiet, the application's straggler (NVRx usage guide: rank 0's extra
work; attribution-labels.md: application-level stragglers).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.collective_stalls import crossing, stall_reports
from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes

TIMER_RATIO = 1.5
TIMER_MIN_MS = 10.0
MIN_TABLE_RANKS = 3

Flagged = set[tuple[int, str | None]]

# Phases that are host-side work of the job's own code, not the GPU's compute.
HOST_WORK = re.compile(
    r"(?i)(?:^|[_+/ -])(?:data\w*|dataload\w*|loader|input|decode|preprocess\w*|augment\w*"
    r"|summar\w*|callbacks?|hooks?|log(?:ging)?|upload|wandb|tensorboard|tb|samples?|generat\w*|eval\w*"
    r"|valid\w*|metrics?|profil\w*|traces?|dump|print|checkpoint\w*|ckpt|save|io)(?:$|[_+/ -])"
)
COMPUTE = re.compile(
    r"(?i)(?:^|[_+/ -])(?:fwd|bwd|forward|backward|compute|gpu|kernels?|matmul|optim\w*)"
    r"(?:$|[_+/ -])"
)
# A rank's own report of the job's extra work (NVRx usage guide: rank 0 logging, evaluating,
# generating while the others wait): validation or evaluation runs, samples logged, uploaded
# or generated. A checkpoint save is every job's and says nothing.
OWN_WORK = re.compile(
    r"(?i)\brunning (?:validation|evaluation|eval)\b|\bevaluating on\b"
    r"|\blog(?:ging|ged)? \d+ (?:samples|images|predictions)\b"
    r"|\bupload\w* .{0,40}\b(?:wandb|tensorboard|samples|images)\b|\b(?:to|for) (?:the )?wandb\b"
    r"|\bgenerat(?:ing|ed?) (?:\d+ )?(?:samples|completions"
    r"|sample (?:completions|outputs|images))\b"
)

_COLUMNS = re.compile(r"\(([^()]{1,200}\|[^()]{1,200})\)\s*:")
_ENTRY = re.compile(
    r"(?<![\w.])r(?:ank)?[_ ]?(\d{1,7})\s*[=:]\s*(\d+(?:\.\d+)?(?:\|\d+(?:\.\d+)?)*)"
)
_CSV_NAME = re.compile(r"^[A-Za-z_][\w+/.-]{0,60}$")
_HOST_COLUMN = ("host", "hostname", "node", "nodename")
_SECONDS_COLUMN = re.compile(r"(?i)(?:_s|_sec|_secs|_seconds)$")
_SECONDS_NOTE = re.compile(r"(?i)\((?:s|sec|seconds)\b|\bin s(?:ec(?:onds)?)?\b")
# What says a table holds times: a unit, a timer, a per-step rate of time.
_TIMED = re.compile(
    r"(?i)\b(?:ms|msec|sec|seconds?|tim(?:e|er|ers|ing)s?)\b|\(s\b|_(?:ms|s|sec|time)\b"
    r"|\bms/|/(?:batch|step|iter)\b"
)
_TOTAL = re.compile(r"(?i)(?:^|_)(?:total|step|iter\w*|batch(?:_total)?|wall\w*)$")


def _flag(
    columns: dict[str, dict[int, float]], hosts: dict[int, str]
) -> tuple[Flagged, str] | None:
    """The ranks a column singles out (a minority far above the median), and that column: of
    several, the one where they lose the most time over the median, phases before totals."""
    best: tuple[bool, float, str, Flagged] | None = None
    for name, values in columns.items():
        if len(values) < MIN_TABLE_RANKS:
            continue
        median = statistics.median(values.values())
        slow = {
            r for r, v in values.items() if v >= TIMER_RATIO * median and v - median >= TIMER_MIN_MS
        }
        if not slow or len(slow) * 2 >= len(values):
            continue
        excess = min(values[r] for r in slow) - median
        key = (not _TOTAL.search(name), excess, name, {(r, hosts.get(r)) for r in slow})
        if best is None or key[:2] > best[:2]:
            best = key
    return (best[3], best[2]) if best is not None else None


def _one_line_tables(
    bodies: list[tuple[int, str]],
) -> list[tuple[int, dict[str, dict[int, float]]]]:
    tables: list[tuple[int, dict[str, dict[int, float]]]] = []
    for order, body in bodies:
        if "|" not in body or (head := _COLUMNS.search(body)) is None:
            continue
        if not _TIMED.search(body[: head.end()]):
            continue  # (a table of something else than time: temperatures, bandwidths)
        names = [c.strip() for c in head.group(1).split("|")]
        columns: dict[str, dict[int, float]] = {n: {} for n in names}
        for m in _ENTRY.finditer(body, head.end()):
            values = m.group(2).split("|")
            if len(values) != len(names):
                continue
            for name, value in zip(names, values, strict=True):
                columns[name][int(m.group(1))] = float(value)
        if all(len(v) >= MIN_TABLE_RANKS for v in columns.values()):
            tables.append((order, columns))
    return tables


def _comma_cells(body: str) -> list[str]:
    return [c.strip() for c in body.split(",")]


def _space_cells(body: str) -> list[str]:
    return body.split()


def _csv_tables(
    bodies: list[tuple[int, str]],
) -> list[tuple[int, dict[str, dict[int, float]], dict[int, str]]]:
    tables: list[tuple[int, dict[str, dict[int, float]], dict[int, str]]] = []
    i = 0
    while i < len(bodies):
        order, body = bodies[i]
        i += 1
        if "rank" not in body:
            continue
        # Comma-separated, or columns aligned with spaces (`  rank  emb_h2d  fwd  allreduce`).
        split = _comma_cells if body.count(",") >= 2 else _space_cells
        names = split(body)
        if len(names) < 3:
            continue
        if "rank" not in [n.lower() for n in names] or not all(_CSV_NAME.match(n) for n in names):
            continue
        note = bodies[i - 2][1] if i >= 2 else ""
        seconds = bool(_SECONDS_NOTE.search(note) or _SECONDS_NOTE.search(body))
        if not (_TIMED.search(note) or _TIMED.search(body)):
            continue
        at = [n.lower() for n in names].index("rank")
        columns: dict[str, dict[int, float]] = {}
        hosts: dict[int, str] = {}
        while i < len(bodies):
            cells = split(bodies[i][1])
            if len(cells) != len(names) or not cells[at].isdigit():
                break
            rank = int(cells[at])
            for name, cell in zip(names, cells, strict=True):
                if name.lower() in _HOST_COLUMN:
                    hosts[rank] = cell
                    continue
                try:
                    value = float(cell)
                except ValueError:
                    continue
                if name != names[at]:
                    scale = 1000.0 if seconds or _SECONDS_COLUMN.search(name) else 1.0
                    columns.setdefault(name, {})[rank] = value * scale
            i += 1
        if columns:
            tables.append((order, columns, hosts))
    return tables


# One rank's own timer fields on its own line, the rank named by its prefix or by the per-rank
# log file an operator tailed (`[workerlog.13] batch_cost: 1.8838 data_cost: 1.4702`:
# PaddlePaddle's launcher writes rank N's output to log/workerlog.N; PaddleDetection and
# mmengine print `batch_cost`/`data_cost`, `time`/`data_time` in seconds).
# Or a rank's line (by its label or its prefix) of `|`-separated cells, each a phase and its
# time with a unit (`rank 2 | step  10 | data 0.198s | fwd 0.041s | bwd 0.289s | step 0.361s`:
# a job's own per-rank timer).
_RANK_FILE = re.compile(r"^\[?(?:workerlog|worker|rank)(?:[._-]| (?=\d+ ?[|:]))?(\d{1,7})\]?:? ")
_RANK_FIELD = re.compile(
    r"(?<![\w.])(?P<name>[A-Za-z][A-Za-z_]{0,30}_(?:cost|time|ms))[:=]\s*(?P<value>\d+(?:\.\d+)?)\b"
)
_RANK_CELL = re.compile(
    r"(?:^|[|,(])\s{0,16}(?P<name>[A-Za-z][\w+/-]{0,30})\s{0,16}[:=]?\s{0,16}"
    r"(?P<value>\d+(?:\.\d+)?)\s{0,16}(?P<unit>ms|s)?\s{0,16}(?=[|,)]|$)"
)
# The heading a block of such lines stands under gives the unit of bare numbers
# (`per-rank iteration breakdown (s):`, then `rank 0: step 1.94 (compute 1.19, summary 0.71)`).
_MS_NOTE = re.compile(r"(?i)\(ms\b|\bin ms\b|\bmsec")


def _rank_line_table(
    lines: list[LogLine], bodies: list[tuple[int, str]]
) -> list[tuple[int, dict[str, dict[int, float]]]]:
    """The last value each rank's own lines give each timer field, as one table (at the last
    such line), when enough ranks give them."""
    columns: dict[str, dict[int, float]] = {}
    last = -1
    bare = 0.0  # ms per unit of a bare number, from the heading above (0: none said)
    for order, body in bodies:
        if "_" not in body and "|" not in body and "," not in body and ":" not in body:
            continue
        rank = strip_prefixes(lines[order].text).rank
        if (label := _RANK_FILE.match(body)) is not None:
            rank = int(label.group(1))
        elif _TIMED.search(body):
            bare = 1.0 if _MS_NOTE.search(body) else 1000.0 if _SECONDS_NOTE.search(body) else 0.0
        if rank is None:
            continue
        for m in _RANK_FIELD.finditer(body):
            scale = 1.0 if m["name"].endswith("_ms") else 1000.0
            columns.setdefault(m["name"], {})[rank] = float(m["value"]) * scale
            last = order
        for m in _RANK_CELL.finditer(body) if ("|" in body or "," in body) else ():
            # (bare numbers only on a rank's own labelled line under its heading)
            scale = {"ms": 1.0, "s": 1000.0}.get(m["unit"] or "", bare if label else 0.0)
            if scale:
                columns.setdefault(m["name"], {})[rank] = float(m["value"]) * scale
                last = order
    columns = {n: v for n, v in columns.items() if len(v) >= MIN_TABLE_RANKS}
    return [(last, columns)] if columns else []


@dataclass
class PhaseReports:
    reports: list[Flagged] = field(default_factory=list)
    """Each table's flagged ranks (empty where none stands out), in order."""
    phases: list[str] = field(default_factory=list)
    """The column that flagged them, per flagged table."""
    lines: list[LogLine] = field(default_factory=list)
    """The line of each flagged table."""
    known: dict[int, str] = field(default_factory=dict)
    """Every rank → host the tables print."""
    world: int = 0


def phase_reports(a: Analysis, bodies: list[tuple[int, str]]) -> PhaseReports:
    """The phase tables of the job's output, then those of its metrics file (a snapshot the
    job's timer wrote: `metrics.txt`)."""
    out = PhaseReports()
    metrics = getattr(a, "metric_lines", [])
    for lines, peeled in ((a.lines, bodies), (metrics, _peel(metrics))):
        found: list[tuple[int, dict[str, dict[int, float]], dict[int, str]]] = [
            (o, c, {}) for o, c in _one_line_tables(peeled)
        ]
        found += _csv_tables(peeled)
        found += [(o, c, {}) for o, c in _rank_line_table(lines, peeled)]
        for order, columns, hosts in sorted(found, key=lambda t: t[0]):
            out.known.update(hosts)
            out.world = max(out.world, *(max(v, default=-1) + 1 for v in columns.values()))
            flagged = _flag(columns, hosts)
            out.reports.append(flagged[0] if flagged else set())
            if flagged:
                out.phases.append(flagged[1])
                out.lines.append(lines[order])
    return out


def _peel(lines: list[LogLine]) -> list[tuple[int, str]]:
    return [(i, strip_prefixes(e.text).body) for i, e in enumerate(lines)]


def lagging_in_stalls(a: Analysis) -> tuple[list[Flagged], list[LogLine]]:
    """Horovod stall reports of a job still running, each the ranks missing from its stalled
    tensors, where training went on after the report (a rank late, not dead) and the missing
    sets do not cross (crossing sets are the job's deadlock, `collective_stalls`)."""
    if not a.running or not a.scan.advances:
        return [], []
    last_progress = a.lines[a.scan.advances[-1]].line_no
    reports: list[Flagged] = []
    lines: list[LogLine] = []
    for line, tensors in stall_reports(a.lines):
        if line.line_no > last_progress or crossing(tensors, None):
            continue
        missing = set().union(*(r for k, r in tensors.items() if not k.startswith("!")))
        if missing:
            reports.append({(r, None) for r in missing})
            lines.append(line)
    return reports, lines


def own_work_lines(a: Analysis, ranks: list[int]) -> list[LogLine]:
    """Lines in which the slow ranks report the job's extra work, twice at least."""
    wanted = set(ranks)
    found = []
    for e in a.lines:
        if not OWN_WORK.search(e.text):
            continue
        pre = strip_prefixes(e.text)
        if wanted & {pre.rank, pre.task}:
            found.append(e)
    return found if len(found) >= 2 else []


def node_quiet(a: Analysis, nodes: list[str], *, checked: bool = False) -> bool:
    """None of these nodes has a fault of its own in its logs or metrics; `checked`: and each
    has logs of its own in the bundle (a node nobody looked at may be slow for all we know)."""
    named = set(nodes)
    if checked:
        have = {a.topo.hosts.canonical(h) or h for h in a.node_logs}
        if not named or not named <= have:
            return False
    if any(e.root and e.node in named for e in a.node_events):
        return False
    return not any(f.severity == "degraded" and f.host in named for f in a.metric_findings)
