"""The node health ledger: per node, what Resurgo blamed on it and did to it, from the audit trail.

A pure fold over audit events (in id order), so the CLI, the API, the console and the lemon
sentinel read the same history the same way:

- `attribution` events name culprit nodes: one *failure* per culprit node (job, category, the
  verdict's summary and first evidence lines, time). Verdicts of category `none` are not
  failures;
- `advice` + `action` events of a job: the `exclude_nodes` step of advice g<n> excluded that
  advice's nodes, its `drain_node` step drained its `drain_nodes`; a cross-job drain done inside
  an exclusion step is read from the step's detail;
- the node health workflow's own events (`node_*`, job id 0, the node in `data["node"]`; see
  `node_entry_kind`).

Nothing here reads a clock: `now` and the window come from the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from resurgo.contracts import AuditEvent, AuditEventType, Category, Frozen, LogLine

__all__ = [
    "EntryKind",
    "Ledger",
    "LedgerEntry",
    "NodeRecord",
    "fold_ledger",
    "unvalidated_drain",
]

EntryKind = Literal[
    "failure",
    "exclusion",
    "drain",
    "drain_advised",
    "repaired",
    "validation",
    "resumed",
    "kept_drained",
]
NodeState = Literal["in_service", "drained", "validating"]

_STEP_KEY = re.compile(r":g(\d+):(\w+)$")
_CROSS_JOB_DRAIN = re.compile(r"node (\S+) implicated in (\d+) jobs: drain advised \(drained\)")
_NODE_EVENTS = frozenset(
    {
        AuditEventType.NODE_DRAIN_ADVISED,
        AuditEventType.NODE_DRAINED,
        AuditEventType.NODE_VALIDATION,
        AuditEventType.NODE_RESUMED,
    }
)
# A bug in the training code is not the node's fault: such failures are listed, never counted.
NOT_THE_NODES_FAULT = frozenset({Category.APPLICATION.value, Category.NONE.value})
MAX_EVIDENCE_LINES = 3
NODE_WORKFLOW_PREFIX = "resurgo-node:"
MAX_SUMMARY = 500


class LedgerEntry(Frozen):
    """One thing in a node's history."""

    kind: EntryKind
    at: datetime
    event_id: str
    job_id: int | None = None
    workflow_id: str = ""
    category: str | None = None
    summary: str = ""
    # Failures: the first lines of the verdict's evidence (job output: shown per the API's
    # visibility rules) and the job's Slurm user, when monitoring recorded it.
    evidence: list[LogLine] = Field(default_factory=list)
    user: str | None = None
    # Drain advice and drains: the jobs whose failures led to it.
    jobs: list[int] = Field(default_factory=list)
    # Validations: whether the check passed.
    passed: bool | None = None


class NodeRecord(Frozen):
    """One node of one cluster: counts, state as Resurgo last left it, and history (oldest
    first)."""

    cluster: str
    node: str
    state: NodeState = "in_service"
    # Distinct jobs blamed on the node within the window since it was last cleared (advised or
    # resumed after validation): what lemon detection counts.
    risk: int = 0
    failures: int = 0
    failing_jobs: list[int] = Field(default_factory=list)
    exclusions: int = 0
    drains: int = 0
    resumes: int = 0
    last_failure_at: datetime | None = None
    history: list[LedgerEntry] = Field(default_factory=list)


def _text(value: Any, limit: int = MAX_SUMMARY) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _nodes(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [n for n in value if isinstance(n, str) and n]


def _jobs(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [j for j in value if isinstance(j, int) and not isinstance(j, bool)]


def _evidence(value: Any) -> list[LogLine]:
    lines: list[LogLine] = []
    for raw in value if isinstance(value, list) else []:
        try:
            lines.append(LogLine.model_validate(raw))
        except ValueError:
            continue
        if len(lines) >= MAX_EVIDENCE_LINES:
            break
    return lines


def node_entry_kind(event: AuditEvent) -> EntryKind:
    """A node health event as a history entry: a drain after a failed validation (`data.kept`)
    or taken over for validation (`data.adopted`) is `kept_drained`, the start of a validation
    (`data.phase == "started"`) is `repaired`."""
    if event.type == AuditEventType.NODE_DRAIN_ADVISED:
        return "drain_advised"
    if event.type == AuditEventType.NODE_DRAINED:
        kept = event.data.get("kept") is True or event.data.get("adopted") is True
        return "kept_drained" if kept else "drain"
    if event.type == AuditEventType.NODE_VALIDATION:
        return "repaired" if event.data.get("phase") == "started" else "validation"
    return "resumed"


class Ledger:
    """Accumulates events (`add`, in id order) into per-node histories (`records`)."""

    def __init__(self) -> None:
        self._history: dict[tuple[str, str], list[LedgerEntry]] = {}
        self._advice: dict[tuple[str, int], tuple[list[str], list[str]]] = {}
        self._users: dict[str, str] = {}

    def add(self, event: AuditEvent) -> None:
        data = event.data
        if event.type in _NODE_EVENTS:
            node = data.get("node")
            if isinstance(node, str) and node:
                passed = data.get("passed")
                self._entry(event.cluster, node, node_entry_kind(event), event,
                            jobs=_jobs(data.get("jobs")),
                            passed=passed if isinstance(passed, bool) else None)  # fmt: skip
            return
        if event.type == AuditEventType.MONITORING_STARTED:
            user = data.get("user")
            if isinstance(user, str) and user:
                self._users[event.workflow_id] = user
        elif event.type == AuditEventType.ATTRIBUTION:
            self._attribution(event)
        elif event.type == AuditEventType.ADVICE:
            generation = data.get("generation")
            if isinstance(generation, int):
                nodes = (_nodes(data.get("nodes")), _nodes(data.get("drain_nodes")))
                self._advice[(event.workflow_id, generation)] = nodes
        elif event.type == AuditEventType.ACTION:
            self._action(event)

    def _attribution(self, event: AuditEvent) -> None:
        data = event.data
        category = data.get("category")
        if category == Category.NONE.value or data.get("kind") == "none":
            return
        for node in dict.fromkeys(_nodes(data.get("culprit_nodes"))):
            self._entry(
                event.cluster, node, "failure", event,
                category=category if isinstance(category, str) else None,
                summary=_text(data.get("summary")),
                evidence=_evidence(data.get("evidence")),
                user=self._users.get(event.workflow_id),
            )  # fmt: skip

    def _action(self, event: AuditEvent) -> None:
        data = event.data
        key = _STEP_KEY.search(_text(data.get("idempotency_key"), 300))
        if key is None:
            return
        generation, step = int(key.group(1)), key.group(2)
        nodes, drain_nodes = self._advice.get((event.workflow_id, generation), ([], []))
        detail = _text(data.get("detail"), 2000)
        if step == "exclude_nodes":
            for node in nodes:
                self._entry(event.cluster, node, "exclusion", event, summary=detail)
            for match in _CROSS_JOB_DRAIN.finditer(detail):
                self._entry(event.cluster, match.group(1), "drain", event, summary=match.group(0))
        elif step == "drain_node":
            for node in drain_nodes:
                self._entry(event.cluster, node, "drain", event, summary=detail)

    def _entry(
        self, cluster: str, node: str, kind: EntryKind, event: AuditEvent, **fields: Any
    ) -> None:
        job_id = event.job_id if event.job_id > 0 else None
        entry = LedgerEntry(
            kind=kind, at=event.at, event_id=event.event_id, job_id=job_id,
            workflow_id=event.workflow_id, summary=fields.pop("summary", "") or event.summary,
            **fields,
        )  # fmt: skip
        self._history.setdefault((cluster, node), []).append(entry)

    def histories(self) -> list[tuple[str, str, list[LedgerEntry]]]:
        """(cluster, node, history) of every node seen so far."""
        return [(c, n, list(h)) for (c, n), h in self._history.items()]

    def records(self, *, now: datetime, window: timedelta) -> list[NodeRecord]:
        """Every node seen, riskiest first (then most failures, most recent, name)."""
        out = [record_of(c, n, h, now=now, window=window) for (c, n), h in self._history.items()]
        out.sort(key=lambda r: (r.node, r.cluster))
        out.sort(key=lambda r: (r.last_failure_at or datetime.min.replace(tzinfo=now.tzinfo)),
                 reverse=True)  # fmt: skip
        out.sort(key=lambda r: (r.risk, r.failures), reverse=True)
        return out


def counted_failures(
    history: Iterable[LedgerEntry], *, now: datetime, window: timedelta
) -> list[LedgerEntry]:
    """Failures that count towards the node's risk: not the application's, within the window
    and after the node was last cleared (drain advised, or resumed after a passing validation),
    never in the future."""
    entries = list(history)
    cleared = max((e.at for e in entries if e.kind in ("drain_advised", "resumed")), default=None)
    return [
        e
        for e in entries
        if e.kind == "failure"
        and e.job_id is not None
        and e.category not in NOT_THE_NODES_FAULT
        and now - window < e.at <= now
        and (cleared is None or e.at > cleared)
    ]


def state_of(history: Iterable[LedgerEntry]) -> NodeState:
    state: NodeState = "in_service"
    for entry in history:
        if entry.kind in ("drain", "kept_drained"):
            state = "drained"
        elif entry.kind == "repaired" and state == "drained":
            state = "validating"
        elif entry.kind == "resumed":
            state = "in_service"
    return state


def unvalidated_drain(history: Iterable[LedgerEntry]) -> LedgerEntry | None:
    """The drain a job's recovery made, when the node is still drained by it and no node
    workflow has taken it over: a node that would otherwise wait for a human."""
    last: LedgerEntry | None = None
    for entry in history:
        if entry.kind == "drain" and not entry.workflow_id.startswith(NODE_WORKFLOW_PREFIX):
            last = entry
        elif entry.kind in ("drain", "kept_drained", "resumed", "repaired", "validation"):
            last = None
    return last


def record_of(
    cluster: str, node: str, history: list[LedgerEntry], *, now: datetime, window: timedelta
) -> NodeRecord:
    failures = [e for e in history if e.kind == "failure"]
    counted = counted_failures(history, now=now, window=window)
    return NodeRecord(
        cluster=cluster,
        node=node,
        state=state_of(history),
        risk=len({e.job_id for e in counted}),
        failures=len(failures),
        failing_jobs=sorted({e.job_id for e in failures if e.job_id is not None}),
        exclusions=sum(1 for e in history if e.kind == "exclusion"),
        drains=sum(1 for e in history if e.kind == "drain"),
        resumes=sum(1 for e in history if e.kind == "resumed"),
        last_failure_at=max((e.at for e in failures), default=None),
        history=history,
    )


def fold_ledger(
    events: Iterable[AuditEvent], *, now: datetime, window: timedelta
) -> list[NodeRecord]:
    """The ledger of `events` (any order of ids is taken as given: pass them in id order)."""
    ledger = Ledger()
    for event in events:
        ledger.add(event)
    return ledger.records(now=now, window=window)
