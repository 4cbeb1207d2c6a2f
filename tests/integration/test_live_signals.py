"""The configured signal sources in the live system: the watch and attribution use them.

- Loki and VictoriaLogs cannot run here: a real local HTTP server answers in their documented
  formats (tests/fixture_http.py), with entries stamped around the test's own clock so they
  "arrive" while the watch runs. The watch tails a real output file alongside.
- Prometheus is the real thing (Debian's package scraping the fake DCGM exporter).
- Slurm is played by a fixed observation: the job's state is not what is tested here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from infra.prometheus.harness import PrometheusStack, free_port
from resurgo.activities.controller import ControllerActivities
from resurgo.contracts import (
    Anomaly,
    AnomalyKind,
    AttributeRequest,
    Attribution,
    Category,
    ClusterGates,
    JobKey,
    JobObservation,
    LogLine,
    NodeObservation,
    WatchRequest,
    WatchResult,
)
from resurgo.detect.registry import Registry
from resurgo.detect.remote_tail import RemoteLogs, remote_logs
from resurgo.detect.watch_loop import WatchCheckpoint, watch_attempt
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.runner import LocalRunner
from resurgo.sources import (
    LabelMapping,
    PrometheusSource,
    SignalsSettings,
    TimeCursor,
    load_cursor,
)
from resurgo.sources.base import datetime_to_ns, format_rfc3339_ns
from resurgo.sources.prometheus import XID_METRIC
from tests.fixture_http import ReplayServer, Route
from tests.integration.test_workflow import ACTION, FakeCluster, Harness

JOB = 4242
SUBMIT = datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
KEY = JobKey(cluster="c", job_id=JOB, submit_time=SUBMIT)
MAPPING = LabelMapping(job_id="slurm_job_id", host="hostname")
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, name=python, GPU has fallen off the bus."
NFS_LINE = "nfs: server fileserver01 not responding, still trying"
ECC_LINE = "1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
Entry = tuple[int, str, str]  # (ns, host, line)


# ---------------------------------------------------------------------- documented formats
def loki_body(entries: list[Entry]) -> bytes:
    """`GET /loki/api/v1/query_range`: one stream per host, values `["<ns>", "<line>"]`."""
    streams: dict[str, list[list[str]]] = {}
    for ns, host, line in entries:
        streams.setdefault(host, []).append([str(ns), line])
    result = [
        {"stream": {"slurm_job_id": str(JOB), "hostname": host, "stream": "stdout"},
         "values": values}
        for host, values in streams.items()
    ]  # fmt: skip
    data = {"resultType": "streams", "result": result, "stats": {}}
    return json.dumps({"status": "success", "data": data}).encode()


def vl_body(entries: list[Entry]) -> bytes:
    """`GET /select/logsql/query`: JSON lines with `_msg`, `_time`, `_stream` and fields."""
    rows = [
        {"_msg": line, "_time": format_rfc3339_ns(ns),
         "_stream": f'{{hostname="{host}",slurm_job_id="{JOB}"}}',
         "_stream_id": f"{ns:032x}", "hostname": host, "slurm_job_id": str(JOB)}
        for ns, host, line in entries
    ]  # fmt: skip
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


@dataclasses.dataclass(frozen=True)
class Backend:
    scheme: str
    path: str
    body: Callable[[list[Entry]], bytes]
    content_type: str

    def route(self, entries: list[Entry]) -> Route:
        # The job's selector must be in the query the backend receives.
        return Route(self.path, self.body(entries), content_type=self.content_type,
                     contains={"query": f'"{JOB}"'})  # fmt: skip

    def outage(self) -> Route:
        return Route(self.path, b"upstream connect error", status=503, content_type="text/plain")

    def settings(self, url: str, **extra: Any) -> SignalsSettings:
        return SignalsSettings(logs=f"{self.scheme}://{url.split('://', 1)[1]}", labels=MAPPING,
                               timeout=2, retries=0, **extra)  # fmt: skip


LOKI = Backend("loki+http", "/loki/api/v1/query_range", loki_body, "application/json")
VLOGS = Backend("victorialogs+http", "/select/logsql/query", vl_body, "application/stream+json")
BACKENDS = [pytest.param(LOKI, id="loki"), pytest.param(VLOGS, id="victorialogs")]


def remote_for(backend: Backend, server: ReplayServer) -> RemoteLogs:
    """The source exactly as a controller builds it from its config, polled fast for tests."""
    remote = remote_logs(backend.settings(server.url))
    assert remote is not None
    return dataclasses.replace(remote, poll_seconds=0.2, retry_seconds=0.3)


def at(seconds: float) -> int:
    """A timestamp `seconds` from now, in ns (the backends only hand out the past)."""
    return datetime_to_ns(datetime.now(UTC) + timedelta(seconds=seconds))


# ---------------------------------------------------------------------- the job
class Jobs:
    """Slurm as the watch sees it: the job running on node1 and node2."""

    def __init__(self, out: Path) -> None:
        self.obs = JobObservation(
            job_id=JOB, state="RUNNING", node_list=["node1", "node2"], std_out=str(out),
            user="root", submit_time=SUBMIT,
            start_time=datetime.now(UTC) - timedelta(seconds=30),
        )  # fmt: skip

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation | None:
        return self.obs


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / f"slurm-{JOB}.out"
    path.write_text("".join(f"0: iteration {n} | elapsed time per iteration (ms): 410.0\n"
                            for n in range(1, 6)))  # fmt: skip
    return path


def request(**update: Any) -> WatchRequest:
    fields: dict[str, Any] = {"poll_seconds": 0.05, "slurm_poll_seconds": 0.05,
                              "max_window_seconds": 20, **update}  # fmt: skip
    return WatchRequest(job=KEY, attempt=0, seen_started=True, seen_progress=True, **fields)


class Beats(list[WatchCheckpoint]):
    def __call__(self, checkpoint: WatchCheckpoint) -> None:
        # What Temporal keeps: the checkpoint as JSON, validated again on the retry.
        self.append(WatchCheckpoint.model_validate(checkpoint.model_dump(mode="json")))

    def signals(self) -> list[LogLine]:
        return self[-1].state.signals if self else []


async def until(check: Callable[[], object], timeout: float = 15.0) -> None:
    """Wait for `check()` (a value or an awaitable) to be truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def watch(
    req: WatchRequest, out: Path, beats: Beats, remote: RemoteLogs, resume: WatchCheckpoint | None
) -> asyncio.Task[WatchResult]:
    coro = watch_attempt(req, Jobs(out), LocalRunner(), Registry.default(), beats, resume,
                         remote=remote)  # fmt: skip
    return asyncio.create_task(asyncio.wait_for(coro, 30))


# ---------------------------------------------------------------------- the watch
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_crash_only_the_log_backend_has_is_detected(
    backend: Backend, replay: Any, out: Path
) -> None:
    """A node's kernel log (shipped to Loki, never in the job's output file) says its GPU fell
    off the bus: the watch reports the crash, naming the line and the node it came from."""
    copy = "0: iteration 5 | elapsed time per iteration (ms): 410.0"  # also in the file
    server = replay([backend.route([(at(0.3), "node1", copy), (at(0.5), "node2", XID_LINE)])])
    beats = Beats()
    result = await watch(request(), out, beats, remote_for(backend, server), None)
    assert result.outcome == "anomaly" and result.anomaly is not None
    assert result.anomaly.kind == AnomalyKind.CRASH
    assert result.anomaly.pattern_ids == ["xid_fallen_off_bus"]
    kind = "loki" if backend is LOKI else "victorialogs"
    assert [(s.source, s.text) for s in result.anomaly.signals] == [(f"{kind}:node2", XID_LINE)]
    assert XID_LINE not in out.read_text()
    cursor = load_cursor(result.source_cursor or "")
    assert isinstance(cursor, TimeCursor) and cursor.kind == kind
    assert all(f'"{JOB}"' in q["query"] for q in server.calls(backend.path))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_backend_outage_does_not_cost_the_file_detection(
    backend: Backend, replay: Any, out: Path
) -> None:
    server = replay([backend.route([(at(0.2), "node1", NFS_LINE)])])
    beats = Beats()
    task = watch(request(), out, beats, remote_for(backend, server), None)
    await until(lambda: any(s.text == NFS_LINE for s in beats.signals()))
    cursor = beats[-1].source_cursor
    server.routes[:] = [backend.outage()]
    calls = len(server.calls(backend.path))
    await until(lambda: len(server.calls(backend.path)) >= calls + 3)  # retried, still down
    count = len(beats)
    await until(lambda: len(beats) >= count + 10)  # and the watch kept heartbeating meanwhile
    assert not task.done()
    with out.open("a") as f:
        f.write(ECC_LINE + "\n")
    result = await task
    assert result.outcome == "anomaly" and result.anomaly is not None
    assert result.anomaly.pattern_ids == ["nfs_not_responding", "cuda_ecc_uncorrectable"]
    assert [s.source for s in result.anomaly.signals] == [
        f"{'loki' if backend is LOKI else 'victorialogs'}:node1",
        "job.log",
    ]
    assert result.source_cursor == cursor  # what the backend holds is read after the outage


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_retried_watch_resumes_the_backend_without_repeating_lines(
    backend: Backend, replay: Any, out: Path
) -> None:
    nfs = (at(0.2), "node1", NFS_LINE)
    server = replay([backend.route([nfs])])
    beats = Beats()
    first = watch(request(), out, beats, remote_for(backend, server), None)
    await until(lambda: any(s.text == NFS_LINE for s in beats.signals()))
    first.cancel()  # the controller died; Temporal retries from the last heartbeat
    with pytest.raises(asyncio.CancelledError):
        await first
    server.routes[:] = [backend.route([nfs, (at(0.3), "node2", XID_LINE)])]
    retried = await watch(request(), out, Beats(), remote_for(backend, server), beats[-1])
    assert retried.anomaly is not None
    assert [s.text for s in retried.anomaly.signals] == [NFS_LINE, XID_LINE]

    # The workflow passes the cursor on to the next watch: the reported line is not re-read.
    req = request(source_cursor=retried.source_cursor, max_window_seconds=1.5)
    after = await watch(req, out, Beats(), remote_for(backend, server), None)
    assert after.outcome == "window_elapsed"
    moved, reported = (load_cursor(c or "") for c in (after.source_cursor, retried.source_cursor))
    assert isinstance(moved, TimeCursor) and isinstance(reported, TimeCursor)
    assert moved.ns >= reported.ns


class CursorCluster(FakeCluster):
    """The fake controller, handing out a new source cursor with every watch result."""

    def __init__(self) -> None:
        super().__init__(crashes=0)
        self.cursors: list[str | None] = []

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        self.cursors.append(req.source_cursor)
        result = await super().watch_attempt(req)
        cursor = TimeCursor(kind="loki", ns=len(self.cursors)).model_dump_json()
        return result.model_copy(update={"source_cursor": cursor})


async def test_the_workflow_passes_the_source_cursor_on(temporal_env: WorkflowEnvironment) -> None:
    cluster = CursorCluster()
    harness = Harness(temporal_env.client, cluster)
    async with harness.worker(), harness.controller():
        outcome = await (await harness.start(ACTION)).result()
    assert outcome.outcome == "completed"
    seen = [TimeCursor.model_validate_json(c).ns if c else None for c in cluster.cursors]
    assert seen == [None, 1, 2]  # each watch got the cursor the previous one returned


# ---------------------------------------------------------------------- attribution
JOB_LOG = [
    *(f"{r}: [rank{r}]: iteration {n} | elapsed time per iteration (ms): 410.{r}"
      for n in range(1, 12) for r in (0, 1)),
    "1: [rank1]: RuntimeError: CUDA error: an unknown error occurred",
    "srun: error: node2: task 1: Exited with exit code 1",
    "srun: launch/slurm: _step_signal: Terminating StepId=4242.0",
    "srun: error: node1: task 0: Terminated",
]  # fmt: skip


class FailedJob(SlurmClient):
    """Slurm's answer for the failed job (attribution asks for it and its nodes)."""

    def __init__(self, out: Path) -> None:
        super().__init__(LocalRunner())
        now = datetime.now(UTC)
        self.obs = JobObservation(
            job_id=JOB, state="FAILED", exit_code=1, node_list=["node1", "node2"],
            std_out=str(out), user="root", submit_time=SUBMIT,
            start_time=now - timedelta(seconds=60),
            end_time=now,
        )  # fmt: skip

    async def show_job(self, job_id: int, *, at_least_restarts: int = 0) -> JobObservation | None:
        return self.obs

    async def show_nodes(self, names: list[str] | None = None) -> list[NodeObservation]:
        return [NodeObservation(name=n, state="IDLE") for n in names or []]


async def attribute(out: Path, signals: SignalsSettings | None) -> Attribution:
    cluster = ControllerActivities("c", LocalRunner(), ClusterGates(), signals=signals)
    cluster.slurm = FailedJob(out)
    anomaly = Anomaly(
        kind=AnomalyKind.CRASH, attempt=0, detected_at=datetime.now(UTC), job_state="FAILED",
        summary="job FAILED with exit code 1:0", nodes=["node1", "node2"], exit_code=1,
    )  # fmt: skip
    req = AttributeRequest(job=KEY, anomaly=anomaly, log_path=str(out),
                           node_list=["node1", "node2"], settle_seconds=0)  # fmt: skip
    try:
        return await ActivityEnvironment().run(cluster.attribute_anomaly, req)
    finally:
        await cluster.aclose()


async def test_a_stopping_controller_closes_its_sources() -> None:
    signals = SignalsSettings(logs="loki+http://127.0.0.1:9", prometheus="http://127.0.0.1:9")
    cluster = ControllerActivities("c", LocalRunner(), ClusterGates(), signals=signals)
    assert cluster.remote_logs is not None and cluster.prometheus is not None
    await cluster.aclose()
    assert cluster.prometheus.api._client.is_closed
    assert cluster.remote_logs.source.api._client.is_closed  # type: ignore[attr-defined]


@pytest.fixture
def failed(tmp_path: Path) -> Path:
    path = tmp_path / f"slurm-{JOB}.out"
    path.write_text("\n".join(JOB_LOG) + "\n")
    return path


@pytest.fixture
def xid_on_node2_gpu1(prom_stack: PrometheusStack) -> Iterator[PrometheusStack]:
    prom_stack.exporter.set(metric=XID_METRIC, host="node2", gpu="1", value=79)
    try:
        yield prom_stack
    finally:
        prom_stack.exporter.set(metric=XID_METRIC, host="node2", gpu="1", value=0)


async def test_an_xid_in_prometheus_names_the_node_the_log_cannot(
    failed: Path, xid_on_node2_gpu1: PrometheusStack
) -> None:
    alone = await attribute(failed, None)
    assert alone.category == Category.UNKNOWN and alone.confidence <= 0.6

    url = xid_on_node2_gpu1.url
    prom = PrometheusSource(url)
    try:
        await until(lambda: prom.xid_events(timedelta(minutes=2), ["node2"]), timeout=20)
    finally:
        await prom.aclose()
    verdict = await attribute(failed, SignalsSettings(prometheus=url))
    assert verdict.category == Category.HARDWARE_GPU
    assert verdict.culprit_nodes == ["node2"] and verdict.culprit_gpus == ["node2:gpu1"]
    assert verdict.confidence == 0.95 > alone.confidence
    assert verdict.summary.startswith("Xid 79 on node2")
    sample = next(e for e in verdict.evidence if e.source == "prometheus")
    assert sample.text.startswith('DCGM_FI_DEV_XID_ERRORS{Hostname="node2",gpu="1"')


async def test_an_unreachable_prometheus_leaves_the_log_verdict_and_says_so(
    failed: Path,
) -> None:
    dead = SignalsSettings(prometheus=f"http://127.0.0.1:{free_port()}", retries=0, timeout=1)
    verdict = await attribute(failed, dead)
    assert verdict.category == Category.UNKNOWN
    assert "GPU metrics unavailable, attributed from logs alone" in verdict.summary
    assert "cannot connect" in verdict.summary


@pytest.mark.parametrize("backend", BACKENDS)
async def test_attribution_places_a_backend_only_line_on_its_node(
    backend: Backend, replay: Any, failed: Path
) -> None:
    server = replay([backend.route([(at(-5), "node2", XID_LINE)])])
    verdict = await attribute(failed, backend.settings(server.url))
    assert verdict.category == Category.HARDWARE_GPU and verdict.culprit_nodes == ["node2"]
    kind = "loki" if backend is LOKI else "victorialogs"
    assert any(e.source == f"{kind}:node2" and e.text == f"node2: {XID_LINE}"
               for e in verdict.evidence)  # fmt: skip
