"""The node ledger folds the audit trail into per-node histories an operator can act on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from resurgo.contracts import AuditEvent, AuditEventType
from resurgo.nodes.ledger import fold_ledger, unvalidated_drain

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
_seq = iter(range(1, 1_000_000))


def event(
    type_: AuditEventType, job: int, at: datetime, data: dict[str, Any], cluster: str = "c1"
) -> AuditEvent:
    wf = f"resurgo:{cluster}:{job}:1" if job else f"resurgo-node:{cluster}:x"
    return AuditEvent(
        event_id=f"e{next(_seq)}", cluster=cluster, job_id=job, workflow_id=wf, type=type_,
        producer="workflow", at=at, summary=f"{type_} of {job}", data=data,
    )  # fmt: skip


def blame(job: int, nodes: list[str], at: datetime, category: str = "hardware_gpu",
          cluster: str = "c1") -> AuditEvent:  # fmt: skip
    return event(
        AuditEventType.ATTRIBUTION, job, at,
        {"kind": "crash", "category": category, "culprit_nodes": nodes,
         "summary": f"xid 79 on {nodes}", "evidence": [
             {"source": "job.log", "line_no": 7, "text": "NVRM: Xid 79"}]},
        cluster,
    )  # fmt: skip


def excluded(job: int, nodes: list[str], at: datetime, detail: str = "") -> list[AuditEvent]:
    wf = f"resurgo:c1:{job}:1"
    return [
        event(AuditEventType.ADVICE, job, at, {"generation": 1, "nodes": nodes,
                                               "drain_nodes": [], "kind": "requeue_excluding"}),
        event(AuditEventType.ACTION, job, at, {"step": "requeue_hold", "outcome": "applied",
                                               "idempotency_key": f"{wf}:g1:requeue_hold"}),
        event(AuditEventType.ACTION, job, at, {"step": "exclude_nodes", "outcome": "applied",
                                               "idempotency_key": f"{wf}:g1:exclude_nodes",
                                               "detail": detail}),
    ]  # fmt: skip


def test_failures_exclusions_and_drains_land_on_the_blamed_node() -> None:
    events = [
        event(AuditEventType.MONITORING_STARTED, 11, T0, {"user": "alice"}),
        blame(11, ["node2"], T0),
        *excluded(11, ["node2"], T0 + timedelta(seconds=5),
                  "ExcNodeList=node2; node node2 implicated in 3 jobs: drain advised (drained)"),
        blame(12, ["node2", "node3"], T0 + timedelta(minutes=1), "hardware_network"),
    ]  # fmt: skip
    records = {r.node: r for r in fold_ledger(events, now=T0 + timedelta(hours=1), window=DAY)}
    assert set(records) == {"node2", "node3"}
    two = records["node2"]
    assert (two.failures, two.failing_jobs, two.exclusions, two.drains) == (2, [11, 12], 1, 1)
    assert two.state == "drained" and two.risk == 2
    first = two.history[0]
    assert first.kind == "failure" and first.job_id == 11 and first.category == "hardware_gpu"
    assert first.user == "alice" and first.evidence[0].text == "NVRM: Xid 79"
    assert "xid 79" in first.summary
    assert records["node3"].failing_jobs == [12] and records["node3"].exclusions == 0


def test_nodes_are_listed_riskiest_first_and_clusters_are_kept_apart() -> None:
    events = [
        blame(1, ["node1"], T0),
        blame(2, ["node4"], T0),
        blame(3, ["node4"], T0),
        blame(4, ["node4"], T0, cluster="c2"),
    ]
    records = fold_ledger(events, now=T0 + timedelta(hours=1), window=DAY)
    assert [(r.cluster, r.node, r.risk) for r in records] == [
        ("c1", "node4", 2),
        ("c1", "node1", 1),
        ("c2", "node4", 1),
    ]


def test_risk_counts_distinct_jobs_in_the_window_but_history_keeps_everything() -> None:
    events = [
        blame(1, ["n"], T0 - 2 * DAY),  # outside the window
        blame(2, ["n"], T0),
        blame(2, ["n"], T0 + timedelta(minutes=5)),  # same job again: one job
        blame(3, ["n"], T0, "application"),  # the code's fault, not the node's
        event(AuditEventType.ATTRIBUTION, 4, T0, {"kind": "none", "category": "none",
                                                  "culprit_nodes": ["n"]}),
    ]  # fmt: skip
    (record,) = fold_ledger(events, now=T0 + timedelta(hours=1), window=DAY)
    assert record.risk == 1
    assert record.failures == 4 and record.failing_jobs == [1, 2, 3]


def test_a_validated_resume_clears_the_risk_and_the_state() -> None:
    node = {"node": "n"}
    events = [
        blame(1, ["n"], T0),
        blame(2, ["n"], T0),
        event(AuditEventType.NODE_DRAIN_ADVISED, 0, T0 + timedelta(minutes=1),
              {**node, "jobs": [1, 2]}),
        event(AuditEventType.NODE_DRAINED, 0, T0 + timedelta(minutes=2), node),
    ]  # fmt: skip
    now = T0 + timedelta(hours=1)
    (drained,) = fold_ledger(events, now=now, window=DAY)
    assert drained.state == "drained" and drained.risk == 0 and drained.drains == 1
    assert drained.history[2].jobs == [1, 2]
    events += [
        event(AuditEventType.NODE_VALIDATION, 0, T0 + timedelta(minutes=3),
              {**node, "phase": "started"}),
        event(AuditEventType.NODE_VALIDATION, 0, T0 + timedelta(minutes=4),
              {**node, "passed": True}),
        event(AuditEventType.NODE_RESUMED, 0, T0 + timedelta(minutes=5), node),
        blame(3, ["n"], T0 + timedelta(minutes=6)),
    ]  # fmt: skip
    (back,) = fold_ledger(events, now=now, window=DAY)
    assert back.state == "in_service" and back.resumes == 1 and back.risk == 1
    assert [e.passed for e in back.history if e.kind == "validation"] == [True]


def test_a_failed_validation_keeps_the_node_drained() -> None:
    node = {"node": "n"}
    events = [
        event(AuditEventType.NODE_DRAINED, 0, T0, node),
        event(
            AuditEventType.NODE_VALIDATION,
            0,
            T0 + timedelta(minutes=1),
            {**node, "phase": "started"},
        ),
    ]
    (validating,) = fold_ledger(events, now=T0 + DAY, window=DAY)
    assert validating.state == "validating"
    events.append(
        event(
            AuditEventType.NODE_VALIDATION,
            0,
            T0 + timedelta(minutes=2),
            {**node, "phase": "finished", "passed": False},
        )
    )
    events.append(
        event(AuditEventType.NODE_DRAINED, 0, T0 + timedelta(minutes=2), {**node, "kept": True})
    )
    (kept,) = fold_ledger(events, now=T0 + DAY, window=DAY)
    assert kept.state == "drained" and kept.drains == 1
    assert [e.kind for e in kept.history] == ["drain", "repaired", "validation", "kept_drained"]


def test_hostile_or_malformed_data_is_skipped_not_fatal() -> None:
    events = [
        event(AuditEventType.ATTRIBUTION, 1, T0, {"culprit_nodes": "node1", "category": 7}),
        event(AuditEventType.ATTRIBUTION, 2, T0, {"culprit_nodes": [3, None, "node9"],
                                                  "evidence": [{"bogus": 1}, "x"]}),
        event(AuditEventType.ACTION, 3, T0, {"idempotency_key": 42}),
        event(AuditEventType.NODE_DRAINED, 0, T0, {"node": ["a"]}),
    ]  # fmt: skip
    (record,) = fold_ledger(events, now=T0, window=DAY)
    assert (
        record.node == "node9" and record.failing_jobs == [2] and record.history[0].evidence == []
    )


def test_a_drain_made_for_a_job_awaits_validation_until_a_node_workflow_takes_it() -> None:
    wf = "resurgo:c1:21:1"
    drained = [
        event(AuditEventType.ADVICE, 21, T0, {"generation": 2, "nodes": ["n"],
                                              "drain_nodes": ["n"]}),
        event(AuditEventType.ACTION, 21, T0, {"step": "drain_node", "outcome": "applied",
                                              "idempotency_key": f"{wf}:g2:drain_node",
                                              "detail": "drained n"}),
    ]  # fmt: skip
    (record,) = fold_ledger(drained, now=T0, window=DAY)
    pending = unvalidated_drain(record.history)
    assert pending is not None and pending.job_id == 21 and record.state == "drained"
    adopted = event(AuditEventType.NODE_DRAINED, 0, T0, {"node": "n", "adopted": True})
    (taken,) = fold_ledger([*drained, adopted], now=T0, window=DAY)
    assert unvalidated_drain(taken.history) is None and taken.drains == 1
    lemon = event(AuditEventType.NODE_DRAINED, 0, T0, {"node": "n"})
    (ours,) = fold_ledger([lemon], now=T0, window=DAY)
    assert unvalidated_drain(ours.history) is None  # a node workflow's own drain
