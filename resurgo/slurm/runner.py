"""Run Slurm commands: locally (in-cluster) or over SSH to a login node.

Commands are argument lists, never shell strings: over SSH they are quoted with shlex, so job
names, comments and node names (untrusted input) cannot inject anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import metrics, trace

from resurgo.metrics.process import PROCESS
from resurgo.slurm.errors import CommandTimeout, SchedulerUnavailable
from resurgo.slurm.output_files import off_loop, read_checked, stat_paths

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

    async def read_file(
        self, path: str, offset: int, max_bytes: int, *, owner: str | int | None = None
    ) -> tuple[bytes, int, int]:
        """Read up to max_bytes from offset; returns (data, file size, inode).

        A job's output path is user input: it is read only if it is a regular file (not a
        symlink, FIFO or device) owned by `owner` (the job's user; None: any owner), else
        `OutputRefused` says why. A missing file is FileNotFoundError."""
        ...

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        """(size, inode) of each path itself (symlinks not followed), None for a missing one;
        paths it could not tell about (e.g. unreadable) are left out."""
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
        except BaseException:
            # Cancelled (an activity cancelled or past its heartbeat): the command must not
            # outlive its caller. Orphaned `squeue --json` runs once piled up by the hundred.
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        return CommandResult(
            tuple(argv),
            proc.returncode if proc.returncode is not None else -1,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )

    async def read_file(
        self, path: str, offset: int, max_bytes: int, *, owner: str | int | None = None
    ) -> tuple[bytes, int, int]:
        # On the output pool, never the default one: a dead mount strands only its threads.
        return await off_loop(
            lambda: read_checked(path, offset, max_bytes, owner), f"reading {path}"
        )

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        # One thread hop for all of them: a stat on a shared file system may block.
        return await off_loop(lambda: stat_paths(paths), f"stat of {len(paths)} output files")


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
        if outcome != "ok":  # resurgo_slurm_command_errors_total{command} on /metrics
            PROCESS.slurm_command_failed(command)
