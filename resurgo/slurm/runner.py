"""Run Slurm commands: locally (in-cluster) or over SSH to a login node.

Commands are argument lists, never shell strings: over SSH they are quoted with shlex, so job
names, comments and node names (untrusted input) cannot inject anything.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import metrics, trace

from resurgo.slurm.errors import CommandTimeout, SchedulerUnavailable

DEFAULT_TIMEOUT = 30.0
MAX_ARGV_ATTRIBUTE = 1024

# OpenTelemetry API only: no-ops until resurgo.worker.telemetry installs providers.
_tracer = trace.get_tracer("resurgo.slurm")
COMMAND_DURATION = metrics.get_meter("resurgo.slurm").create_histogram(
    "resurgo.slurm.command.duration", unit="s",
    description="Slurm command wall time, by command, subcommand and transport",
)  # fmt: skip


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandRunner(Protocol):
    async def run(self, argv: list[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult: ...

    async def read_file(self, path: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """Read up to max_bytes from offset; returns (data, file size, inode)."""
        ...

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        """(size, inode) of each path, None for a missing one; paths it could not tell about
        (e.g. unreadable) are left out."""
        ...


class LocalRunner:
    """Runs commands on this host; SLURM_CONF selects the cluster."""

    def __init__(self, slurm_conf: str | None = None) -> None:
        self.env = dict(os.environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        # Slurm prints local time; UTC makes timestamps unambiguous for the parsers.
        self.env["TZ"] = "UTC"

    async def run(self, argv: list[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        return await traced_command(argv, "local", lambda: self._run(argv, timeout))

    async def _run(self, argv: list[str], timeout: float) -> CommandResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
            )
        except FileNotFoundError as exc:
            raise SchedulerUnavailable(f"{argv[0]} not found on this host: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise CommandTimeout(f"{shlex.join(argv)} did not finish in {timeout:.0f}s") from exc
        return CommandResult(
            tuple(argv),
            proc.returncode if proc.returncode is not None else -1,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )

    async def read_file(self, path: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        return await asyncio.to_thread(_read_local, path, offset, max_bytes)

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        # One thread hop for all of them: a stat on a shared file system may block.
        return await asyncio.to_thread(_stat_local, paths)


async def traced_command(
    argv: list[str],
    transport: str,
    run: Callable[[], Awaitable[CommandResult]],
    attributes: dict[str, str | int] | None = None,
) -> CommandResult:
    """Run one command inside a span `slurm <argv[0]> <argv[1]>` and time it.

    The span is made only inside a trace (an activity's): the discovery loop's polls would
    otherwise be a new trace every few seconds. The duration metric is recorded either way.
    Attributes hold the argv (no secrets: Slurm argv carry job ids, node names and reasons),
    the exit code and the duration, never the environment or the SSH command line."""
    command = os.path.basename(argv[0]) if argv else ""
    sub = argv[1] if len(argv) > 1 and argv[1].isalpha() else ""
    labels = {"command": command, "subcommand": sub, "transport": transport}
    start = time.monotonic()
    outcome = "error"
    try:
        if not trace.get_current_span().get_span_context().is_valid:
            result = await run()
        else:
            with _tracer.start_as_current_span(
                " ".join(["slurm", *argv[:2]]), kind=trace.SpanKind.CLIENT
            ) as span:
                span.set_attribute("slurm.argv", shlex.join(argv)[:MAX_ARGV_ATTRIBUTE])
                span.set_attribute("slurm.transport", transport)
                for key, value in (attributes or {}).items():
                    span.set_attribute(key, value)
                try:
                    result = await run()
                finally:
                    span.set_attribute("slurm.duration_s", time.monotonic() - start)
                span.set_attribute("slurm.exit_code", result.returncode)
        outcome = "ok" if result.returncode == 0 else "nonzero"
        return result
    finally:
        COMMAND_DURATION.record(time.monotonic() - start, {**labels, "outcome": outcome})


def _read_local(path: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        if offset > stat.st_size:
            return b"", stat.st_size, stat.st_ino
        handle.seek(offset)
        return handle.read(max_bytes), stat.st_size, stat.st_ino


def _stat_local(paths: list[str]) -> dict[str, tuple[int, int] | None]:
    stats: dict[str, tuple[int, int] | None] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            stats[path] = None
        except OSError:
            continue
        else:
            stats[path] = (st.st_size, st.st_ino)
    return stats
