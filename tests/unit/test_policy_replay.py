"""`resurgo policy replay`: recorded decisions re-decided with a candidate policy.

The audit store is a real SQLite file filled the way the workflow fills it: for each attempt an
`attempt_started` and progress events, then `anomaly` + `attribution` + `advice` (the advice
computed by the real default policy from the state the workflow carried).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resurgo.audit.store import AuditStore
from resurgo.cli.main import app
from resurgo.contracts import (
    AdviceKind,
    AnomalyKind,
    AttemptRecord,
    Attribution,
    AuditEvent,
    Category,
    Directive,
    LogLine,
    PolicyConfig,
    RecoveryState,
)
from resurgo.policy.decide import apply_advice, decide
from resurgo.policy.replay import PolicyFileError, load_policy, parse_since, replay

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


class Recorder:
    """Writes a job's story the way JobRecoveryWorkflow does."""

    def __init__(self, job_id: int, start: datetime, directive: Directive | None = None) -> None:
        self.job_id = job_id
        self.wf = f"resurgo:local:{job_id}:{int(start.timestamp())}"
        self.at = start
        self.state = RecoveryState()
        self.directive = directive or Directive()
        self.events: list[AuditEvent] = []
        self.emit("monitoring_started", None, {"directive": self.directive.model_dump()})

    def emit(self, type_: str, attempt: int | None, data: dict[str, object]) -> None:
        self.at += timedelta(seconds=30)
        ident = f"{self.wf}:{type_}:a{attempt if attempt is not None else '-'}"
        self.events.append(
            AuditEvent(
                event_id=f"{ident}:g{self.state.generation}", cluster="local",
                job_id=self.job_id, workflow_id=self.wf, attempt=attempt, type=type_,
                producer="workflow", at=self.at, summary=type_, data=data,
            )
        )  # fmt: skip

    def attempt(
        self,
        attribution: Attribution | None,
        *,
        first: int | None,
        last: int | None,
        resumed: int | None = None,
    ) -> None:
        n = len(self.state.attempts)
        self.state.attempt = n
        record = AttemptRecord(attempt=n, started=True)
        self.state.attempts = [*self.state.attempts, record]
        self.emit("attempt_started", n, {"nodes": ["node1", "node2"], "excluded": []})
        if first is not None:
            record.seen_progress, record.first_iteration = True, first
            record.max_iteration, record.resumed_from = last, resumed
            if n == 0:
                self.emit("progress", n, {"iteration": first})
            else:
                self.emit("progress_recovered", n, {"iteration": first, "resumed_from": resumed})
        if attribution is None:
            self.emit("completed", n, {})
            return
        record.fingerprint, record.category = attribution.fingerprint, attribution.category
        advice = decide(self.state, attribution, PolicyConfig(), self.directive)
        self.state = apply_advice(self.state, advice)
        self.emit("anomaly", n, {"kind": attribution.kind, "attempt": n})
        self.emit("attribution", n, attribution.model_dump(mode="json"))
        self.emit("advice", n, advice.model_dump(mode="json"))


def attribution(category: Category, fp: str, nodes: list[str] = (), conf: float = 0.9,  # type: ignore[assignment]
                outcome: str | None = None) -> Attribution:  # fmt: skip
    return Attribution(
        kind=AnomalyKind.CRASH, category=category, culprit_nodes=list(nodes), confidence=conf,
        fingerprint=fp, summary=f"{category.value} failure", scheduler_outcome=outcome,
        evidence=[LogLine(source="job.log", line_no=7, text="srun: error: node2: task 1: ...")],
    )  # fmt: skip


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore(url)
    store.create_schema()
    jobs: list[Recorder] = []
    # hardware on node2, requeued excluding it; the next attempt resumes and completes
    hw = Recorder(101, T0)
    hw.attempt(attribution(Category.HARDWARE_GPU, "hardware_gpu:aaa", ["node2"]), first=1, last=30)
    hw.attempt(None, first=31, last=100, resumed=30)
    jobs.append(hw)
    # the same unknown crash three times with progress: retried twice, then stopped
    crash = Recorder(102, T0 + timedelta(hours=1))
    for i in range(3):
        crash.attempt(attribution(Category.UNKNOWN, "unknown:bbb", ["node1"], 0.6),
                      first=10 * i + 1, last=10 * i + 9, resumed=10 * i or None)  # fmt: skip
    jobs.append(crash)
    # the same exception on every rank: stopped at once
    app_bug = Recorder(103, T0 + timedelta(hours=2))
    app_bug.attempt(attribution(Category.APPLICATION, "application:ccc", conf=0.95), first=None,
                    last=None)  # fmt: skip
    jobs.append(app_bug)
    # preempted (free requeue), then completed
    pre = Recorder(104, T0 + timedelta(hours=3))
    pre.attempt(attribution(Category.SCHEDULER, "scheduler:ddd", outcome="preempted"), first=1,
                last=50)  # fmt: skip
    pre.attempt(None, first=51, last=90, resumed=50)
    jobs.append(pre)
    for job in jobs:
        store.append(job.events)
    store.close()
    return url


def events(url: str) -> list[AuditEvent]:
    store = AuditStore(url)
    try:
        return list(store.iter_all())
    finally:
        store.close()


def test_the_recorded_policy_changes_nothing(store_url: str) -> None:
    result = replay(events(store_url), PolicyConfig())
    assert len(result.decisions) == 6 and result.jobs == 4
    assert result.changed == [] and result.skipped == 0
    kinds = [d.recorded.kind for d in result.decisions]
    assert kinds.count(AdviceKind.STOP) == 2  # the repeated crash (3rd time) and the app bug


def test_a_stricter_policy_shows_every_changed_decision(store_url: str) -> None:
    strict = PolicyConfig(name="strict", max_attempts=1, budget_per_fingerprint=0)
    result = replay(events(store_url), strict)
    changed = {(d.job_id, d.attempt): d for d in result.changed}
    assert set(changed) == {(101, 0), (102, 0), (102, 1), (102, 2)}
    first = changed[(101, 0)]
    assert first.recorded.kind == AdviceKind.REQUEUE_EXCLUDING
    assert first.replayed is not None and first.replayed.kind == AdviceKind.STOP
    assert first.replayed.rule == "fingerprint_budget_exhausted"
    assert "fingerprint_budget_exhausted" in first.why
    later = changed[(102, 1)]
    assert later.replayed is None and "never reached" in later.why
    # the already-stopped app bug and the free preemption requeue are unchanged
    assert (103, 0) not in changed and (104, 0) not in changed


def test_a_looser_policy_lets_the_crash_loop_run_longer(store_url: str) -> None:
    loose = PolicyConfig(name="loose", budget_per_fingerprint=5)
    changed = replay(events(store_url), loose).changed
    assert [(d.job_id, d.attempt) for d in changed] == [(102, 2)]
    assert changed[0].replayed is not None and changed[0].replayed.kind == AdviceKind.REQUEUE


def test_cli_table_and_json(store_url: str, tmp_path: Path) -> None:
    strict = tmp_path / "strict.toml"
    strict.write_text("[policies.strict]\nmax_attempts = 1\nbudget_per_fingerprint = 0\n")
    same = tmp_path / "same.toml"
    same.write_text("max_attempts = 5\nbudget_per_fingerprint = 2\n")
    runner = CliRunner()

    out = runner.invoke(app, ["policy", "replay", "--policy", str(strict), "--url", store_url])
    assert out.exit_code == 0, out.output
    assert "6 recorded decision(s) in 4 job(s); 4 would change" in out.output
    assert "local/101" in out.output and "local/102" in out.output
    assert "local/103" not in out.output and "local/104" not in out.output

    out = runner.invoke(
        app, ["policy", "replay", "--policy", str(strict), "--url", store_url, "--json"]
    )
    data = json.loads(out.stdout)
    assert data["decisions"] == 6 and len(data["changed"]) == 4
    assert data["policy"]["name"] == "strict"
    assert {c["job_id"] for c in data["changed"]} == {101, 102}

    out = runner.invoke(
        app, ["policy", "replay", "--policy", str(same), "--url", store_url, "--json"]
    )
    assert json.loads(out.stdout)["changed"] == []

    # --since keeps only jobs advised in the window (the last two here), whole histories
    since = (T0 + timedelta(hours=2)).isoformat()
    out = runner.invoke(app, ["policy", "replay", "--policy", str(strict), "--url", store_url,
                              "--since", since, "--json"])  # fmt: skip
    assert json.loads(out.stdout)["decisions"] == 2


def test_policy_files(tmp_path: Path) -> None:
    two = tmp_path / "two.toml"
    two.write_text("[policies.a]\nmax_attempts = 1\n[policies.b]\nmax_attempts = 2\n")
    with pytest.raises(PolicyFileError, match="pick one with --name"):
        load_policy(two)
    assert load_policy(two, "b").max_attempts == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("max_atempts = 1\n")
    with pytest.raises(PolicyFileError, match="max_atempts"):
        load_policy(bad)
    with pytest.raises(PolicyFileError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
    now = datetime(2026, 11, 29, tzinfo=UTC)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_since("yesterday", now)
