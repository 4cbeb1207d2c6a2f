"""`resurgo policy replay --policy FILE [--since 7d] [--url AUDIT_URL] [--json]`: what-if.

Reads the recorded `attribution` and `advice` audit events (plus the attempt/progress events
that describe each attempt), rebuilds every job's `RecoveryState` attempt by attempt, and asks
the candidate policy (`resurgo.policy.decide.decide`) what it would have advised. Budgets, failure
counts and exclusions evolve with the *candidate's* own advice; once the candidate would have
stopped a job, its later recorded decisions are reported as never reached.

The policy file is TOML: either `[policies.NAME]` tables (pick one with `--name` when there are
several) or PolicyConfig fields at the top level. Unknown fields are an error.

Known approximation: audit events carry an attempt's first iteration (`progress`,
`progress_recovered`) and where it resumed from, not its last one, so an attempt's progress is
taken from those; an attempt with neither counts as one without progress.

The command and its output are `resurgo.cli.policy_replay`.
"""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from resurgo.contracts import (
    Advice,
    AdviceKind,
    AttemptRecord,
    Attribution,
    AuditEvent,
    AuditEventType,
    Directive,
    PolicyConfig,
    RecoveryState,
)
from resurgo.errors import PermanentError
from resurgo.policy.decide import apply_advice, decide

REPLAY_TYPES = (
    AuditEventType.MONITORING_STARTED,
    AuditEventType.ATTEMPT_STARTED,
    AuditEventType.PROGRESS,
    AuditEventType.PROGRESS_RECOVERED,
    AuditEventType.REQUEUED_EXTERNALLY,
    AuditEventType.ATTRIBUTION,
    AuditEventType.ADVICE,
)


class PolicyFileError(PermanentError, ValueError):
    """The candidate policy file cannot be used."""


def load_policy(path: str | Path, name: str | None = None) -> PolicyConfig:
    """A PolicyConfig from `[policies.NAME]` (or the top level) of a TOML file."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text("utf-8"))
    except OSError as exc:
        raise PolicyFileError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"{file}: not valid TOML: {exc}") from exc
    table: dict[str, Any]
    if isinstance(data.get("policies"), dict) and data["policies"]:
        policies = data["policies"]
        if name is None:
            if len(policies) == 1:
                name = next(iter(policies))
            elif "default" in policies:
                name = "default"
            else:
                names = ", ".join(sorted(policies))
                raise PolicyFileError(f"{file}: several policies ({names}); pick one with --name")
        if name not in policies or not isinstance(policies[name], dict):
            raise PolicyFileError(f"{file}: no [policies.{name}] table")
        table = {"name": name, **policies[name]}
    else:
        table = {k: v for k, v in data.items() if k != "policies"}
        if name is not None:
            table["name"] = name
        table.setdefault("name", file.stem)
    try:
        return PolicyConfig.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyFileError(f"{file}: {where}: {first['msg']}") from exc


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`7d`, `12h`, `30m`, `90s`, `2w` → that long ago; or an ISO date/time (UTC if naive)."""
    now = now or datetime.now(UTC)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return now - timedelta(seconds=float(m.group(1)) * unit)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"invalid --since {text!r} (use e.g. 7d, 12h or 2026-11-01)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


M = TypeVar("M", bound=BaseModel)


def _model(cls: type[M], data: dict[str, Any]) -> M | None:
    """Validate recorded data, ignoring fields this version does not know."""
    known = {k: v for k, v in data.items() if k in cls.model_fields}
    try:
        return cls.model_validate(known)
    except ValidationError:
        return None


@dataclass
class Decision:
    cluster: str
    job_id: int
    workflow_id: str
    attempt: int
    at: datetime
    attribution: Attribution
    recorded: Advice
    replayed: Advice | None
    """None: the candidate policy had already stopped the job before this attempt."""
    stopped_by: Advice | None = None

    @property
    def changed(self) -> bool:
        if self.replayed is None:
            return True
        return (self.replayed.kind, sorted(self.replayed.nodes)) != (
            self.recorded.kind,
            sorted(self.recorded.nodes),
        )

    @property
    def why(self) -> str:
        if self.replayed is None:
            stop = self.stopped_by
            where = f" at attempt {stop.attempt} ({stop.rule})" if stop else ""
            return f"never reached: the candidate policy stopped the job earlier{where}"
        if not self.changed:
            return ""
        return f"{self.replayed.rule}: {self.replayed.reason}"

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "job_id": self.job_id,
            "workflow_id": self.workflow_id,
            "attempt": self.attempt,
            "at": self.at.isoformat(),
            "category": self.attribution.category.value,
            "fingerprint": self.attribution.fingerprint,
            "culprit_nodes": list(self.attribution.culprit_nodes),
            "recorded": _advice_json(self.recorded),
            "replayed": _advice_json(self.replayed) if self.replayed is not None else None,
            "changed": self.changed,
            "why": self.why,
        }


def _advice_json(advice: Advice) -> dict[str, Any]:
    return {
        "kind": advice.kind.value,
        "nodes": list(advice.nodes),
        "rule": advice.rule,
        "reason": advice.reason,
    }


@dataclass
class ReplayResult:
    policy: PolicyConfig
    decisions: list[Decision] = field(default_factory=list)
    skipped: int = 0
    """Recorded events that could not be read (e.g. from an incompatible version)."""

    @property
    def changed(self) -> list[Decision]:
        return [d for d in self.decisions if d.changed]

    @property
    def jobs(self) -> int:
        return len({d.workflow_id for d in self.decisions})

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy.model_dump(mode="json"),
            "jobs": self.jobs,
            "decisions": len(self.decisions),
            "changed": [d.as_json() for d in self.changed],
            "skipped_events": self.skipped,
        }


def replay(events: Iterable[AuditEvent], policy: PolicyConfig) -> ReplayResult:
    """Re-decide every recorded decision with `policy` (pure; events in any order)."""
    result = ReplayResult(policy)
    by_job: dict[str, list[AuditEvent]] = defaultdict(list)
    for event in events:
        by_job[event.workflow_id].append(event)
    for workflow_id in sorted(by_job):
        ordered = sorted(by_job[workflow_id], key=lambda e: (e.at, getattr(e, "id", 0), e.event_id))
        _replay_job(ordered, policy, result)
    result.decisions.sort(key=lambda d: (d.at, d.workflow_id, d.attempt))
    return result


def _record(records: dict[int, AttemptRecord], attempt: int) -> AttemptRecord:
    if attempt not in records:
        records[attempt] = AttemptRecord(attempt=attempt)
    return records[attempt]


def _replay_job(events: Sequence[AuditEvent], policy: PolicyConfig, out: ReplayResult) -> None:
    directive = Directive()
    records: dict[int, AttemptRecord] = {}
    pending: dict[int, Attribution] = {}
    state = RecoveryState()
    stopped: Advice | None = None
    for event in events:
        attempt = event.attempt if event.attempt is not None else state.attempt
        data = event.data or {}
        if event.type == AuditEventType.MONITORING_STARTED:
            raw = data.get("directive")
            if isinstance(raw, dict):
                directive = _model(Directive, raw) or directive
        elif event.type in (AuditEventType.ATTEMPT_STARTED, AuditEventType.REQUEUED_EXTERNALLY):
            _record(records, attempt).started = event.type == AuditEventType.ATTEMPT_STARTED
        elif event.type in (AuditEventType.PROGRESS, AuditEventType.PROGRESS_RECOVERED):
            rec = _record(records, attempt)
            rec.started = rec.seen_progress = True
            iteration = data.get("iteration")
            if isinstance(iteration, int):
                rec.first_iteration = rec.first_iteration if rec.first_iteration else iteration
                rec.max_iteration = max(rec.max_iteration or -1, iteration)
            resumed = data.get("resumed_from")
            if isinstance(resumed, int):
                rec.resumed_from = resumed
        elif event.type == AuditEventType.ATTRIBUTION:
            attribution = _model(Attribution, data)
            if attribution is None:
                out.skipped += 1
            else:
                pending[attempt] = attribution
        elif event.type == AuditEventType.ADVICE:
            recorded = _model(Advice, data)
            attribution = pending.pop(attempt, None)
            if recorded is None or attribution is None:
                out.skipped += 1
                continue
            decision = Decision(
                cluster=event.cluster, job_id=event.job_id, workflow_id=event.workflow_id,
                attempt=recorded.attempt, at=event.at, attribution=attribution,
                recorded=recorded, replayed=None, stopped_by=stopped,
            )  # fmt: skip
            if stopped is None:
                rec = _record(records, recorded.attempt)
                rec.fingerprint = attribution.fingerprint
                rec.category = attribution.category
                rec.checkpoint_failure = rec.checkpoint_failure or attribution.checkpoint_failure
                state.attempt = recorded.attempt
                state.attempts = [records[k] for k in sorted(records) if k <= recorded.attempt]
                advice = decide(state, attribution, policy, directive)
                state = apply_advice(state, advice)
                decision.replayed = advice
                if advice.kind == AdviceKind.STOP:
                    stopped = advice
            out.decisions.append(decision)


# ---------------------------------------------------------------------------- reading the store
def fetch_events(store: Any, since: datetime | None) -> list[AuditEvent]:
    """Every replay-relevant event of every job that recorded advice since `since`."""
    workflows = {e.workflow_id for e in store.iter_all(types=[AuditEventType.ADVICE], since=since)}
    events: list[AuditEvent] = []
    for workflow_id in sorted(workflows):
        events.extend(store.iter_all(workflow_id=workflow_id, types=list(REPLAY_TYPES)))
    return events
