"""OpenTelemetry: one trace per recovery on the real Temporal dev server, Slurm command spans on
the real local cluster, metrics from the audit trail, and a real OTLP/HTTP export."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from resurgo.activities.audit import AuditActivities
from resurgo.activities.controller import ControllerActivities
from resurgo.audit.store import AuditStore
from resurgo.config import TelemetrySettings, TemporalSettings, load_config
from resurgo.contracts import ActionRequest, ActionStep, AuditEvent, ClusterGates, JobKey
from resurgo.slurm.errors import SchedulerUnavailable
from resurgo.slurm.runner import LocalRunner
from resurgo.slurm.ssh import SshRunner, SshTarget
from resurgo.worker import telemetry as tel
from resurgo.workflows.client import connect
from tests.integration.test_workflow import ACTION, NOW, FakeCluster, Harness

pytestmark = [pytest.mark.timeout(60)]

SPANS = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module")
def installed() -> Iterator[tel.Telemetry]:
    """The process-wide providers, with in-memory exporter and reader (installed once)."""
    if tel._installed is not None:
        pytest.skip("telemetry was already installed in this process by something else")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(tel.ENDPOINT_ENV, raising=False)
        got = tel.setup_telemetry(
            TelemetrySettings(), process="test", span_exporter=SPANS, metric_reader=READER
        )
    assert got is not None and trace.get_tracer_provider() is got.tracer_provider
    yield got
    # The providers stay for the rest of the session (they cannot be uninstalled): stop keeping
    # the spans of later tests.
    SPANS.clear()
    SPANS.shutdown()


def by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans if s.context is not None}


def ancestors(span: ReadableSpan, index: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None and span.parent.span_id in index:
        span = index[span.parent.span_id]
        names.append(span.name)
    return names


# ---- traces ----------------------------------------------------------------------------------


async def test_a_recovery_is_one_trace(
    temporal_env: WorkflowEnvironment, installed: tel.Telemetry
) -> None:
    """One trace rooted at StartWorkflow. temporalio's interceptor parents the (zero-length)
    RunWorkflow span and each StartActivity → RunActivity pair on the StartWorkflow context."""
    address = temporal_env.client.service_client.config.target_host
    client = await connect(TemporalSettings(address=address))
    harness = Harness(client, FakeCluster())
    async with harness.worker(), harness.controller():
        handle = await harness.start(ACTION)
        outcome = await handle.result()
    assert outcome.outcome == "completed"
    installed.tracer_provider.force_flush()

    mine = [
        s for s in SPANS.get_finished_spans()
        if s.attributes and s.attributes.get("temporalWorkflowID") == handle.id
    ]  # fmt: skip
    traces = {s.context.trace_id for s in mine if s.context is not None}
    assert len(traces) == 1, f"{len(traces)} traces"
    spans = [s for s in SPANS.get_finished_spans() if s.context and s.context.trace_id in traces]
    names = {s.name for s in spans}
    for activity_name in ("watch_attempt", "attribute_anomaly", "scheduler_action",
                          "verify_advice", "record_audit"):  # fmt: skip
        assert f"RunActivity:{activity_name}" in names, sorted(names)
    assert "CompleteWorkflow:JobRecoveryWorkflow" in names
    index = by_id(spans)
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["StartWorkflow:JobRecoveryWorkflow"]
    run_workflow = next(s for s in spans if s.name == "RunWorkflow:JobRecoveryWorkflow")
    assert ancestors(run_workflow, index) == ["StartWorkflow:JobRecoveryWorkflow"]
    for run in (s for s in spans if s.name.startswith("RunActivity:")):
        activity_name = run.name.split(":", 1)[1]
        chain = ancestors(run, index)
        assert chain == [f"StartActivity:{activity_name}", "StartWorkflow:JobRecoveryWorkflow"]
    # Every span of the run hangs off the StartWorkflow root.
    assert all(ancestors(s, index)[-1:] == [roots[0].name] for s in spans if s is not roots[0])


@pytest.mark.slurm
async def test_slurm_commands_are_child_spans(slurm_conf: str, installed: tel.Telemetry) -> None:
    runner = LocalRunner(slurm_conf)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("RunActivity:test") as parent:
        shown = await runner.run(["scontrol", "show", "-o", "node"])
        missing = await runner.run(["scontrol", "show", "job", "999999999"])
    assert shown.returncode == 0 and missing.returncode != 0
    before = len(SPANS.get_finished_spans())
    await runner.run(["squeue", "-h"])  # outside a trace: no span (discovery polls)
    assert len(SPANS.get_finished_spans()) == before

    ctx = parent.get_span_context()
    mine = [s for s in SPANS.get_finished_spans() if s.parent and s.parent.span_id == ctx.span_id]
    node, job = mine
    assert node.name == "slurm scontrol show" and node.context.trace_id == ctx.trace_id
    assert node.attributes is not None and job.attributes is not None
    assert node.attributes["slurm.argv"] == "scontrol show -o node"
    assert node.attributes["slurm.exit_code"] == 0
    assert node.attributes["slurm.transport"] == "local"
    assert isinstance(node.attributes["slurm.duration_s"], float)
    assert job.attributes["slurm.argv"] == "scontrol show job 999999999"
    assert job.attributes["slurm.exit_code"] == missing.returncode

    durations = points("resurgo.slurm.command.duration")
    key = frozenset({"command": "scontrol", "subcommand": "show", "transport": "local",
                     "outcome": "ok"}.items())  # fmt: skip
    assert durations[key] >= 1


async def test_failed_commands_mark_the_span_and_keep_secrets_out(
    tmp_path: Path, installed: tel.Telemetry
) -> None:
    ssh = SshRunner(
        SshTarget(host="127.0.0.1", port=1, known_hosts=str(tmp_path / "none"), connect_timeout=1),
        slurm_conf="/etc/slurm/secret-path.conf",
    )
    local = LocalRunner()
    with trace.get_tracer("test").start_as_current_span("RunActivity:test") as parent:
        with pytest.raises(SchedulerUnavailable):
            await ssh.run(["squeue", "-h", "-j", "7"])
        with pytest.raises(SchedulerUnavailable):
            await local.run(["no-such-slurm-binary", "x"])
    ctx = parent.get_span_context()
    remote, absent = [
        s for s in SPANS.get_finished_spans() if s.parent and s.parent.span_id == ctx.span_id
    ]
    assert remote.name == "slurm squeue -h" and absent.name == "slurm no-such-slurm-binary x"
    assert remote.status.status_code == absent.status.status_code == StatusCode.ERROR
    assert remote.attributes is not None
    assert remote.attributes["slurm.argv"] == "squeue -h -j 7"
    assert remote.attributes["server.address"] == "127.0.0.1"
    assert "slurm.exit_code" not in remote.attributes
    flat = " ".join(str(v) for v in remote.attributes.values())
    assert "secret-path" not in flat and "TZ=" not in flat


# ---- metrics ---------------------------------------------------------------------------------


def points(name: str) -> dict[frozenset[tuple[str, Any]], float]:
    """Cumulative counter sums / histogram counts of one metric, by attribute set."""
    data = READER.get_metrics_data()
    found: dict[frozenset[tuple[str, Any]], float] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != name:
                    continue
                for p in metric.data.data_points:
                    value = getattr(p, "value", None)
                    found[frozenset((p.attributes or {}).items())] = (
                        value if value is not None else p.count  # type: ignore[union-attr]
                    )
    return found


def histogram_sum(name: str, attrs: dict[str, str]) -> float:
    data = READER.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points if metric.name == name else []:
                    if dict(p.attributes or {}) == attrs:
                        return float(p.sum)  # type: ignore[union-attr]
    return 0.0


def audit_events(wfid: str) -> list[AuditEvent]:
    detected = NOW + timedelta(seconds=3)

    def event(type_: str, data: dict[str, Any], at_offset: float = 0.0) -> AuditEvent:
        return AuditEvent(
            event_id=f"{wfid}:{type_}", cluster="c", job_id=7, workflow_id=wfid, attempt=0,
            type=type_, producer="workflow", at=NOW + timedelta(seconds=at_offset), data=data,
        )  # fmt: skip

    stamped = f"[{NOW.isoformat()}] NCCL error: unhandled system error"
    return [
        event("anomaly", {"kind": "crash", "attempt": 0, "detected_at": detected.isoformat(),
                          "signals": [{"source": "job.log", "line_no": 9, "text": stamped}]},
              at_offset=3),
        event("attribution", {"kind": "crash", "category": "hardware_gpu"}, at_offset=4),
        event("advice", {"kind": "requeue_excluding", "category": "hardware_gpu", "attempt": 0},
              at_offset=5.5),
        event("action", {"step": "requeue_hold", "outcome": "applied"}, at_offset=6),
        event("reconciliation", {"status": "converged", "reason": "desired_state_observed"}, 7),
    ]  # fmt: skip


async def test_audit_events_are_counted(tmp_path: Path, installed: tel.Telemetry) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.create_schema()
    audit = AuditActivities(store, on_recorded=tel.AuditMetrics())
    names = ["resurgo.audit.events", "resurgo.anomalies", "resurgo.attributions",
             "resurgo.advice", "resurgo.actions", "resurgo.reconciliations",
             "resurgo.detection.latency", "resurgo.decision.latency"]  # fmt: skip
    before = {n: points(n) for n in names}
    events = audit_events("wf-metrics")
    # The anomaly arrives in its own batch first (as the workflow records it), then the rest.
    assert await audit.record_audit(events[:1]) == 1
    assert await audit.record_audit(events[1:]) == 4
    assert await audit.record_audit(events) == 0  # a retried batch: nothing new, not recounted
    after = {n: points(n) for n in names}

    def delta(name: str, **attrs: str) -> float:
        key = frozenset(attrs.items())
        return after[name].get(key, 0) - before[name].get(key, 0)

    assert delta("resurgo.audit.events", type="anomaly") == 1
    assert delta("resurgo.audit.events", type="reconciliation") == 1
    assert delta("resurgo.anomalies", kind="crash") == 1
    assert delta("resurgo.attributions", kind="crash", category="hardware_gpu") == 1
    assert delta("resurgo.advice", kind="requeue_excluding", category="hardware_gpu") == 1
    assert delta("resurgo.actions", step="requeue_hold", outcome="applied") == 1
    assert delta("resurgo.reconciliations", status="converged",
                 reason="desired_state_observed") == 1  # fmt: skip
    assert delta("resurgo.detection.latency", kind="crash") == 1
    assert delta("resurgo.decision.latency", kind="requeue_excluding",
                 category="hardware_gpu") == 1  # fmt: skip
    assert histogram_sum("resurgo.detection.latency", {"kind": "crash"}) == pytest.approx(3.0)
    assert histogram_sum(
        "resurgo.decision.latency", {"kind": "requeue_excluding", "category": "hardware_gpu"}
    ) == pytest.approx(2.5)


async def test_scheduler_steps_are_timed_by_step_and_outcome(installed: tel.Telemetry) -> None:
    """A refused step (cluster not acknowledged) is measured with its error type as outcome."""
    cluster = ControllerActivities(
        "c", LocalRunner(), ClusterGates(acknowledge_scheduler_actions=False)
    )
    req = ActionRequest(
        job=JobKey(cluster="c", job_id=7, submit_time=NOW), step=ActionStep.REQUEUE_HOLD,
        idempotency_key="k", attempt=0,
    )  # fmt: skip
    key = frozenset({"step": "requeue_hold", "outcome": "ActionsNotAllowed"}.items())
    before = points("resurgo.action.duration").get(key, 0)
    with pytest.raises(ApplicationError):
        await cluster.scheduler_action(req)
    assert points("resurgo.action.duration")[key] == before + 1


def test_line_time_needs_a_zone() -> None:
    assert tel.line_time("2026-11-29T12:00:01.5Z rank 3: CUDA error") == NOW + timedelta(
        seconds=1.5
    )
    assert tel.line_time("[2026-11-29 12:00:00+00:00] x") == NOW
    assert tel.line_time("2026-11-29 12:00:00,123 INFO no zone") is None
    assert tel.line_time("iteration 5 loss 0.1") is None


# ---- configuration and OTLP/HTTP export ------------------------------------------------------


def test_off_by_default_and_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tel.ENDPOINT_ENV, raising=False)
    assert load_config(None).telemetry.otlp_endpoint is None
    assert tel.otlp_endpoint(TelemetrySettings()) is None
    file = tmp_path / "resurgo.toml"
    file.write_text('[telemetry]\notlp_endpoint = "http://collector:4318"\nservice_name = "r2"\n')
    cfg = load_config(file)
    assert tel.otlp_endpoint(cfg.telemetry) == "http://collector:4318"
    assert cfg.telemetry.service_name == "r2"
    monkeypatch.setenv(tel.ENDPOINT_ENV, "http://from-env:4318")
    assert tel.otlp_endpoint(TelemetrySettings()) == "http://from-env:4318"
    assert tel.otlp_endpoint(cfg.telemetry) == "http://collector:4318"


class Collector(ThreadingHTTPServer):
    """Records OTLP POSTs on loopback; at most MAX requests of MAX_BODY bytes each."""

    MAX = 50
    MAX_BODY = 4 << 20

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, bytes]] = []
        self.got = threading.Condition()
        super().__init__(("127.0.0.1", 0), CollectorHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class CollectorHandler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > Collector.MAX_BODY or len(self.server.posts) >= Collector.MAX:
            self.send_response(413)
            self.end_headers()
            return
        body = self.rfile.read(length)
        with self.server.got:
            self.server.posts.append((self.path, self.headers.get("Content-Type", ""), body))
            self.server.got.notify_all()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def otlp() -> None:
    pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.http",
        reason=f"{tel.EXPORTER_REQUIREMENT} is not installed",
    )


@pytest.mark.parametrize("via", ["config", "env"])
def test_otlp_http_export(
    collector: Collector, otlp: None, via: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    if via == "env":
        monkeypatch.setenv(tel.ENDPOINT_ENV, collector.url)
        settings = TelemetrySettings(service_name="resurgo-otlp-test")
    else:
        monkeypatch.delenv(tel.ENDPOINT_ENV, raising=False)
        settings = TelemetrySettings(
            otlp_endpoint=collector.url + "/", service_name="resurgo-otlp-test"
        )
    built = tel.build_telemetry(settings, process="otlp-test")
    try:
        with built.tracer_provider.get_tracer("test").start_as_current_span("slurm squeue -h"):
            pass
        built.meter_provider.get_meter("test").create_counter("resurgo.test.exported").add(2)
        built.flush()
    finally:
        built.shutdown()
    paths = {path for path, _, _ in collector.posts}
    assert {"/v1/traces", "/v1/metrics"} <= paths, paths
    assert all(ct == "application/x-protobuf" for _, ct, _ in collector.posts)

    traces = ExportTraceServiceRequest()
    traces.ParseFromString(next(b for p, _, b in collector.posts if p == "/v1/traces"))
    resource = {a.key: a.value.string_value for a in traces.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "resurgo-otlp-test"
    assert resource["resurgo.process"] == "otlp-test"
    assert traces.resource_spans[0].scope_spans[0].spans[0].name == "slurm squeue -h"

    sent = ExportMetricsServiceRequest()
    for path, _, body in collector.posts:
        if path == "/v1/metrics":
            sent.MergeFromString(body)
    names = {m.name for rm in sent.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "resurgo.test.exported" in names
