"""Run Slurm commands: locally (in-cluster) or over SSH to a login node.

Commands are argument lists, never shell strings: over SSH they are quoted with shlex, so job
names, comments and node names (untrusted input) cannot inject anything.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from dataclasses import dataclass
from typing import Protocol

from activities.slurm.errors import CommandTimeout, SchedulerUnavailable

DEFAULT_TIMEOUT = 30.0


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


class LocalRunner:
    """Runs commands on this host; SLURM_CONF selects the cluster."""

    def __init__(self, slurm_conf: str | None = None) -> None:
        self.env = dict(os.environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        # Slurm prints local time; UTC makes timestamps unambiguous for the parsers.
        self.env["TZ"] = "UTC"

    async def run(self, argv: list[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
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


def _read_local(path: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        if offset > stat.st_size:
            return b"", stat.st_size, stat.st_ino
        handle.seek(offset)
        return handle.read(max_bytes), stat.st_size, stat.st_ino
