"""Recovery metrics read from a real audit store (SQLite) and scraped in Prometheus' text
format: names, units and values a dashboard plots, kept current incrementally."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from resurgo.audit.store import AuditStore
from resurgo.contracts import AuditEvent
from resurgo.metrics.digest import AuditDigest, percentile
from resurgo.metrics.exporter import recovery_registry

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def story(job: int, offset: int = 0, *, approve: bool = True) -> list[AuditEvent]:
    """A job that crashes on node2, is held, excluded, released and runs again 90 s later."""
    wid = f"resurgo:c1:{job}:1700000000"
    seq = [
        (0, "monitoring_started", None, {"user": "alice"}),
        (1, "attempt_started", 0, {"nodes": ["node1", "node2"], "excluded": []}),
        (10, "anomaly", 0, {"kind": "crash"}),
        (11, "attribution", 0, {"category": "hardware_gpu", "culprit_nodes": ["node2"]}),
        (12, "advice", 0, {"kind": "requeue_excluding", "nodes": ["node2"]}),
        (12, "approval_requested", 0, {"generation": 1}),
    ]
    if approve:
        seq += [
            (20, "approval_approved", 0, {"generation": 1, "actor": "otto"}),
            (30, "action", 0, {"step": "requeue_hold", "outcome": "applied"}),
            (31, "action", 0, {"step": "exclude_nodes", "outcome": "applied"}),
            (32, "action", 0, {"step": "release", "outcome": "applied"}),
            (100, "attempt_started", 1, {"nodes": ["node3", "node4"], "excluded": ["node2"]}),
        ]
    return [
        AuditEvent(
            event_id=f"{job}-{i}",
            cluster="c1",
            job_id=job,
            workflow_id=wid,
            attempt=attempt,
            type=kind,
            producer="test",
            at=T0 + timedelta(seconds=offset + s),
            data=data,
        )
        for i, (s, kind, attempt, data) in enumerate(seq)
    ]


def scrape(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_scraped_metrics_follow_the_audit_trail(tmp_path: Path) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.append(story(1) + story(2, 1000, approve=False))
    registry, _ = recovery_registry(store)
    got = scrape(registry)
    assert got[("resurgo_audit_store_up", ())] == 1
    assert got[("resurgo_jobs_watched", ())] == 2
    assert got[("resurgo_pending_approvals", ())] == 1  # job 2 still waits
    assert got[("resurgo_holds_outstanding", ())] == 0  # job 1 was released
    assert got[("resurgo_anomalies_total", (("category", "hardware_gpu"),))] == 2
    assert got[("resurgo_actions_total", (("type", "requeue_hold"),))] == 1
    assert got[("resurgo_actions_total", (("type", "release"),))] == 1
    # detection (t=10) -> first action (t=30): 20 s; failure -> next attempt running: 90 s
    assert got[("resurgo_detection_latency_seconds_sum", ())] == 20
    assert got[("resurgo_detection_latency_seconds_bucket", (("le", "15.0"),))] == 0
    assert got[("resurgo_detection_latency_seconds_bucket", (("le", "30.0"),))] == 1
    assert got[("resurgo_recovery_latency_seconds_sum", ())] == 90
    assert got[("resurgo_recovery_latency_seconds_count", ())] == 1
    store.close()


def test_new_events_are_read_incrementally_and_a_hold_stays_outstanding(tmp_path: Path) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.append(story(1))
    registry, _ = recovery_registry(store)
    reader = next(c for c in registry._collector_to_names if hasattr(c, "reader")).reader
    reader.max_age = 0
    assert scrape(registry)[("resurgo_actions_total", (("type", "release"),))] == 1
    held = [
        *story(3, 5000)[:6],
        AuditEvent(
            event_id="3-hold",
            cluster="c1",
            job_id=3,
            workflow_id="resurgo:c1:3:1700000000",
            attempt=0,
            type="action",
            producer="test",
            at=T0 + timedelta(seconds=5040),
            data={"step": "requeue_hold", "outcome": "applied"},
        ),
    ]
    store.append(held)
    before = reader._digest.events
    got = scrape(registry)
    assert reader._digest.events == before + len(held)  # only the new events were folded
    assert got[("resurgo_holds_outstanding", ())] == 1
    assert got[("resurgo_actions_total", (("type", "requeue_hold"),))] == 2
    store.close()


def test_nodes_and_stops_are_remembered_per_job() -> None:
    d = AuditDigest()
    d.feed(story(1) + story(2, 1000))
    node2 = d.nodes["node2"]
    assert node2.implicated == 2 and node2.implicated_jobs == {"c1/1", "c1/2"}
    assert node2.excluded_jobs == {"c1/1", "c1/2"}
    assert "node3" not in d.nodes
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0 and percentile([], 0.95) is None


def exported_families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


def test_the_grafana_dashboard_plots_only_metrics_that_are_exported(tmp_path: Path) -> None:
    import json
    import re

    from resurgo.api.app import Metrics

    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.append(story(1))
    registry, process = recovery_registry(store)
    process.slurm_command_failed("scontrol")
    process.source_failed("loki")
    process.breaker_checked("c1", None)
    api = Metrics()
    api.requests.labels("GET", "/v1/jobs", "200").inc()
    api.latency.labels("GET", "/v1/jobs").observe(0.01)
    exported = exported_families(generate_latest(registry).decode())
    exported |= exported_families(generate_latest(api.registry).decode())
    dashboard = json.loads((REPO / "infra/grafana/resurgo-dashboard.json").read_text())
    used = {
        re.sub(r"_(bucket|total|sum|count)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"resurgo_[a-z_]+", target["expr"])
    }
    assert len(used) >= 12
    assert used <= exported, used - exported
    store.close()


def test_a_process_serves_metrics_on_the_configured_port(tmp_path: Path) -> None:
    import urllib.request

    from resurgo.api.server import free_port
    from resurgo.metrics.exporter import start_process_metrics

    assert start_process_metrics("worker", None, {}) is None  # off unless asked for
    assert start_process_metrics("worker", None, {}, port=0) is None
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.append(story(1))
    port = free_port()
    env = {"RESURGO_METRICS_PORT": str(port), "RESURGO_METRICS_HOST": "127.0.0.1"}
    # The per-process variable wins over the configured port (here one that is not free).
    process = start_process_metrics("controller/c1", store, env, port=1)
    assert process is not None
    before = process.slurm_command_errors("squeue")
    process.slurm_command_failed("squeue")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert 'resurgo_process{process="controller/c1"} 1.0' in text
    assert f'resurgo_slurm_command_errors_total{{command="squeue"}} {before + 1:.1f}' in text
    assert "resurgo_jobs_watched 1.0" in text
    # The configured port, when no variable is set.
    other = free_port()
    assert start_process_metrics("worker", None, {}, port=other, host="127.0.0.1") is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{other}/metrics", timeout=5) as resp:
        assert 'resurgo_process{process="worker"} 1.0' in resp.read().decode()
    store.close()


def test_a_bad_metrics_port_is_refused_before_anything_starts() -> None:
    import pytest

    from resurgo.metrics.exporter import start_process_metrics

    for bad in ("http", "-1", "70000"):
        with pytest.raises(ValueError, match="RESURGO_METRICS_PORT"):
            start_process_metrics("worker", None, {"RESURGO_METRICS_PORT": bad})


def ended(job: int, offset: int, outcome: str = "completed") -> AuditEvent:
    return AuditEvent(
        event_id=f"{job}-end",
        cluster="c1",
        job_id=job,
        workflow_id=f"resurgo:c1:{job}:1700000000",
        attempt=None,
        type="monitoring_ended",
        producer="test",
        at=T0 + timedelta(seconds=offset),
        data={"outcome": outcome},
    )


def test_ended_jobs_are_folded_into_counts_and_their_records_dropped() -> None:
    d = AuditDigest(keep_finished=50)
    for job in range(1, 401):
        d.feed([*story(job, job * 200), ended(job, job * 200 + 150)])
    # The counts are all there ...
    assert (d.jobs_started, d.jobs_ended, d.jobs_watched) == (400, 400, 0)
    assert d.outcomes["completed"] == 400 and d.anomalies["hardware_gpu"] == 400
    assert len(d.detection_to_action) == 400 and d.detection_to_action.cumulative()[-1][1] == 400
    assert d.holds_outstanding == 0  # every hold was released
    # ... and the per-job records are not: the 50 latest ended jobs' lines, newest first.
    assert d.jobs_kept == 50
    assert [s.job_id for s in d.job_summaries(1000)] == list(range(400, 350, -1))
    assert d.job_summaries(1)[0].outcome == "completed"


def test_a_hold_left_open_at_the_end_counts_until_released() -> None:
    d = AuditDigest(keep_finished=1)
    held = story(1)[:-2]  # held and excluded, never released
    d.feed([*held, ended(1, 40, "stopped")])
    d.feed([*story(2, 1000), ended(2, 1150)])  # pushes job 1's line out of the kept ones
    assert d.holds_outstanding == 1 and d.jobs_watched == 0
    release = story(1)[-2].model_copy(update={"at": T0 + timedelta(seconds=5000)})
    d.feed([release])  # the watchdog's late release, after the end
    assert d.holds_outstanding == 0 and d.jobs_watched == 0 and d.actions["release"] == 2


def test_memory_does_not_grow_with_jobs_that_ended() -> None:
    import gc
    import tracemalloc

    def clean(job: int) -> list[AuditEvent]:  # started, ran, completed: the common case
        return [*story(job, job * 10, approve=False)[:2], ended(job, job * 10 + 5)]

    d = AuditDigest(keep_finished=200)
    for job in range(1, 1001):
        d.feed(clean(job))
    gc.collect()
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for job in range(1001, 9001):  # eight times as many more
            d.feed(clean(job))
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert d.jobs_ended == 9000 and d.jobs_kept == 200
    # Before: every job's record kept for ever (MBs here); now a few day counters at most.
    assert end - start < 256 * 1024, end - start
