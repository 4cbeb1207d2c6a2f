"""Rule-based attribution: why did the attempt fail, and which nodes are to blame.

Pure: it reads the attempt's log lines and Slurm facts and returns an `Attribution`. The root
cause is the earliest root-candidate event; cascades (peers timing out or losing their
connection because one rank died) never are. The same error on every rank is the application's.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field

from activities.detect.lines import rank_of, split_srun_label
from activities.detect.registry import PatternMatch, Registry
from activities.detect.watcher import is_checkpoint_failure
from workflows.contracts import (
    Anomaly,
    AnomalyKind,
    Attribution,
    Category,
    JobObservation,
    LogLine,
    NodeObservation,
)

_SRUN_TASK = re.compile(r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): (?P<what>.+)$")
_RANK_NODE = re.compile(
    r"\brank[=\s:]+(?P<rank>\d+)\b.{0,80}?\b(?:node|host|hostname)[=\s:]+(?P<node>[A-Za-z0-9][\w.-]*)"
)
_ELASTIC_HOST = re.compile(r"^\s*host\s*:\s*(?P<node>[\w.-]+)\s*$")
_ELASTIC_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_HOST_PREFIX = re.compile(r"^(?P<node>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\]")
_CANCELLED_DUE = re.compile(r"CANCELLED AT \S+ DUE TO (?P<why>[A-Z ]+?) \*\*\*")
_NORMALISE = re.compile(r"0x[0-9a-fA-F]+|\d+|/[\w./-]+|\[[\w.:]+\]:\d+")
_DOWN_STATES = ("DOWN", "FAIL", "NOT_RESPONDING", "NO_RESPOND")


@dataclass
class Event:
    line: LogLine
    rank: int | None
    node: str | None
    match: PatternMatch
    message: str


@dataclass
class Topology:
    rank_node: dict[int, str] = field(default_factory=dict)

    def node_of(self, rank: int | None) -> str | None:
        return None if rank is None else self.rank_node.get(rank)


def _tasks(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)])
    return out


def learn_topology(lines: list[LogLine], node_list: list[str]) -> Topology:
    """Rank → node from what the log says, falling back to Slurm's block task layout."""
    topo = Topology()
    labels: set[int] = set()
    pending_host: str | None = None
    for entry in lines:
        task, text = split_srun_label(entry.text)
        if task is not None:
            labels.add(task)
        if m := _RANK_NODE.search(text):
            topo.rank_node.setdefault(int(m.group("rank")), m.group("node"))
        elif m := _SRUN_TASK.search(text):
            for t in _tasks(m.group("tasks")):
                topo.rank_node.setdefault(t, m.group("node"))
        elif m := _ELASTIC_HOST.match(text):
            pending_host = m.group("node")
        elif (m := _ELASTIC_RANK.match(text)) and pending_host:
            topo.rank_node.setdefault(int(m.group("rank")), pending_host)
            pending_host = None
    if node_list and labels:
        per_node = max(1, -(-(max(labels) + 1) // len(node_list)))
        for task in labels:
            index = task // per_node
            if index < len(node_list):
                topo.rank_node.setdefault(task, node_list[index])
    return topo


def _event_node(text: str, rank: int | None, topo: Topology, node_list: list[str]) -> str | None:
    if m := _SRUN_TASK.search(text):
        return m.group("node")
    if (m := _HOST_PREFIX.match(text)) and (not node_list or m.group("node") in node_list):
        return m.group("node")
    return topo.node_of(rank)


def _message(text: str) -> str:
    """The error text without prefixes, numbers, paths and addresses (for fingerprints)."""
    _, rest = split_srun_label(text)
    rest = re.sub(r"^\[rank\d+\]:\s*", "", rest)
    return _NORMALISE.sub("#", rest).strip()[:200]


def fingerprint(category: Category, key: str, nodes: list[str]) -> str:
    digest = hashlib.sha256(f"{category.value}|{key}|{','.join(sorted(nodes))}".encode())
    return f"{category.value}:{digest.hexdigest()[:12]}"


def collect_events(
    registry: Registry, lines: list[LogLine], topo: Topology, node_list: list[str]
) -> list[Event]:
    events: list[Event] = []
    for entry in lines:
        matches = [m for m in registry.scan(entry.text) if m.role in ("root", "cascade")]
        if not matches:
            continue
        task, text = split_srun_label(entry.text)
        rank = rank_of(text)
        if rank is None:
            rank = task
        node = _event_node(text, rank, topo, node_list)
        for match in matches:
            events.append(Event(entry, rank, node, match, _message(text)))
    return events


def _scheduler_outcome(obs: JobObservation | None, lines: list[LogLine]) -> str | None:
    for entry in reversed(lines):
        if m := _CANCELLED_DUE.search(entry.text):
            why = m.group("why").strip()
            if "TIME LIMIT" in why:
                return "timeout"
            if "PREEMPTION" in why:
                return "preempted"
            if "NODE FAIL" in why:
                return "node_fail"
            if "REQUEUE" in why:
                return None
    if obs is None:
        return None
    return {
        "TIMEOUT": "timeout",
        "PREEMPTED": "preempted",
        "NODE_FAIL": "node_fail",
        "BOOT_FAIL": "node_fail",
        "CANCELLED": "owner_cancelled",
    }.get(obs.state)


def attribute(
    registry: Registry,
    anomaly: Anomaly,
    lines: list[LogLine],
    obs: JobObservation | None,
    nodes: list[NodeObservation],
    node_list: list[str],
) -> Attribution:
    """Name the category, the culprit nodes and the evidence for one anomaly."""
    topo = learn_topology(lines, node_list)
    events = collect_events(registry, lines, topo, node_list)
    outcome = _scheduler_outcome(obs, lines)
    ckpt = any(is_checkpoint_failure(e.match.id) for e in events)
    down = sorted(
        n.name for n in nodes if n.name in node_list and any(s in n.state for s in _DOWN_STATES)
    )

    def verdict(
        category: Category,
        culprits: list[str],
        confidence: float,
        key: str,
        summary: str,
        evidence: list[LogLine],
        ranks: list[int] | None = None,
    ) -> Attribution:
        culprits = sorted(set(culprits))
        return Attribution(
            kind=anomaly.kind,
            category=category,
            culprit_nodes=culprits,
            culprit_ranks=sorted(set(ranks or [])),
            confidence=confidence,
            fingerprint=fingerprint(category, key, culprits),
            summary=summary,
            evidence=evidence[:20],
            scheduler_outcome=outcome,
            checkpoint_failure=ckpt,
        )

    if outcome in ("preempted", "owner_cancelled", "timeout"):
        return verdict(
            Category.SCHEDULER, [], 0.9, outcome, f"job {obs.state if obs else outcome}",
            [e.line for e in events[:5]],
        )  # fmt: skip
    if outcome == "node_fail" or down:
        culprits = down or [n for n in anomaly.nodes if n]
        return verdict(
            Category.HARDWARE_HOST, culprits, 0.85, "node_down",
            f"node(s) {', '.join(culprits) or '?'} failed or stopped responding",
            [e.line for e in events[:5]],
        )  # fmt: skip

    roots = [e for e in events if e.match.role == "root"]
    hardware = [e for e in roots if e.match.category.startswith("hardware")]
    if hardware:
        first = hardware[0]
        culprits = [e.node for e in hardware if e.node][:1]
        return verdict(
            Category(first.match.category), culprits, 0.9, first.match.id,
            f"{first.match.id} on {culprits[0] if culprits else 'unknown node'}",
            [e.line for e in hardware], [e.rank for e in hardware if e.rank is not None],
        )  # fmt: skip

    app = [e for e in roots if e.match.category == "application"]
    if app:
        by_rank: dict[int | None, list[Event]] = defaultdict(list)
        for e in app:
            by_rank[e.rank].append(e)
        messages = {e.message for e in app if e.match.severity == "fatal"} or {app[0].message}
        ranks = [r for r in by_rank if r is not None]
        world = max(len(topo.rank_node), len(ranks))
        everywhere = len(ranks) >= 2 and len(ranks) >= world and len(messages) == 1
        first = app[0]
        confidence = 0.95 if everywhere else 0.7
        scope = "every rank" if everywhere else f"rank {first.rank}"
        return verdict(
            Category.APPLICATION, [], confidence, first.match.id + "|" + sorted(messages)[0],
            f"{first.message[:120]} ({scope})", [e.line for e in app], ranks,
        )  # fmt: skip

    system = [e for e in roots if e.match.category in ("system_software", "unknown")]
    died = _first_task_death(lines, topo)
    if died is not None:
        node, what, line = died
        category = Category.SYSTEM_SOFTWARE if "Segmentation" in what else Category.UNKNOWN
        return verdict(
            category, [node] if node else [], 0.6, f"task_death|{_message(what)}",
            f"first rank to die ran on {node}: {what.strip()}", [line, *[e.line for e in system]],
        )  # fmt: skip
    if system:
        first = system[0]
        return verdict(
            Category(first.match.category), [first.node] if first.node else [], 0.5,
            first.match.id, first.message[:120], [e.line for e in system],
        )  # fmt: skip
    if anomaly.kind == AnomalyKind.HANG:
        return verdict(
            Category.UNKNOWN, [], 0.4, "hang", anomaly.summary, [e.line for e in events[:10]]
        )
    if obs is not None and obs.state == "COMPLETED" and obs.exit_code == 0:
        return Attribution(
            kind="none", category=Category.NONE, confidence=1.0, fingerprint="none",
            summary="job completed",
        )  # fmt: skip
    return verdict(
        Category.UNKNOWN, [], 0.3, f"exit|{obs.exit_code if obs else '?'}",
        anomaly.summary, [e.line for e in events[:10]],
    )  # fmt: skip


def _first_task_death(lines: list[LogLine], topo: Topology) -> tuple[str, str, LogLine] | None:
    """The earliest srun report of a task killed by a signal (the rank that died first)."""
    for entry in lines:
        _, text = split_srun_label(entry.text)
        m = _SRUN_TASK.search(text)
        if m and ("Killed" in m.group("what") or "Segmentation" in m.group("what")):
            return m.group("node"), m.group("what"), entry
    return None
