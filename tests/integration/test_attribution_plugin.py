"""The external attribution plugin against a real local HTTP server (threaded).

Good, slow, failing, flaky and malformed plugins: a good answer enriches our verdict (adds
culprits, never removes ours); anything else returns our verdict within the configured bound,
with a note.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from resurgo.attribute.plugin import (
    PluginConfig,
    PluginRequest,
    enrich,
    request_for,
)
from resurgo.contracts import AnomalyKind, Attribution, Category, JobObservation, LogLine

Handler = Callable[[dict[str, Any], int], tuple[int, bytes, float]]
"""(request body, call number) → (status, response body, delay seconds)."""


class Plugin:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[dict[str, Any]] = []
        plugin = self

        class _H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                plugin.calls.append(body)
                status, payload, delay = plugin.handler(body, len(plugin.calls))
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): expected for the slow plugin

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/attribute"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Plugin]]:
    started: list[Plugin] = []

    def start(handler: Handler) -> Plugin:
        plugin = Plugin(handler)
        started.append(plugin)
        return plugin

    yield start
    for plugin in started:
        plugin.close()


OURS = Attribution(
    kind=AnomalyKind.CRASH,
    category=Category.UNKNOWN,
    culprit_nodes=["node2"],
    culprit_ranks=[1],
    confidence=0.6,
    fingerprint="unknown:abc",
    summary="task 1 on node2 died first: Killed",
    evidence=[LogLine(source="job.log", line_no=3, text="srun: error: node2: task 1: Killed")],
)
LINES = [
    LogLine(source="job.log", line_no=n, text=t)
    for n, t in enumerate(["0: step 1", "0: step 2", "srun: error: node2: task 1: Killed"], 1)
]
OBS = JobObservation(job_id=42, state="FAILED", node_list=["node1", "node2", "node3"])


def request() -> PluginRequest:
    return request_for(OURS, job_lines=LINES, observation=OBS, cluster="local", attempt=0)


def answer(**body: object) -> Handler:
    return lambda _req, _n: (200, json.dumps(body).encode(), 0.0)


async def test_good_answer_enriches_and_never_removes(serve: Callable[[Handler], Plugin]) -> None:
    plugin = serve(answer(
        category="hardware_gpu", culprit_nodes=["node3", "node9"], culprit_ranks=[2],
        confidence=0.85, summary="Xid 79 on node3 GPU 1",
        evidence=[{"source": "bmc", "line_no": 1, "text": "GPU 1 lost"}],
    ))  # fmt: skip
    got = await enrich(OURS, request(), PluginConfig(url=plugin.url))
    assert got.source == "plugin"
    assert got.culprit_nodes == ["node2", "node3"]  # ours kept, node9 is not in the job
    assert got.culprit_ranks == [1, 2]
    assert got.category == Category.HARDWARE_GPU and got.confidence == 0.85  # ours was unknown
    assert got.fingerprint == OURS.fingerprint
    assert "Xid 79 on node3" in got.summary and got.evidence[-1].source == "bmc"
    sent = plugin.calls[0]
    assert sent["schema_version"] == 1 and sent["job"]["job_id"] == 42
    assert sent["verdict"]["culprit_nodes"] == ["node2"]
    assert [ln["line_no"] for ln in sent["lines"]] == [1, 2, 3]
    assert PluginRequest.model_validate(sent).verdict == OURS


async def test_a_known_category_is_not_overridden(serve: Callable[[Handler], Plugin]) -> None:
    ours = OURS.model_copy(update={"category": Category.HARDWARE_HOST})
    plugin = serve(answer(category="application", culprit_nodes=[]))
    got = await enrich(ours, request(), PluginConfig(url=plugin.url))
    assert got.category == Category.HARDWARE_HOST and got.culprit_nodes == ["node2"]


async def test_slow_plugin_is_bounded(serve: Callable[[Handler], Plugin]) -> None:
    plugin = serve(lambda _r, _n: (200, b"{}", 2.0))
    config = PluginConfig(url=plugin.url, timeout_seconds=0.3, retries=1, backoff_seconds=0.05)
    start = time.monotonic()
    got = await enrich(OURS, request(), config)
    elapsed = time.monotonic() - start
    assert elapsed < 1.5, elapsed
    assert got.culprit_nodes == OURS.culprit_nodes and got.source == "rules"
    assert "plugin unavailable: timed out" in got.summary
    assert len(plugin.calls) == 2  # one retry


async def test_overall_deadline_caps_retries(serve: Callable[[Handler], Plugin]) -> None:
    plugin = serve(lambda _r, _n: (200, b"{}", 2.0))
    config = PluginConfig(url=plugin.url, timeout_seconds=1.0, retries=5, deadline_seconds=0.5)
    start = time.monotonic()
    got = await enrich(OURS, request(), config)
    assert time.monotonic() - start < 1.2
    assert "no answer within 0.5s" in got.summary


async def test_failing_plugin_is_retried_then_given_up(serve: Callable[[Handler], Plugin]) -> None:
    plugin = serve(lambda _r, _n: (503, b"overloaded", 0.0))
    config = PluginConfig(url=plugin.url, retries=2, backoff_seconds=0.01)
    got = await enrich(OURS, request(), config)
    assert "plugin unavailable: HTTP 503" in got.summary and got.source == "rules"
    assert len(plugin.calls) == 3


async def test_retries_back_off_exponentially_with_jitter(
    serve: Callable[[Handler], Plugin],
) -> None:
    """Each wait is at least the backoff doubled per retry, plus a random share of it (jitter):
    many attributions failing at once do not hit a struggling plugin in step."""
    seen: list[float] = []

    def handler(_r: dict[str, Any], _n: int) -> tuple[int, bytes, float]:
        seen.append(time.monotonic())
        return 503, b"", 0.0

    plugin = serve(handler)
    config = PluginConfig(url=plugin.url, retries=2, backoff_seconds=0.15, deadline_seconds=5)
    got = await enrich(OURS, request(), config)
    assert "HTTP 503" in got.summary and len(plugin.calls) == 3
    first, second = seen[1] - seen[0], seen[2] - seen[1]
    assert 0.15 <= first < 0.15 + 0.15 + 0.1, first  # backoff + up to one backoff of jitter
    assert 0.3 <= second < 0.3 + 0.15 + 0.1, second


async def test_flaky_plugin_succeeds_on_retry(serve: Callable[[Handler], Plugin]) -> None:
    good = json.dumps({"culprit_nodes": ["node1"]}).encode()
    plugin = serve(lambda _r, n: (500, b"", 0.0) if n == 1 else (200, good, 0.0))
    got = await enrich(OURS, request(), PluginConfig(url=plugin.url, backoff_seconds=0.01))
    assert got.culprit_nodes == ["node1", "node2"] and got.source == "plugin"


@pytest.mark.parametrize(
    "payload",
    [b"not json", b'{"culprit_nodes": "node3"}', b'{"confidence": 7}', b'{"category": "cosmic"}'],
)
async def test_malformed_answers_are_ignored(
    serve: Callable[[Handler], Plugin], payload: bytes
) -> None:
    plugin = serve(lambda _r, _n: (200, payload, 0.0))
    got = await enrich(OURS, request(), PluginConfig(url=plugin.url))
    assert got.culprit_nodes == OURS.culprit_nodes and got.category == OURS.category
    assert "plugin unavailable: malformed answer" in got.summary
    assert len(plugin.calls) == 1  # a malformed answer is not retried


async def test_client_errors_and_unreachable_plugins() -> None:
    config = PluginConfig(url="http://127.0.0.1:9/nothing", retries=1, backoff_seconds=0.01)
    got = await enrich(OURS, request(), config)
    assert "plugin unavailable: ConnectError" in got.summary
    assert await enrich(OURS, request(), None) == OURS


def test_cli_consults_the_plugin(serve: Callable[[Handler], Plugin], tmp_path: Path) -> None:
    from resurgo.cli.main import app

    (tmp_path / "job.log").write_text(
        "0: step 1\nsrun: error: node2: task 1: Killed\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=9.0\n"
    )
    plugin = serve(answer(category="hardware_host", culprit_nodes=["node2"]))
    result = CliRunner().invoke(
        app, ["attribute", str(tmp_path), "--json", "--plugin-url", plugin.url]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["category"] == "hardware_host" and data["culprit_nodes"] == ["node2"]
    assert data["action"] == "requeue_excluding_nodes"
    assert plugin.calls and plugin.calls[0]["verdict"]["category"] == "unknown"


async def test_live_hook_is_a_no_op_without_configuration(
    serve: Callable[[Handler], Plugin], monkeypatch: pytest.MonkeyPatch
) -> None:
    from resurgo.attribute.plugin import ENV_URL, enrich_live

    monkeypatch.delenv(ENV_URL, raising=False)
    kw: dict[str, Any] = {
        "anomaly": None, "lines": LINES, "obs": OBS, "nodes": [], "node_list": OBS.node_list,
    }  # fmt: skip
    assert await enrich_live(OURS, **kw) == OURS
    plugin = serve(answer(culprit_nodes=["node1"]))
    monkeypatch.setenv(ENV_URL, plugin.url)
    got = await enrich_live(OURS, cluster="local", job_id=42, **kw)
    assert got.culprit_nodes == ["node1", "node2"]
    assert plugin.calls[0]["job"] == {
        "cluster": "local", "job_id": 42, "attempt": None, "node_list": ["node1", "node2", "node3"]
    }  # fmt: skip
