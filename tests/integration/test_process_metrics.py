"""The process facts on `/metrics` of a controller/watchdog: each provoked for real (a failing
scontrol on the test Slurm cluster, log/metric sources pointed at a closed port, a circuit
breaker at its limit) and read back by scraping the process's metrics port over HTTP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from resurgo.api.server import free_port
from resurgo.metrics.exporter import start_process_metrics
from resurgo.metrics.process import PROCESS
from resurgo.slurm import breaker
from resurgo.slurm.breaker import BreakerSettings, Remediation
from resurgo.slurm.errors import CommandTimeout, PreconditionFailed
from resurgo.slurm.runner import CommandResult, LocalRunner, traced_command
from resurgo.sources.errors import SourceUnavailable
from resurgo.sources.loki import LokiSource
from resurgo.sources.prometheus import PrometheusSource
from tests.unit.test_breaker import actions_on, exclude, held, job_line, recent_tag

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def metrics_url() -> str:
    """One process metrics server, as `resurgo controller` starts it."""
    port = free_port()
    env = {"RESURGO_METRICS_PORT": str(port), "RESURGO_METRICS_HOST": "127.0.0.1"}
    assert start_process_metrics("controller/test", None, env) is PROCESS
    return f"http://127.0.0.1:{port}/metrics"


def scrape(url: str, name: str, **labels: str) -> float:
    """The sample `name{labels}` on the page, 0 when it is not there yet."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def test_a_failing_scontrol_is_counted(metrics_url: str, slurm_conf: str) -> None:
    runner = LocalRunner(slurm_conf)
    before = scrape(metrics_url, "resurgo_slurm_command_errors_total", command="scontrol")
    ok = asyncio.run(runner.run(["scontrol", "ping"]))
    assert ok.returncode == 0, ok.stderr  # a command that works is not an error
    assert scrape(metrics_url, "resurgo_slurm_command_errors_total", command="scontrol") == before
    bogus = asyncio.run(runner.run(["scontrol", "show", "job", "999999999"]))
    assert bogus.returncode != 0 and "Invalid job id" in bogus.stderr
    after = scrape(metrics_url, "resurgo_slurm_command_errors_total", command="scontrol")
    assert after == before + 1


def test_a_command_that_times_out_over_ssh_is_counted(metrics_url: str) -> None:
    """Both runners (local and SSH) run every command through `traced_command`: a timeout (or
    an unreachable login node) counts as much as a non-zero exit."""

    async def hangs() -> CommandResult:
        raise CommandTimeout("squeue did not finish in 30s on login1")

    before = scrape(metrics_url, "resurgo_slurm_command_errors_total", command="squeue")
    with pytest.raises(CommandTimeout):
        asyncio.run(traced_command(["/usr/bin/squeue", "--json"], "ssh", hangs))
    after = scrape(metrics_url, "resurgo_slurm_command_errors_total", command="squeue")
    assert after == before + 1


def test_sources_at_a_closed_port_are_counted_once_per_failed_read(metrics_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    since = datetime.now(UTC) - timedelta(minutes=5)
    until = datetime.now(UTC)

    async def read_both() -> None:
        loki = LokiSource(dead, retries=2, timeout=1)
        loki.api.backoff = 0.01
        prom = PrometheusSource(dead, retries=0, timeout=1)
        try:
            with pytest.raises(SourceUnavailable, match="cannot connect"):
                await loki.label_names(since, until)
            with pytest.raises(SourceUnavailable, match="cannot connect"):
                await prom.query("up")
        finally:
            await loki.aclose()
            await prom.aclose()

    loki_before = scrape(metrics_url, "resurgo_source_errors_total", source="loki")
    prom_before = scrape(metrics_url, "resurgo_source_errors_total", source="prometheus")
    asyncio.run(read_both())
    # Three tries of the Loki read are one failed read.
    assert scrape(metrics_url, "resurgo_source_errors_total", source="loki") == loki_before + 1
    assert (
        scrape(metrics_url, "resurgo_source_errors_total", source="prometheus") == prom_before + 1
    )


def test_a_breaker_at_its_limit_reads_open(metrics_url: str) -> None:
    # 4 nodes, max_excluded_share 0.1: one node per window, and node1 was excluded a minute ago.
    actions, _ = actions_on({1: job_line(1, "node1", recent_tag(1)), 2: held(2)})
    with pytest.raises(PreconditionFailed, match="refused by circuit breaker"):
        asyncio.run(actions.exclude_nodes(exclude(2, ["node2"])))
    assert scrape(metrics_url, "resurgo_breaker_open", cluster="prod") == 1.0


def test_a_breaker_below_its_limit_reads_closed(metrics_url: str) -> None:
    PROCESS.breaker_checked("prod", datetime.now(UTC) + timedelta(hours=1))  # as if it was open
    assert scrape(metrics_url, "resurgo_breaker_open", cluster="prod") == 1.0
    actions, _ = actions_on({2: held(2)}, n_nodes=4, max_excluded_share=0.5)
    result = asyncio.run(actions.exclude_nodes(exclude(2, ["node2"])))
    assert result.outcome == "applied"  # 1 of 2 allowed: one more may still go
    assert scrape(metrics_url, "resurgo_breaker_open", cluster="prod") == 0.0


def test_the_breaker_closes_when_its_window_passes() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    settings = BreakerSettings(window_seconds=3600, max_excluded_share=0.5)
    facts = [
        Remediation("node1", "exclude", 1, now - timedelta(minutes=50)),
        Remediation("node2", "exclude", 2, now - timedelta(minutes=20)),
        Remediation("node2", "drain", 2, now - timedelta(minutes=55)),
        Remediation("node3", "exclude", 3, now - timedelta(hours=2)),  # out of the window
    ]
    # 4 nodes at 0.5: two may be remediated, node1 and node2 are: open until node1 ages out.
    until = breaker.open_until(facts, total_nodes=4, settings=settings, now=now)
    assert until == now + timedelta(minutes=10)
    assert breaker.open_until(facts[1:], total_nodes=4, settings=settings, now=now) is None
    PROCESS.breaker_checked("windowed", until)
    assert PROCESS.breaker_open("windowed", now=now.timestamp())
    assert not PROCESS.breaker_open("windowed", now=(until + timedelta(seconds=1)).timestamp())


@pytest.mark.parametrize("variable", ["RESURGO_METRICS_PORT", "RESURGO_METRICS__WATCHDOG_PORT"])
def test_the_watchdog_process_serves_metrics(
    variable: str, slurm_conf: str, tmp_path: Path
) -> None:
    """`resurgo watchdog` as deployed: its port from $RESURGO_METRICS_PORT (compose, Helm) or
    from the config key [metrics] watchdog_port (here through the environment)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESURGO_")}
    env |= {"SLURM_CONF": slurm_conf, "RESURGO_METRICS_HOST": "127.0.0.1", variable: str(port)}
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "resurgo"), "watchdog", "--cluster", "local",
         "--observe", "--interval", "5", "--record", str(tmp_path / "watchdog.jsonl")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                value = scrape(
                    f"http://127.0.0.1:{port}/metrics", "resurgo_process", process="watchdog/local"
                )
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "no /metrics within 30 s"
                time.sleep(0.2)
        assert value == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def test_the_api_serves_the_process_facts_too(tmp_path: Path) -> None:
    """`resurgo api` runs Slurm-free, but what its process counts (a source read by a check)
    is on its own /metrics with the recovery metrics."""
    import httpx

    from resurgo.api.app import create_app
    from resurgo.audit.store import AuditStore
    from resurgo.config import ResurgoConfig, TemporalSettings

    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.create_schema()
    try:
        config = ResurgoConfig(temporal=TemporalSettings(address="127.0.0.1:1"))
        app = create_app(config, store=store, insecure=True)
        PROCESS.source_failed("victorialogs")
        expected = PROCESS.source_errors("victorialogs")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            text = (await client.get("/metrics")).text
    finally:
        store.close()
    assert f'resurgo_source_errors_total{{source="victorialogs"}} {expected:.1f}' in text
    assert "resurgo_jobs_watched 0.0" in text
