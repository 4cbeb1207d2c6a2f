"""Start a real Prometheus scraping the fake DCGM exporter (used by the tests).

    from infra.prometheus.harness import PrometheusStack
    with PrometheusStack.start(tmp_dir, hosts=("node1", "node2")) as stack:
        stack.url                       # http://127.0.0.1:<port>
        stack.exporter.set(metric="DCGM_FI_DEV_XID_ERRORS", host="node2", gpu="0", value=79)

`ensure_prometheus()` installs Debian's `prometheus` package when /usr/bin/prometheus is
missing (infra/prometheus/install.sh); the binary is then run directly (no systemd) with a
temporary config and TSDB directory on a free loopback port, scraping every second. `start`
returns once Prometheus answers `/-/ready` and has ingested the exporter's first scrape.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

HERE = Path(__file__).resolve().parent
PROMETHEUS = "/usr/bin/prometheus"
EXPORTER = HERE / "fake_dcgm_exporter.py"
TEMPLATE = HERE / "prometheus.yml.template"


class HarnessError(RuntimeError):
    """Prometheus or the exporter could not be installed or started (message has the log)."""


def ensure_prometheus() -> str:
    """The Prometheus binary, installing Debian's package first if it is missing."""
    found = PROMETHEUS if os.access(PROMETHEUS, os.X_OK) else shutil.which("prometheus")
    if found:
        return found
    done = subprocess.run(
        ["bash", str(HERE / "install.sh")], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0 or not os.access(PROMETHEUS, os.X_OK):
        raise HarnessError(f"cannot install prometheus:\n{done.stdout}\n{done.stderr}")
    return PROMETHEUS


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(what: str, check: object, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if callable(check) and check():
                return
        except (httpx.HTTPError, OSError, ValueError):
            pass
        time.sleep(0.1)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    raise HarnessError(f"{what} did not happen within {timeout:.0f}s{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@dataclass
class FakeExporter:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        hosts: Sequence[str] = ("node1", "node2"),
        gpus: int = 2,
        host_label: str = "Hostname",
        job_id: str = "42",
        omit: Sequence[str] = (),
    ) -> FakeExporter:
        port_file = workdir / f"exporter-{os.getpid()}-{time.monotonic_ns()}.port"
        argv = [
            sys.executable, str(EXPORTER), "--port", "0", "--port-file", str(port_file),
            "--hosts", ",".join(hosts), "--gpus", str(gpus), "--host-label", host_label,
            "--job-id", job_id,
        ]  # fmt: skip
        for metric in omit:
            argv += ["--omit", metric]
        log = workdir / "exporter.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait("exporter start", lambda: port_file.exists() or proc.poll() is not None, 15, log)
            if proc.poll() is not None:
                raise HarnessError(f"exporter exited with {proc.returncode}: {log.read_text()}")
            return cls(proc, int(port_file.read_text()))
        except BaseException:
            _stop(proc)
            raise

    def set(self, *, metric: str, value: float, **match: str) -> int:
        """Change a value (`host=`, `gpu=`, `node=`, `job_id=` select the series)."""
        response = httpx.post(
            f"{self.url}/set", json={"metric": metric, "value": value, **match}, timeout=5
        )
        if response.status_code != 200:
            raise HarnessError(f"exporter /set {match}: {response.status_code} {response.text}")
        return int(response.json()["updated"])

    def stop(self) -> None:
        _stop(self.proc)


@dataclass
class PrometheusServer:
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "prometheus.log"

    @classmethod
    def start(
        cls, workdir: Path, targets: Sequence[str], *, scrape_interval: str = "1s"
    ) -> PrometheusServer:
        binary = ensure_prometheus()
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        rendered = string.Template(TEMPLATE.read_text()).substitute(
            scrape_interval=scrape_interval, targets=", ".join(f"'{t}'" for t in targets)
        )
        config.write_text(rendered)
        port = free_port()
        argv = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]
        log = workdir / "prometheus.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
        server = cls(proc, port, workdir)
        try:
            _wait("prometheus /-/ready", server._ready, 30, log)
        except BaseException:
            server.stop()
            raise
        return server

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise HarnessError(f"prometheus exited with {self.proc.returncode}")
        return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def has_samples(self, expr: str) -> bool:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        data = response.json().get("data", {})
        return bool(data.get("result"))

    def wait_for(self, expr: str, timeout: float = 30.0) -> None:
        """Until the instant query `expr` returns at least one sample."""
        _wait(f"prometheus result for {expr!r}", lambda: self.has_samples(expr), timeout, self.log)

    def stop(self) -> None:
        _stop(self.proc)


@dataclass
class PrometheusStack:
    prometheus: PrometheusServer
    exporter: FakeExporter

    @property
    def url(self) -> str:
        return self.prometheus.url

    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        hosts: Sequence[str] = ("node1", "node2"),
        gpus: int = 2,
        host_label: str = "Hostname",
        job_id: str = "42",
        omit: Sequence[str] = (),
        first_scrape_timeout: float = 30.0,
    ) -> PrometheusStack:
        workdir.mkdir(parents=True, exist_ok=True)
        exporter = FakeExporter.start(
            workdir, hosts=hosts, gpus=gpus, host_label=host_label, job_id=job_id, omit=omit
        )
        try:
            prometheus = PrometheusServer.start(workdir / "prometheus", [exporter.target])
            try:
                prometheus.wait_for('up{job="dcgm"} == 1', first_scrape_timeout)
            except BaseException:
                prometheus.stop()
                raise
        except BaseException:
            exporter.stop()
            raise
        return cls(prometheus, exporter)

    def stop(self) -> None:
        self.prometheus.stop()
        self.exporter.stop()

    def __enter__(self) -> PrometheusStack:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_SHARED: PrometheusStack | None = None


def shared_stack() -> PrometheusStack:
    """One stack per process (several test modules share it); stopped at interpreter exit.

    Prometheus needs ~5 s before its first scrape (its target discovery is throttled to 5 s),
    so tests share one server rather than starting one per module.
    """
    global _SHARED
    if _SHARED is not None and _SHARED.prometheus.proc.poll() is None:
        return _SHARED
    workdir = Path(tempfile.mkdtemp(prefix="resurgo-prometheus-"))
    stack = PrometheusStack.start(workdir)
    _SHARED = stack

    def cleanup() -> None:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    atexit.register(cleanup)
    return stack
