"""Run Resurgo's processes on this host: used by the demo and the end-to-end tests.

Each component is a real OS process (`resurgo worker`, `resurgo controller`), so tests can
SIGKILL and restart them exactly as an operator's machine would lose them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def write_config(
    path: Path,
    *,
    temporal_address: str,
    audit_url: str,
    cluster: str = "local",
    slurm_conf: str | None = None,
    acknowledge: bool = True,
    environment: str | None = None,
    discovery_interval: float = 1.0,
    loose_breaker: bool = False,
    extra: str = "",
) -> Path:
    """Write a TOML config (values JSON-quoted, which TOML accepts for strings)."""
    lines = [
        "[temporal]",
        f"address = {json.dumps(temporal_address)}",
        "[audit]",
        f"url = {json.dumps(audit_url)}",
        f"[clusters.{cluster}]",
        'mode = "local"',
        f"acknowledge_scheduler_actions = {'true' if acknowledge else 'false'}",
        f"discovery_interval = {discovery_interval}",
    ]
    if slurm_conf:
        lines.append(f"slurm_conf = {json.dumps(slurm_conf)}")
    if environment:
        lines.append(f"environment = {json.dumps(environment)}")
    if loose_breaker:
        # Demos, tests and benchmarks exclude the same node of a 4-node cluster again and
        # again; the production breaker (10 % of nodes, 3 remediations per node per hour)
        # would rightly refuse that.
        lines += ["max_excluded_share = 1.0", "max_remediations_per_node = 100000"]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


@dataclass
class LocalStack:
    """The worker and one controller as child processes sharing one config file."""

    config: Path
    logdir: Path
    cluster: str = "local"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def command(self, component: str, cluster: str | None = None) -> list[str]:
        base = [sys.executable, "-m", "resurgo.cli.main", component, "--config", str(self.config)]
        if component == "controller":
            base += ["--cluster", cluster or self.cluster]
        return base

    def start(
        self,
        component: str,
        env: dict[str, str] | None = None,
        *,
        instance: str | None = None,
        cluster: str | None = None,
    ) -> None:
        """Start `component` as process `instance` (default: the component's name)."""
        name = instance or component
        self.logdir.mkdir(parents=True, exist_ok=True)
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.procs[name] = subprocess.Popen(
            self.command(component, cluster), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )  # fmt: skip

    def start_all(self) -> None:
        self.start("worker")
        self.start("controller")

    def kill(self, component: str) -> None:
        """SIGKILL: no graceful shutdown, no chance to report anything."""
        proc = self.procs.pop(component, None)
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop(self, component: str) -> None:
        proc = self.procs.pop(component, None)
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def stop_all(self) -> None:
        for component in list(self.procs):
            self.stop(component)

    def alive(self, component: str) -> bool:
        proc = self.procs.get(component)
        return proc is not None and proc.poll() is None

    def log_tail(self, component: str, lines: int = 40) -> str:
        path = self.logdir / f"{component}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns something truthy; TimeoutError names `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
