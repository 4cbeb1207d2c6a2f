"""`resurgo signals check` end to end through the CLI.

Metrics come from the real Prometheus scraping the fake DCGM exporter (infra/prometheus); logs
from real files, or from the local HTTP server replaying Loki/VictoriaLogs responses written in
their documented formats (timestamps moved into the check's window).
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from infra.prometheus.harness import PrometheusStack, free_port
from resurgo.cli.main import app
from resurgo.sources import SignalsSettings
from resurgo.sources.base import format_rfc3339_ns, parse_rfc3339_ns
from tests.fixture_http import ReplayServer, Route, fixture
from tests.integration.test_sources import LOKI, VLOGS

JOB_LOG = """\
0: node1:2210:2289 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
1: node2:2211:2290 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>
0: node1:2210:2289 [0] NCCL INFO comm 0x5581 rank 0 nranks 2 cudaDev 0 busId 3b000 - Init COMPLETE
1: node2:2211:2290 [0] NCCL INFO comm 0x5582 rank 1 nranks 2 cudaDev 0 busId 3b000 - Init COMPLETE
0: [rank0]: iteration       10/    1000 | elapsed time per iteration (ms): 850.2 | lm loss: 2.10
0: [rank0]: iteration       20/    1000 | elapsed time per iteration (ms): 849.7 | lm loss: 1.98
1: [rank1]: Traceback (most recent call last):
1: [rank1]:   File "/workspace/train.py", line 211, in <module>
1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered
0: [rank0]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=64, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 \
milliseconds before timing out.
srun: error: node2: task 1: Exited with exit code 1
"""


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "slurm-4242.out").write_text(JOB_LOG)
    return tmp_path


def check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["signals", "check", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def check_json(*args: str) -> tuple[int, dict[str, Any]]:
    code, out = check(*args, "--json")
    return code, json.loads(out)


def test_passes_with_file_logs_and_the_real_prometheus(
    job_dir: Path, prom_stack: PrometheusStack
) -> None:
    logs = f"file://{job_dir}/slurm-%j.out"
    code, out = check("--logs", logs, "--prometheus", prom_stack.url, "--job-id", "4242")
    assert code == 0, out
    assert "contract met" in out and "CONTRACT NOT MET" not in out
    assert "cuda_ecc_uncorrectable" in out and "nccl_watchdog_timeout" in out
    assert "[clusters.local.signals]" in out

    code, report = check_json("--logs", logs, "--prometheus", prom_stack.url, "--job-id", "4242",
                              "--cluster", "gpu-a")  # fmt: skip
    assert code == 0 and report["ok"] is True, report["problems"]
    labels = {s["role"]: s for s in report["labels"]}
    assert labels["job_id"]["values"] == ["4242"]
    assert labels["host"]["values"] == ["node1", "node2"]  # from NCCL prefixes
    counts = {p["id"]: p["count"] for p in report["patterns"]}
    assert counts["cuda_ecc_uncorrectable"] == 1 and counts["srun_task_exit_code"] == 1
    assert report["lines_scanned"] == JOB_LOG.count("\n")
    metrics = {m["metric"]: m for m in report["metrics"]}
    xid = metrics["DCGM_FI_DEV_XID_ERRORS"]
    assert (xid["status"], xid["required"], xid["hosts"]) == ("ok", True, ["node1", "node2"])
    assert xid["series"] == 4 and "Hostname" in xid["labels"]
    assert metrics["training_throughput_samples_per_second"]["hosts"] == ["node1", "node2"]
    snippet = tomllib.loads(report["snippet"])
    settings = SignalsSettings.model_validate(snippet["clusters"]["gpu-a"]["signals"])
    assert settings.logs == logs and settings.prometheus == prom_stack.url
    assert settings.metrics.host_label == "Hostname"


def test_fails_when_the_metrics_lack_the_host_label(
    job_dir: Path, prom_stack: PrometheusStack
) -> None:
    logs = f"file://{job_dir}/slurm-%j.out"
    code, out = check(
        "--logs", logs, "--prometheus", prom_stack.url, "--metrics-host-label", "hostname"
    )
    assert code == 1
    assert "CONTRACT NOT MET" in out
    assert "DCGM_FI_DEV_XID_ERRORS has no 'hostname' label" in out
    assert "--metrics-host-label Hostname" in out
    code, report = check_json(
        "--logs", logs, "--prometheus", prom_stack.url, "--metrics-host-label", "hostname"
    )
    xid = next(m for m in report["metrics"] if m["metric"] == "DCGM_FI_DEV_XID_ERRORS")
    assert (xid["status"], xid["proposal"]) == ("no_host_label", "Hostname")
    assert 'host_label = "Hostname"' in report["snippet"]  # the proposal, ready to paste


def test_fails_when_a_required_metric_is_missing(
    job_dir: Path, prom_stack: PrometheusStack
) -> None:
    code, out = check(
        "--logs", f"file://{job_dir}/slurm-%j.out", "--prometheus", prom_stack.url,
        "--metric", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    )  # fmt: skip
    assert code == 1
    assert "required metric DCGM_FI_DEV_ROW_REMAP_FAILURE not found in the last 15m" in out


def test_fails_without_a_job_id_in_the_file_names(tmp_path: Path) -> None:
    (tmp_path / "train-a.log").write_text(JOB_LOG)
    code, report = check_json("--logs", f"file://{tmp_path}/train-*.log")
    assert code == 1 and report["ok"] is False
    job = next(s for s in report["labels"] if s["role"] == "job_id")
    assert job["status"] == "missing" and "%j" in job["detail"]
    assert any("no job id in the file names" in p for p in report["problems"])


def test_fails_when_no_file_is_recent(job_dir: Path) -> None:
    old = time.time() - 7200
    os.utime(job_dir / "slurm-4242.out", (old, old))
    code, out = check("--logs", f"file://{job_dir}/slurm-%j.out", "--window", "30m")
    assert code == 1
    assert "was modified in the last 30m" in out and "widen --window" in out


# ---------------------------------------------------------------------- Loki / VictoriaLogs
def _shift_loki(path: Path, offset_ns: int) -> bytes:
    doc = json.loads(path.read_text())
    for stream in doc["data"]["result"]:
        stream["values"] = [[str(int(ts) + offset_ns), line] for ts, line in stream["values"]]
    return json.dumps(doc).encode()


@pytest.fixture
def loki() -> Iterator[ReplayServer]:
    first = 1748779201 * 10**9
    offset = time.time_ns() - 60 * 10**9 - first  # the recorded lines, one minute ago
    routes = [
        Route("/loki/api/v1/query_range",
              body=_shift_loki(LOKI / "query_range_job4242.json", offset)),
        Route("/loki/api/v1/labels", **fixture(LOKI / "labels.json")),
    ] + [
        Route(f"/loki/api/v1/label/{name}/values", **fixture(LOKI / f"label_values_{name}.json"))
        for name in ("slurm_job_id", "hostname", "stream")
    ]  # fmt: skip
    server = ReplayServer(routes)
    yield server
    server.close()


def test_proposes_loki_label_mappings(loki: ReplayServer) -> None:
    logs = f"loki+{loki.url}"
    code, out = check("--logs", logs, "--job-id", "4242")
    assert code == 1
    assert "no label 'job_id' for the job id in the last 15m" in out
    assert "'slurm_job_id' looks like it: --label job_id=slurm_job_id" in out
    assert "no label 'host' for the host" in out and "--label host=hostname" in out
    code, report = check_json("--logs", logs, "--job-id", "4242")
    labels = {s["role"]: s for s in report["labels"]}
    assert labels["job_id"]["proposal"] == "slurm_job_id"
    assert labels["host"]["proposal"] == "hostname"
    assert labels["stream"]["status"] == "ok"
    snippet = tomllib.loads(report["snippet"])["clusters"]["local"]["signals"]
    assert snippet["labels"] == {"job_id": "slurm_job_id", "host": "hostname", "stream": "stream"}
    assert report["lines_scanned"] == 6  # scanned through the proposed mapping
    queries = [q["query"] for q in loki.calls("/loki/api/v1/query_range")]
    assert queries and all(q == '{slurm_job_id="4242"}' for q in queries)

    code, report = check_json(
        "--logs", logs, "--job-id", "4242", "--label", "job_id=slurm_job_id",
        "--label", "host=hostname",
    )  # fmt: skip
    assert code == 0 and report["ok"], report["problems"]
    assert report["hosts_seen"] == ["node1", "node2"]
    found = {p["id"] for p in report["patterns"]}
    assert found >= {"cuda_ecc_uncorrectable", "nccl_watchdog_timeout"}


def test_victorialogs_with_mapping_passes() -> None:
    first = 1748779201 * 10**9
    offset = time.time_ns() - 60 * 10**9 - first
    lines = []
    for raw in (VLOGS / "query_job4242.jsonl").read_text().splitlines():
        entry = json.loads(raw)
        entry["_time"] = format_rfc3339_ns(parse_rfc3339_ns(entry["_time"]) + offset)
        lines.append(json.dumps(entry))
    routes = [
        Route("/select/logsql/query", body=("\n".join(lines) + "\n").encode()),
        Route("/select/logsql/field_names", **fixture(VLOGS / "field_names.json")),
    ] + [
        Route("/select/logsql/field_values", **fixture(VLOGS / f"field_values_{name}.json",
                                                       params={"field": name}))
        for name in ("slurm_job_id", "hostname", "stream")
    ]  # fmt: skip
    server = ReplayServer(routes)
    try:
        code, report = check_json(
            "--logs", f"victorialogs+{server.url}", "--window", "5m",
            "--label", "job_id=slurm_job_id", "--label", "host=hostname",
        )  # fmt: skip
    finally:
        server.close()
    assert code == 0, report["problems"]
    assert report["lines_scanned"] == 6 and report["jobs_seen"] == ["4242"]


def test_unreachable_source_and_bad_arguments() -> None:
    code, out = check("--logs", f"loki+http://127.0.0.1:{free_port()}", "--timeout", "1")
    assert code == 1 and "cannot connect" in out
    code, _ = check("--logs", "/x/slurm-%j.out", "--window", "15 minutes")
    assert code == 2
    code, _ = check("--logs", "kafka://x")
    assert code == 2
    code, _ = check("--logs", "/x/slurm-%j.out", "--label", "gpu=x")
    assert code == 2
