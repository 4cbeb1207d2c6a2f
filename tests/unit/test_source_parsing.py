"""Signal sources without servers: response parsing, label proposals, cursors, paging, files.

Loki and VictoriaLogs bodies are hand-written in their documented formats
(tests/fixtures/loki, tests/fixtures/victorialogs); Prometheus bodies were captured from a real
Prometheus 2.42 (tests/fixtures/prometheus).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from resurgo.sources import (
    FileLogSource,
    FileSourceCursor,
    LabelMapping,
    LokiSource,
    PathPattern,
    PrometheusSource,
    SignalsSettings,
    SourceContractError,
    TimeCursor,
    VictoriaLogsSource,
    dump_cursor,
    load_cursor,
    parse_duration,
    parse_logs_url,
    propose_label,
    rank_candidates,
)
from resurgo.sources.base import (
    LogRecord,
    datetime_to_ns,
    format_rfc3339_ns,
    ns_to_datetime,
    parse_rfc3339_ns,
)
from resurgo.sources.check_report import config_snippet, parse_label_overrides
from resurgo.sources.labels import parse_stream_labels, quote_string
from resurgo.sources.loki import parse_query_range, parse_string_list
from resurgo.sources.paging import TimeEntry, paged_stream
from resurgo.sources.prometheus import (
    parse_instant,
    parse_label_sets,
    parse_names,
    parse_range,
)
from resurgo.sources.victorialogs import parse_query_lines, parse_values

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOKI = FIXTURES / "loki"
VLOGS = FIXTURES / "victorialogs"
PROM = FIXTURES / "prometheus"
S = 1748779200 * 10**9  # 2025-06-01T12:00:00Z
T1, T2, T3, T4, T5 = S + 10**9 + 1, S + 2 * 10**9, S + 3 * 10**9, S + 4 * 10**9 + 500, S + 5 * 10**9


def load(path: Path) -> Any:
    return json.loads(path.read_text())


# ---------------------------------------------------------------------- Loki
def test_loki_streams_are_merged_in_time_order() -> None:
    entries = parse_query_range(load(LOKI / "query_range_job4242.json"))
    assert [e.ns for e in entries] == [T1, T2, T3, T3, T4, T5]
    assert entries[0].labels["hostname"] == "node1"
    assert entries[3].line.endswith("uncorrectable ECC error encountered")


def test_loki_structured_metadata_is_merged_into_labels() -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "streams",
            "result": [{"stream": {"job_id": "7"}, "values": [[str(S), "x", {"trace": "abc"}]]}],
        },
    }
    (entry,) = parse_query_range(body)
    assert entry.labels == {"job_id": "7", "trace": "abc"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "expected a JSON object"),
        ({"status": "error", "error": "too many outstanding requests"}, "too many outstanding"),
        ({"status": "success"}, "'data' is missing"),
        ({"status": "success", "data": {"resultType": "streams"}}, "'data.result'"),
        (load(LOKI / "query_range_matrix.json"), "resultType 'matrix'"),
        (
            {"status": "success", "data": {"resultType": "streams", "result": [{"values": []}]}},
            "result[0].stream",
        ),
        (
            {
                "status": "success",
                "data": {
                    "resultType": "streams",
                    "result": [{"stream": {}, "values": [["x", "l"]]}],
                },
            },
            "timestamp must be a string of nanoseconds",
        ),
        (
            {
                "status": "success",
                "data": {
                    "resultType": "streams",
                    "result": [{"stream": {}, "values": [[1, 2, 3, 4]]}],
                },
            },
            "values[0]",
        ),
    ],
)
def test_loki_malformed_responses_are_clear_errors(body: Any, message: str) -> None:
    with pytest.raises(SourceContractError, match=None) as info:
        parse_query_range(body, "loki test")
    assert message in str(info.value)
    assert str(info.value).startswith("loki test")


def test_loki_label_lists() -> None:
    assert "slurm_job_id" in parse_string_list(load(LOKI / "labels.json"), "labels")
    assert parse_string_list({"status": "success", "data": None}, "labels") == []
    with pytest.raises(SourceContractError, match="list of strings"):
        parse_string_list({"status": "success", "data": [1]}, "labels")


def test_loki_selector_quotes_values_and_adds_the_extra_selector() -> None:
    source = LokiSource(
        "http://loki:3100", mapping=LabelMapping(job_id="slurm_job_id"), selector='{cluster="a"}'
    )
    assert source.query("42") == '{slurm_job_id="42", cluster="a"}'
    assert source.query('4"2') == '{slurm_job_id="4\\"2", cluster="a"}'
    assert source.query(None) == '{slurm_job_id=~".+", cluster="a"}'
    with pytest.raises(ValueError, match="cannot be used in a LogQL"):
        LokiSource("http://loki:3100", mapping=LabelMapping(job_id="slurm.job_id"))


# ---------------------------------------------------------------------- VictoriaLogs
def test_victorialogs_json_lines() -> None:
    entries = parse_query_lines((VLOGS / "query_job4242.jsonl").read_text())
    assert [e.ns for e in entries] == [T1, T2, T3, T3, T4, T5]
    first = entries[0]
    assert first.labels == {
        "hostname": "node1",
        "slurm_job_id": "4242",
        "stream": "stdout",
        "cluster": "a100-pod1",
    }
    assert parse_query_lines("") == []


def test_victorialogs_malformed_line_names_the_line() -> None:
    with pytest.raises(SourceContractError, match=r"line 2 returned invalid JSON"):
        parse_query_lines((VLOGS / "query_malformed.jsonl").read_text(), "vl")
    with pytest.raises(SourceContractError, match="not an RFC 3339 timestamp"):
        parse_query_lines((VLOGS / "query_bad_time.jsonl").read_text(), "vl")
    with pytest.raises(SourceContractError, match="'_time' is missing"):
        parse_query_lines('{"_msg": "x"}', "vl")
    with pytest.raises(SourceContractError, match="not a JSON object"):
        parse_query_lines("[1, 2]", "vl")
    with pytest.raises(SourceContractError, match="'_stream'"):
        parse_query_lines('{"_msg":"x","_time":"2025-06-01T12:00:00Z","_stream":"host=a"}', "vl")


def test_victorialogs_stream_labels() -> None:
    assert parse_stream_labels('{host="node1",job_id="42"}') == {"host": "node1", "job_id": "42"}
    assert parse_stream_labels("{}") == {}
    assert parse_stream_labels(r'{msg="a \"q\" b\\c", x = "1" }') == {"msg": 'a "q" b\\c', "x": "1"}
    with pytest.raises(ValueError, match="malformed"):
        parse_stream_labels("{host=node1}")


def test_victorialogs_values_and_filter() -> None:
    names = [v for v, _ in parse_values(load(VLOGS / "field_names.json"), "names")]
    assert "slurm_job_id" in names and "_msg" in names
    with pytest.raises(SourceContractError, match="'values' list"):
        parse_values({"value": 1}, "names")
    source = VictoriaLogsSource(
        "http://vl:9428", mapping=LabelMapping(job_id="slurm.job-id"), page_limit=3
    )
    assert source.filter("42") == '"slurm.job-id":="42"'
    assert source.filter(None) == '"slurm.job-id":*'
    query = source.query("42", S, S + 60 * 10**9)
    assert query == (
        '"slurm.job-id":="42" _time:[2025-06-01T12:00:00.000000000Z, '
        "2025-06-01T12:01:00.000000000Z) | sort by (_time) | limit 3"
    )


# ---------------------------------------------------------------------- Prometheus (captured)
def test_prometheus_vector_from_a_real_server() -> None:
    samples = parse_instant(load(PROM / "query_vector_xid_node2.json"))
    by_gpu = {s.labels["gpu"]: s.value for s in samples}
    assert by_gpu == {"0": 79.0, "1": 0.0}
    assert all(s.labels["Hostname"] == "node2" for s in samples)


def test_prometheus_scalar_nan_matrix_series_names() -> None:
    (scalar,) = parse_instant(load(PROM / "query_scalar.json"))
    assert scalar.labels == {} and scalar.value == 79.0
    (nan,) = parse_instant(load(PROM / "query_nan.json"))
    assert math.isnan(nan.value)
    (series,) = parse_range(load(PROM / "query_range_matrix_temp.json"))
    assert len(series.points) >= 2 and all(v == 40.0 for _, v in series.points)
    sets = parse_label_sets(load(PROM / "series_xid.json"), "series")
    assert {s["Hostname"] for s in sets} == {"node1", "node2"}
    assert "DCGM_FI_DEV_XID_ERRORS" in parse_names(load(PROM / "label_name_values.json"), "n")


def test_prometheus_errors_are_clear() -> None:
    with pytest.raises(SourceContractError, match="bad_data: invalid parameter"):
        parse_instant(load(PROM / "query_error_bad_data.json"), "prom")
    with pytest.raises(SourceContractError, match="use query_range"):
        parse_instant(load(PROM / "query_range_matrix_temp.json"), "prom")
    with pytest.raises(SourceContractError, match="not a number"):
        parse_instant(
            {"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {}, "value": [1.0, "lots"]}]}}, "prom"
        )  # fmt: skip
    with pytest.raises(SourceContractError, match="not a Prometheus API response"):
        parse_instant({"hello": "world"}, "prom")


def test_prometheus_selectors() -> None:
    prom = PrometheusSource("http://p:9090", host_label="Hostname")
    assert prom.selector("DCGM_FI_DEV_XID_ERRORS") == "DCGM_FI_DEV_XID_ERRORS"
    assert (
        prom.selector("DCGM_FI_DEV_XID_ERRORS", ["node2", "node1.x"], gpu="0")
        == 'DCGM_FI_DEV_XID_ERRORS{Hostname=~"node1\\\\.x|node2",gpu="0"}'
    )
    inst = PrometheusSource("http://p:9090", host_label="instance")
    assert inst.host_of({"instance": "node3:9400"}) == "node3"
    assert inst.host_of({"instance": "[::1]:9400"}) == "::1"
    assert "(?::[0-9]+)?" in inst.selector("up", ["node3"])
    with pytest.raises(ValueError, match="not a valid Prometheus metric name"):
        prom.selector("bad metric")


# ---------------------------------------------------------------------- label proposals
@pytest.mark.parametrize(
    ("role", "present", "configured", "expected"),
    [
        ("job_id", ["slurm_job_id", "hostname", "job"], "job_id", "slurm_job_id"),
        ("job_id", ["SLURM_JOB_ID", "host"], "job_id", "SLURM_JOB_ID"),
        ("job_id", ["jobId", "filename"], "job_id", "jobId"),
        ("job_id", ["job", "filename", "namespace"], "job_id", None),
        ("host", ["hostname", "job", "stream"], "host", "hostname"),
        ("host", ["Hostname", "gpu", "UUID", "modelName"], "hostname", "Hostname"),
        ("host", ["instance", "gpu"], "Hostname", "instance"),
        ("host", ["nodename"], "host", "nodename"),
        ("stream", ["std_stream", "job"], "stream", "std_stream"),
        ("stream", ["level", "job"], "stream", None),
    ],
)
def test_label_proposals(
    role: str, present: list[str], configured: str, expected: str | None
) -> None:
    assert propose_label(role, present, configured) == expected


def test_label_proposals_rank_and_exclude() -> None:
    ranked = rank_candidates("job_id", ["slurm_jobid", "job_id_x", "JOB_ID"], "job_id")
    assert ranked[0].name == "JOB_ID" and ranked[0].score == 1.0
    assert [c.name for c in ranked][:2] == ["JOB_ID", "slurm_jobid"]
    assert propose_label("host", ["hostname"], "host", exclude=["hostname"]) is None
    assert propose_label("job_id", ["_stream", "_msg"], "job_id") is None


def test_label_mapping_overrides() -> None:
    mapping = LabelMapping().with_overrides({"job_id": "slurm_job_id"})
    assert mapping == LabelMapping(job_id="slurm_job_id", host="host", stream="stream")
    assert mapping.role_of("slurm_job_id") == "job_id"
    with pytest.raises(ValueError, match="unknown label role"):
        LabelMapping().with_overrides({"node": "x"})
    with pytest.raises(ValueError, match="not a usable label name"):
        LabelMapping(host="bad name")
    assert parse_label_overrides(["job_id=slurm_job_id", " host = hostname "]) == {
        "job_id": "slurm_job_id",
        "host": "hostname",
    }
    for bad in ("job_id", "=x", "node=hostname"):
        with pytest.raises(ValueError, match="--label"):
            parse_label_overrides([bad])


# ---------------------------------------------------------------------- cursors and paging
def test_cursor_round_trip() -> None:
    time_cursor = TimeCursor(kind="loki", ns=T3, seen=("abc",))
    assert load_cursor(dump_cursor(time_cursor)) == time_cursor
    file_cursor = load_cursor(
        {"kind": "file", "files": {"/x/a.out": {"path": "/x/a.out", "offset": 10, "line_no": 2}}}
    )
    assert isinstance(file_cursor, FileSourceCursor)
    assert file_cursor.files["/x/a.out"].offset == 10
    assert load_cursor(dump_cursor(file_cursor)) == file_cursor
    with pytest.raises(ValueError, match="invalid source cursor"):
        load_cursor('{"kind": "kafka", "ns": 1}')
    with pytest.raises(ValueError, match="invalid source cursor"):
        load_cursor("not json")
    with pytest.raises(ValueError, match="loki cursor cannot resume a victorialogs"):
        VictoriaLogsSource("http://vl:9428").read(cursor=time_cursor)
    with pytest.raises(ValueError, match="file cursor cannot resume a loki"):
        LokiSource("http://loki:3100").read(cursor=FileSourceCursor())


def _pages(entries: list[TimeEntry], limit: int) -> tuple[Callable[[int], Any], list[int]]:
    """A fake backend: the first `limit` entries with ns >= start, like Loki/VictoriaLogs."""
    calls: list[int] = []

    async def fetch(page_start: int) -> list[TimeEntry]:
        calls.append(page_start)
        return [e for e in entries if e.ns >= page_start][:limit]

    return fetch, calls


def _record(entry: TimeEntry) -> LogRecord:
    return LogRecord(position=entry.ns, text=entry.line, labels=entry.labels, time_ns=entry.ns)


ENTRIES = [
    TimeEntry(T1, "a1", {"h": "a"}),
    TimeEntry(T2, "b2", {"h": "b"}),
    TimeEntry(T3, "a3", {"h": "a"}),
    TimeEntry(T3, "b3", {"h": "b"}),
    TimeEntry(T4, "a4", {"h": "a"}),
]


@pytest.mark.parametrize("limit", [1, 2, 3, 1000])
async def test_paging_delivers_each_entry_once_across_page_boundaries(limit: int) -> None:
    fetch, calls = _pages(ENTRIES, limit=limit)
    stream = paged_stream(
        "loki", cursor=None, start_ns=S, end_ns=T5, limit=limit, fetch=fetch, to_record=_record
    )
    got = [r.text for r in await stream.collect()]
    # With limit 1 the second entry at T3 cannot be reached (documented skip).
    assert got == (["a1", "b2", "a3", "a4"] if limit == 1 else ["a1", "b2", "a3", "b3", "a4"])
    assert calls[0] == S
    assert stream.cursor == TimeCursor(kind="loki", ns=T5)


async def test_paging_resumes_from_a_mid_timestamp_cursor() -> None:
    fetch, _ = _pages(ENTRIES, limit=2)
    first = paged_stream(
        "victorialogs", cursor=None, start_ns=S, end_ns=T5, limit=2, fetch=fetch,
        to_record=_record, max_records=3,
    )  # fmt: skip
    assert [r.text for r in await first.collect()] == ["a1", "b2", "a3"]
    assert first.truncated
    cursor = load_cursor(dump_cursor(first.cursor))
    assert isinstance(cursor, TimeCursor) and cursor.ns == T3 and len(cursor.seen) == 1
    rest = paged_stream(
        "victorialogs", cursor=cursor, start_ns=cursor.ns, end_ns=T5, limit=2, fetch=fetch,
        to_record=_record,
    )  # fmt: skip
    assert [r.text for r in await rest.collect()] == ["b3", "a4"]


async def test_paging_steps_past_a_timestamp_fuller_than_a_page() -> None:
    crowded = [TimeEntry(T3, f"x{i}", {}) for i in range(5)] + [TimeEntry(T4, "after", {})]
    fetch, calls = _pages(crowded, limit=2)
    stream = paged_stream(
        "loki", cursor=None, start_ns=S, end_ns=T5, limit=2, fetch=fetch, to_record=_record
    )
    got = [r.text for r in await stream.collect()]
    assert got == ["x0", "x1", "after"]  # the rest of T3 is unreachable: skipped, no loop
    assert len(calls) < 10


async def test_paging_empty_window() -> None:
    fetch, calls = _pages(ENTRIES, limit=2)
    stream = paged_stream(
        "loki", cursor=None, start_ns=T5, end_ns=T5, limit=2, fetch=fetch, to_record=_record
    )
    assert await stream.collect() == [] and calls == []


# ---------------------------------------------------------------------- file source
def test_path_patterns() -> None:
    p = PathPattern("/logs/%N/slurm-%j.%2t.out")
    assert p.glob() == "/logs/*/slurm-*.*.out"
    assert p.glob("42") == "/logs/*/slurm-42.*.out"
    info = p.parse("/logs/node7/slurm-0042.03.out")
    assert info is not None and (info.job_id, info.host, info.stream) == ("42", "node7", "stdout")
    assert p.parse("/logs/node7/other.out") is None
    default = PathPattern("/logs/*.err").parse("/logs/slurm-77_3.err")
    assert default is not None and (default.job_id, default.stream) == ("77", "stderr")
    assert PathPattern("/logs/train-*.log").parse("/logs/train-1.log").job_id is None  # type: ignore[union-attr]
    named = PathPattern("/logs/{host}/{job_id}[ab].log").parse("/logs/n1/9a.log")
    assert named is not None and (named.job_id, named.host) == ("9", "n1")


async def test_file_source_reads_labels_and_resumes_mid_batch(tmp_path: Path) -> None:
    log = tmp_path / "slurm-4242.out"
    log.write_text(
        "0: node1:2210:2289 [0] NCCL INFO Init COMPLETE\n"
        "1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
        "plain line\n"
        "partial"
    )
    source = FileLogSource(str(tmp_path / "slurm-%j.out"))
    stream = source.read("4242", max_records=2)
    records = await stream.collect()
    assert [(r.position, r.job_id, r.host, r.labels.get("task")) for r in records] == [
        (1, "4242", "node1", "0"),
        (2, "4242", None, "1"),
    ]
    assert stream.truncated
    cursor = load_cursor(dump_cursor(stream.cursor))
    assert isinstance(cursor, FileSourceCursor)
    rest = source.read("4242", cursor=cursor)
    assert [r.text for r in await rest.collect()] == ["plain line"]
    with log.open("a") as handle:
        handle.write(" done\n")
    more = source.read("4242", cursor=rest.cursor)
    assert [(r.position, r.text) for r in await more.collect()] == [(4, "partial done")]
    assert await source.read("4243").collect() == []
    old = datetime.now(UTC) + timedelta(minutes=1)
    assert await source.read("4242", since=old).collect() == []


async def test_file_source_restarts_after_truncation(tmp_path: Path) -> None:
    log = tmp_path / "slurm-5.out"
    log.write_text("one\ntwo\nthree\n")
    source = FileLogSource(str(tmp_path / "slurm-%j.out"))
    stream = source.read()
    assert len(await stream.collect()) == 3
    log.write_text("new\n")
    again = source.read(cursor=stream.cursor)
    assert [(r.position, r.text) for r in await again.collect()] == [(1, "new")]


# ---------------------------------------------------------------------- URLs, durations, time
def test_logs_urls() -> None:
    assert parse_logs_url("file:///shared/slurm-%j.out") == ("file", "/shared/slurm-%j.out")
    assert parse_logs_url("file://localhost/x/*.out") == ("file", "/x/*.out")
    assert parse_logs_url("/x/slurm-%2j.out?") == ("file", "/x/slurm-%2j.out?")
    assert parse_logs_url("loki+http://loki:3100/") == ("loki", "http://loki:3100")
    assert parse_logs_url("loki+https://l.example/loki") == ("loki", "https://l.example/loki")
    assert parse_logs_url("victorialogs+http://vl:9428") == ("victorialogs", "http://vl:9428")
    for bad, message in [
        ("http://loki:3100", "unsupported logs URL"),
        ("file://host/x", "local path"),
        ("file:relative/x", "absolute path"),
        ("loki+http://", "no host"),
        ("", "empty"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_logs_url(bad)


def test_durations() -> None:
    assert parse_duration("15m") == 900
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90") == 90
    assert parse_duration("500ms") == 0.5
    for bad in ("", "15 minutes", "0s", "-5", "1h-", "nan"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_timestamps() -> None:
    assert parse_rfc3339_ns("2025-06-01T12:00:01.000000001Z") == T1
    assert parse_rfc3339_ns("2025-06-01T14:00:01.5+02:00") == S + 1_500_000_000
    assert format_rfc3339_ns(T4) == "2025-06-01T12:00:04.000000500Z"
    assert parse_rfc3339_ns(format_rfc3339_ns(T4)) == T4
    assert datetime_to_ns(ns_to_datetime(T2)) == T2
    assert datetime_to_ns(datetime(2025, 6, 1, 12)) == S  # naive = UTC
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_rfc3339_ns("1748779200")
    assert quote_string('a"b\\c\n') == '"a\\"b\\\\c\\n"'


# ---------------------------------------------------------------------- config snippet
def test_config_snippet_is_valid_toml_for_the_settings_model() -> None:
    settings = SignalsSettings(
        logs="loki+http://loki:3100",
        prometheus="http://prom:9090",
        selector='cluster="a"',
        labels=LabelMapping(job_id="slurm_job_id", host="hostname"),
    )
    text = config_snippet(settings, "gpu-a", file_source=False)
    doc = tomllib.loads(text)
    parsed = SignalsSettings.model_validate(doc["clusters"]["gpu-a"]["signals"])
    assert parsed.labels == settings.labels
    assert parsed.metrics.required == ["DCGM_FI_DEV_XID_ERRORS"]
    assert parsed.selector == 'cluster="a"'
    file_text = config_snippet(
        SignalsSettings(logs="file:///x/slurm-%j.out"), "local", file_source=True
    )
    assert tomllib.loads(file_text) == {
        "clusters": {"local": {"signals": {"logs": "file:///x/slurm-%j.out"}}}
    }
    with pytest.raises(ValueError, match="unsupported logs URL"):
        SignalsSettings(logs="kafka://x")
