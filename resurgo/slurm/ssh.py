"""SSH mode: run Slurm commands on a login node over one reused asyncssh connection.

- **Authentication** by key only (`client_keys`; none given: the user's default keys and agent).
  The server's host key must be in `known_hosts` (default `~/.ssh/known_hosts`); an unknown or
  changed key is refused (`SshHostKeyRejected`), never accepted on first use.
- **One connection, many channels.** Commands run concurrently on separate channels, at most
  `max_sessions` at a time (OpenSSH's `MaxSessions` defaults to 10 per connection).
- **Reconnect with exponential backoff.** A dropped link is noticed by the next command (or by
  keepalives) and reopened; failed attempts back off 0.5 s, 1 s, 2 s ... up to 30 s, shared by
  every caller, so a hundred waiting activities do not hammer the login node.
- **Errors.** No connection, or the link lost while a command ran: `SchedulerUnavailable`
  (retryable; a command cut off mid-way is *not* re-run here: it may have taken effect, and only
  the caller's observe-first logic can tell). A command past its deadline: `CommandTimeout`.
- **Quoting.** Commands are argument lists joined with `shlex.join` for the remote shell (which
  must be a POSIX shell), so job names, comments and node names are always single arguments and
  can never run anything. The environment (`TZ=UTC`, `SLURM_CONF`) is set with `env` inside the
  command, not through the server's `AcceptEnv`. The remote `timeout` (coreutils) ends a command
  that outlives its deadline, as OpenSSH does not deliver signals to non-privsep sessions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import shlex
from dataclasses import dataclass
from typing import Any

import asyncssh

from resurgo.slurm.errors import CommandTimeout, SchedulerUnavailable
from resurgo.slurm.runner import DEFAULT_TIMEOUT, CommandResult, traced_command

log = logging.getLogger("resurgo.ssh")
# asyncssh logs every channel at INFO (5 lines per command); keep its warnings and errors only,
# unless the operator configured that logger explicitly.
if logging.getLogger("asyncssh").level == logging.NOTSET:
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 30.0
KEEPALIVE_INTERVAL = 15.0
KEEPALIVE_COUNT_MAX = 3
# The remote `timeout` fires this long after the local deadline: the local one reports first.
REMOTE_GRACE = 5


@dataclass(frozen=True)
class SshTarget:
    """Where and how to log in (built from `[clusters.X.ssh]` by `resurgo.worker.processes`)."""

    host: str
    port: int = 22
    username: str = "root"
    client_keys: tuple[str, ...] = ()
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    command_timeout: float = DEFAULT_TIMEOUT  # for read_file; run() takes its own
    connect_timeout: float = 10.0
    max_sessions: int = 8


class SshHostKeyRejected(SchedulerUnavailable):
    """The login node's host key is not in known_hosts (or differs from it): not connecting."""


class SshAuthFailed(SchedulerUnavailable):
    """The login node refused our keys."""


class SshRunner:
    """A `CommandRunner` for a cluster reached through a login node."""

    def __init__(self, settings: SshTarget, slurm_conf: str | None = None) -> None:
        self.settings = settings
        self.slurm_conf = slurm_conf
        self.target = f"{settings.username}@{settings.host}:{settings.port}"
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._sessions = asyncio.Semaphore(settings.max_sessions)
        self._failures = 0
        self._not_before = 0.0
        self._last_error = ""
        self.connects = 0  # successful connections made so far (1 = never reconnected)

    # -- commands ----------------------------------------------------------------------------

    def remote_command(self, argv: list[str], timeout: float) -> str:
        """The exact string the remote shell gets: every argument quoted, env set by `env`."""
        if not argv or not argv[0] or argv[0].startswith("-") or "=" in argv[0]:
            raise ValueError(f"refusing to run {argv!r}: the command must be a program name")
        env = ["TZ=UTC"] + ([f"SLURM_CONF={self.slurm_conf}"] if self.slurm_conf else [])
        limit = str(math.ceil(timeout) + REMOTE_GRACE)
        return shlex.join(["env", *env, "timeout", "-k", "5", limit, *argv])

    async def run(self, argv: list[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        peer: dict[str, str | int] = {
            "server.address": self.settings.host,
            "server.port": self.settings.port,
        }
        return await traced_command(argv, "ssh", lambda: self._run(argv, timeout), peer)

    async def _run(self, argv: list[str], timeout: float) -> CommandResult:
        result = await self._exec(
            self.remote_command(argv, timeout), timeout, shlex.join(argv), encoding="utf-8"
        )
        return CommandResult(
            tuple(argv),
            _returncode(result),
            _text(result.stdout),
            _text(result.stderr),
        )

    async def read_file(self, path: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """Up to max_bytes from offset, with the file's size and inode, in one round trip."""
        if offset < 0 or max_bytes < 0:
            raise ValueError(f"bad read window offset={offset} max_bytes={max_bytes}")
        quoted = shlex.quote(path)
        command = (
            f"LC_ALL=C stat -L -c '%s %i' -- {quoted} && "
            f"tail -c +{offset + 1} -- {quoted} | head -c {max_bytes}"
        )
        timeout = self.settings.command_timeout
        result = await self._exec(command, timeout, f"read {path}", encoding=None)
        out = result.stdout if isinstance(result.stdout, bytes) else b""
        err = result.stderr.decode("utf-8", "replace") if isinstance(result.stderr, bytes) else ""
        header, newline, data = out.partition(b"\n")
        if result.exit_status != 0 or not newline:
            if "No such file" in err or "Not a directory" in err:
                raise FileNotFoundError(2, f"{err.strip()} (on {self.target})", path)
            if "Permission denied" in err:
                raise PermissionError(13, f"{err.strip()} (on {self.target})", path)
            raise SchedulerUnavailable(
                f"reading {path} on {self.target} failed ({_returncode(result)}): {err[:300]}"
            )
        try:
            size, inode = (int(part) for part in header.split())
        except ValueError:
            raise SchedulerUnavailable(f"stat of {path} printed {header[:100]!r}") from None
        return data, size, inode

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        """(size, inode) of many files in one remote `stat` per 200 paths."""
        stats: dict[str, tuple[int, int] | None] = {}
        for i in range(0, len(paths), 200):
            chunk = [p for p in paths[i : i + 200] if "\n" not in p]
            if not chunk:
                continue
            command = "LC_ALL=C stat -L -c '%s %i %n' -- " + " ".join(map(shlex.quote, chunk))
            result = await self._exec(
                command, self.settings.command_timeout, f"stat {len(chunk)} files",
                encoding="utf-8",
            )  # fmt: skip
            for line in _text(result.stdout).splitlines():
                size, inode, name = [*line.split(" ", 2), "", ""][:3]
                if size.isdigit() and inode.isdigit():
                    stats[name] = (int(size), int(inode))
            err = _text(result.stderr)
            for path in chunk:
                if path not in stats and "No such file" in err and path in err:
                    stats[path] = None
        return stats

    async def _exec(
        self, command: str, timeout: float, what: str, *, encoding: str | None
    ) -> asyncssh.SSHCompletedProcess:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for attempt in (1, 2):
            conn = await self._connection(deadline)
            try:
                async with asyncio.timeout_at(deadline):
                    async with self._sessions:
                        try:
                            process = await conn.create_process(
                                command, stdin=asyncssh.DEVNULL, encoding=encoding,
                                errors="replace",
                            )  # fmt: skip
                        except asyncssh.ChannelOpenError as exc:
                            # Nothing ran: the channel never opened. A connection that died
                            # while idle is reopened and the command tried once more.
                            if conn.is_closed():
                                self._drop(conn, exc)
                                if attempt == 1:
                                    continue
                            raise SchedulerUnavailable(
                                f"{what}: cannot open a channel on {self.target}: {exc}"
                            ) from exc
                        try:
                            result = await process.wait(check=False)
                        except asyncio.CancelledError:
                            process.close()
                            raise
            except TimeoutError as exc:
                raise CommandTimeout(f"{what} did not finish in {timeout:.0f}s on "
                                     f"{self.target}") from exc  # fmt: skip
            except (asyncssh.Error, OSError) as exc:
                self._drop(conn, exc)
                raise SchedulerUnavailable(
                    f"{what}: SSH link to {self.target} failed while running: {exc}"
                ) from exc
            if result.exit_status is None and result.exit_signal is None:
                # The channel closed without an exit status: the link dropped mid-command.
                self._drop(conn, ConnectionError("channel closed without exit status"))
                raise SchedulerUnavailable(
                    f"{what}: SSH link to {self.target} dropped while the command ran "
                    "(it may or may not have taken effect)"
                )
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the connection ----------------------------------------------------------------------

    async def _connection(self, deadline: float) -> asyncssh.SSHClientConnection:
        """The live connection, reopened when needed.

        A caller spends at most `connect_timeout` (and never past its own deadline) trying;
        the backoff between attempts is shared, so a caller arriving while the next attempt
        is further off than its budget fails at once instead of queueing.
        """
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        loop = asyncio.get_running_loop()
        deadline = min(deadline, loop.time() + self.settings.connect_timeout)
        try:
            async with asyncio.timeout_at(deadline):
                await self._connect_lock.acquire()
        except TimeoutError:
            raise SchedulerUnavailable(
                f"SSH to {self.target}: still connecting ({self._last_error or 'first attempt'})"
            ) from None
        try:
            while True:
                conn = self._conn
                if conn is not None and not conn.is_closed():
                    return conn
                wait = self._not_before - loop.time()
                if wait > 0:
                    if loop.time() + wait >= deadline:
                        raise SchedulerUnavailable(
                            f"SSH to {self.target} unavailable after {self._failures} "
                            f"attempt(s), next in {wait:.1f}s: {self._last_error}"
                        )
                    await asyncio.sleep(wait)
                budget = min(self.settings.connect_timeout, deadline - loop.time())
                if budget <= 0:
                    raise SchedulerUnavailable(f"SSH to {self.target}: no time left to connect")
                try:
                    self._conn = await asyncio.wait_for(self._open(), budget)
                except (SshHostKeyRejected, SshAuthFailed) as exc:
                    self._failed(exc)
                    raise
                except (TimeoutError, asyncssh.Error, OSError) as exc:
                    if isinstance(exc, TimeoutError):
                        exc = TimeoutError(f"no SSH session within {budget:.1f}s")
                    self._failed(exc)
                    if loop.time() >= deadline - 0.05:
                        raise SchedulerUnavailable(
                            f"SSH to {self.target} failed: {self._last_error}"
                        ) from exc
                    continue
                self.connects += 1
                if self._failures:
                    log.info("SSH to %s re-established after %d failed attempt(s)",
                             self.target, self._failures)  # fmt: skip
                self._failures = 0
                self._not_before = 0.0
                return self._conn
        finally:
            self._connect_lock.release()

    async def _open(self) -> asyncssh.SSHClientConnection:
        s = self.settings
        known_hosts = os.path.expanduser(s.known_hosts or "~/.ssh/known_hosts")
        if not os.path.isfile(known_hosts):
            raise SshHostKeyRejected(
                f"known_hosts file {known_hosts} does not exist: refusing to connect to "
                f"{self.target} without a verified host key"
            )
        options: dict[str, Any] = {
            "port": s.port,
            "username": s.username,
            "known_hosts": known_hosts,
            "config": None,  # ~/.ssh/config must not redirect what the Resurgo config says
            "password_auth": False,
            "kbdint_auth": False,
            "gss_host": None,
            "keepalive_interval": KEEPALIVE_INTERVAL,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
        }
        if s.client_keys:
            options["client_keys"] = [os.path.expanduser(k) for k in s.client_keys]
            options["agent_path"] = None
        try:
            return await asyncssh.connect(s.host, **options)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise SshHostKeyRejected(
                f"host key of {s.host}:{s.port} is not trusted by {known_hosts} ({exc}); "
                "refusing to connect. Verify the key and add it (ssh-keyscan) if it is right"
            ) from exc
        except asyncssh.PermissionDenied as exc:
            raise SshAuthFailed(f"{self.target} refused our key(s): {exc}") from exc

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        delay = min(BACKOFF_MAX, BACKOFF_INITIAL * 2 ** (self._failures - 1))
        delay *= random.uniform(0.8, 1.0)
        self._not_before = asyncio.get_running_loop().time() + delay
        self._last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        log.warning("SSH to %s failed (attempt %d, next in %.1fs): %s",
                    self.target, self._failures, delay, self._last_error)  # fmt: skip

    def _drop(self, conn: asyncssh.SSHClientConnection, exc: BaseException) -> None:
        if self._conn is conn:
            log.warning("SSH link to %s lost: %s", self.target, exc)
            self._conn = None
        conn.abort()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()


def _returncode(result: asyncssh.SSHCompletedProcess) -> int:
    code = result.returncode
    return code if code is not None else -1


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""
