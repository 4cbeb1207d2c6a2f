"""Log and metric sources over real HTTP.

- Loki and VictoriaLogs: no server can run here, so a real local HTTP server (http.server in a
  thread) replays responses written in their documented formats (tests/fixtures/loki,
  tests/fixtures/victorialogs), including pagination, errors and retries.
- Prometheus: the real thing. Debian's Prometheus (installed when missing) scrapes
  infra/prometheus/fake_dcgm_exporter.py every second; the tests change an XID value and see it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from infra.prometheus.harness import PrometheusStack, free_port
from resurgo.sources import (
    LabelMapping,
    LokiSource,
    PrometheusSource,
    SourceContractError,
    SourceUnavailable,
    TimeCursor,
    VictoriaLogsSource,
    dump_cursor,
    load_cursor,
)
from resurgo.sources.prometheus import XID_METRIC
from tests.fixture_http import Route, fixture

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOKI = FIXTURES / "loki"
VLOGS = FIXTURES / "victorialogs"
S = 1748779200 * 10**9  # 2025-06-01T12:00:00Z
T3, T4 = S + 3 * 10**9, S + 4 * 10**9 + 500
SINCE = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
UNTIL = SINCE + timedelta(minutes=1)
JOB_LINES = 6


def loki_routes() -> list[Route]:
    qr = "/loki/api/v1/query_range"
    return [
        Route(qr, **fixture(LOKI / "query_range_page1.json", params={"start": str(S)})),
        Route(qr, **fixture(LOKI / "query_range_page2.json", params={"start": str(T3)})),
        Route(qr, **fixture(LOKI / "query_range_page3.json", params={"start": str(T4)})),
        Route(qr, **fixture(LOKI / "query_range_empty.json")),
        Route("/loki/api/v1/labels", **fixture(LOKI / "labels.json")),
    ] + [
        Route(f"/loki/api/v1/label/{name}/values", **fixture(LOKI / f"label_values_{name}.json"))
        for name in ("slurm_job_id", "hostname", "stream")
    ]


MAPPING = LabelMapping(job_id="slurm_job_id", host="hostname", stream="stream")


# ---------------------------------------------------------------------- Loki
async def test_loki_pages_forward_without_loss_or_repeats(replay: Any) -> None:
    server = replay(loki_routes())
    source = LokiSource(server.url, mapping=MAPPING, page_limit=3)
    try:
        stream = source.read("4242", since=SINCE, until=UNTIL)
        records = await stream.collect()
    finally:
        await source.aclose()
    assert len(records) == JOB_LINES
    assert [r.host for r in records] == ["node1", "node2", "node1", "node2", "node1", "node2"]
    assert (
        records[3].text
        == "1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    )
    assert all(r.job_id == "4242" and r.stream == "stdout" for r in records)
    assert records[0].time == datetime(2025, 6, 1, 12, 0, 1, tzinfo=UTC)
    calls = server.calls("/loki/api/v1/query_range")
    assert [c["start"] for c in calls] == [str(S), str(T3), str(T4)]
    assert all(c["query"] == '{slurm_job_id="4242"}' for c in calls)
    assert all(c["direction"] == "forward" and c["limit"] == "3" for c in calls)
    assert {c["end"] for c in calls} == {str(S + 60 * 10**9)}
    assert stream.cursor == TimeCursor(kind="loki", ns=S + 60 * 10**9)


async def test_loki_resumes_from_a_saved_cursor(replay: Any) -> None:
    server = replay(loki_routes())
    source = LokiSource(server.url, mapping=MAPPING, page_limit=3)
    try:
        first = source.read("4242", since=SINCE, until=UNTIL, max_records=3)
        head = await first.collect()
        saved = dump_cursor(first.cursor)  # what the watch activity would heartbeat
        cursor = load_cursor(saved)
        assert isinstance(cursor, TimeCursor) and cursor.ns == T3
        rest = await source.read("4242", cursor=cursor, until=UNTIL).collect()
        again = await source.read("4242", cursor=TimeCursor(kind="loki", ns=S + 60 * 10**9),
                                  until=UNTIL + timedelta(seconds=5)).collect()  # fmt: skip
    finally:
        await source.aclose()
    texts = [r.text for r in head + rest]
    assert len(texts) == JOB_LINES == len(set(texts))
    assert again == []


async def test_loki_label_discovery(replay: Any) -> None:
    server = replay(loki_routes())
    source = LokiSource(server.url)
    try:
        names = await source.label_names(SINCE, UNTIL)
        hosts = await source.label_values("hostname", SINCE, UNTIL)
    finally:
        await source.aclose()
    assert names == ["filename", "hostname", "job", "slurm_job_id", "stream"]
    assert hosts == ["node1", "node2"]
    assert server.calls("/loki/api/v1/labels")[0]["start"] == str(S)


async def test_loki_errors_are_clear(replay: Any) -> None:
    qr = "/loki/api/v1/query_range"
    server = replay([
        Route(qr, **fixture(LOKI / "query_range_bad_query.txt", status=400,
                            params={"query": '{slurm_job_id="bad"}'})),
        Route(qr, **fixture(LOKI / "query_range_truncated.json", contains={"query": '"cut"'})),
        Route(qr, **fixture(LOKI / "query_range_matrix.json", contains={"query": '"m"'})),
        Route(qr, body=b"upstream connect error", status=503, content_type="text/plain", times=1),
        Route(qr, **fixture(LOKI / "query_range_job4242.json")),
    ])  # fmt: skip
    source = LokiSource(server.url, mapping=MAPPING, retries=2, timeout=2)
    source.api.backoff = 0.01
    try:
        with pytest.raises(SourceContractError, match=r"HTTP 400: parse error at line 1") as bad:
            await source.read("bad", since=SINCE, until=UNTIL).collect()
        assert server.url in str(bad.value)
        with pytest.raises(SourceContractError, match="returned invalid JSON"):
            await source.read("cut", since=SINCE, until=UNTIL).collect()
        with pytest.raises(SourceContractError, match="resultType 'matrix'"):
            await source.read("m", since=SINCE, until=UNTIL).collect()
        # One 503, then the answer: the bounded retry hides the blip.
        records = await source.read("4242", since=SINCE, until=UNTIL).collect()
        assert len(records) == JOB_LINES
    finally:
        await source.aclose()


async def test_unreachable_and_wrong_servers(replay: Any) -> None:
    dead = LokiSource(f"http://127.0.0.1:{free_port()}", retries=1, timeout=1)
    dead.api.backoff = 0.01
    try:
        with pytest.raises(SourceUnavailable, match=r"failed after 2 attempt\(s\): cannot connect"):
            await dead.label_names(SINCE, UNTIL)
    finally:
        await dead.aclose()
    server = replay([])
    wrong = VictoriaLogsSource(server.url)
    try:
        with pytest.raises(SourceContractError, match="really a victorialogs server"):
            await wrong.label_names(SINCE, UNTIL)
    finally:
        await wrong.aclose()


# ---------------------------------------------------------------------- VictoriaLogs
def vl_routes() -> list[Route]:
    q = "/select/logsql/query"

    def start(seconds: str) -> dict[str, str]:
        return {"start": f"2025-06-01T12:00:0{seconds}Z"}

    return [
        Route(q, **fixture(VLOGS / "query_page1.jsonl", params=start("0.000000000"))),
        Route(q, **fixture(VLOGS / "query_page2.jsonl", params=start("3.000000000"))),
        Route(q, **fixture(VLOGS / "query_page3.jsonl", params=start("4.000000500"))),
        Route(q, **fixture(VLOGS / "query_empty.jsonl")),
        Route("/select/logsql/field_names", **fixture(VLOGS / "field_names.json")),
    ] + [
        Route("/select/logsql/field_values", **fixture(VLOGS / f"field_values_{name}.json",
                                                       params={"field": name}))
        for name in ("slurm_job_id", "hostname", "stream")
    ]  # fmt: skip


async def test_victorialogs_pages_forward(replay: Any) -> None:
    server = replay(vl_routes())
    source = VictoriaLogsSource(server.url, mapping=MAPPING, page_limit=3)
    try:
        stream = source.read("4242", since=SINCE, until=UNTIL)
        records = await stream.collect()
    finally:
        await source.aclose()
    assert len(records) == JOB_LINES
    assert [r.host for r in records] == ["node1", "node2", "node1", "node2", "node1", "node2"]
    assert records[0].labels["cluster"] == "a100-pod1"
    assert records[-1].text == "srun: error: node2: task 1: Exited with exit code 1"
    calls = server.calls("/select/logsql/query")
    assert len(calls) == 3
    assert calls[0]["query"] == (
        'slurm_job_id:="4242" _time:[2025-06-01T12:00:00.000000000Z, '
        "2025-06-01T12:01:00.000000000Z) | sort by (_time) | limit 3"
    )
    assert stream.cursor == TimeCursor(kind="victorialogs", ns=S + 60 * 10**9)


async def test_victorialogs_discovery_and_errors(replay: Any) -> None:
    q = "/select/logsql/query"
    server = replay([
        Route(q, **fixture(VLOGS / "query_bad_query.txt", status=400, contains={"query": "bad"})),
        Route(q, **fixture(VLOGS / "query_malformed.jsonl")),
        *vl_routes(),
    ])  # fmt: skip
    source = VictoriaLogsSource(server.url, mapping=MAPPING, page_limit=3)
    try:
        names = await source.label_names(SINCE, UNTIL)
        assert {"slurm_job_id", "hostname", "stream", "cluster"} <= set(names)
        assert await source.label_values("hostname", SINCE, UNTIL) == ["node1", "node2"]
        with pytest.raises(SourceContractError, match=r'HTTP 400: cannot parse query.*"limt"'):
            await source.read("bad", since=SINCE, until=UNTIL).collect()
        with pytest.raises(SourceContractError, match="line 2 returned invalid JSON"):
            await source.read("4242", since=SINCE, until=UNTIL).collect()
    finally:
        await source.aclose()


# ---------------------------------------------------------------------- Prometheus (real)
async def _until(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.25)


async def test_prometheus_sees_an_xid_appear_on_node2(prom_stack: PrometheusStack) -> None:
    prom = PrometheusSource(prom_stack.url, host_label="Hostname")
    try:
        assert XID_METRIC in await prom.metric_names()
        before = await prom.gpu_metric(XID_METRIC, ["node2"])
        assert [(r.host, r.gpu, r.value) for r in before] == [
            ("node2", "0", 0.0),
            ("node2", "1", 0.0),
        ]
        assert all(r.uuid and r.uuid.startswith("GPU-") for r in before)
        assert await prom.xid_errors(["node2"]) == []

        prom_stack.exporter.set(metric=XID_METRIC, host="node2", gpu="0", value=79)
        after = await _until(lambda: prom.xid_errors(["node2"]))
        assert [(r.host, r.gpu, r.xid) for r in after] == [("node2", "0", 79)]
        assert await prom.xid_errors(["node1"]) == []
        events = await prom.xid_events(timedelta(minutes=5))
        assert [(r.host, r.gpu, r.xid) for r in events] == [("node2", "0", 79)]
        health = await prom.gpu_health(["node2"])
        assert health[("node2", "0")].last_xid == 79
        assert health[("node2", "1")].temperature == 42.0
    finally:
        prom_stack.exporter.set(metric=XID_METRIC, host="node2", gpu="0", value=0)
        await prom.aclose()


async def test_prometheus_throughput_and_ranges(prom_stack: PrometheusStack) -> None:
    prom = PrometheusSource(prom_stack.url, host_label="Hostname", retries=0)
    try:
        assert await prom.throughput("42") == {"node1": 512.0, "node2": 512.0}
        assert await prom.throughput("999") == {}
        prom_stack.exporter.set(metric="training_throughput_samples_per_second", node="node1",
                                value=128)  # fmt: skip
        slow = await _until(lambda: _slow_nodes(prom))
        assert slow == ["node1"]
        end = datetime.now(UTC)
        ranges = await prom.throughput_range("42", end - timedelta(seconds=5), end, 1)
        assert set(ranges) == {"node1", "node2"} and len(ranges["node2"]) >= 3
        series = await prom.series([XID_METRIC])
        assert {s["Hostname"] for s in series} == {"node1", "node2"}
        with pytest.raises(SourceContractError, match="bad_data"):
            await prom.query("DCGM_FI_DEV_XID_ERRORS{")
    finally:
        prom_stack.exporter.set(metric="training_throughput_samples_per_second", node="node1",
                                value=512)  # fmt: skip
        await prom.aclose()


async def _slow_nodes(prom: PrometheusSource) -> list[str]:
    return [node for node, value in (await prom.throughput("42")).items() if value < 200]
