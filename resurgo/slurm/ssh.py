"""SSH mode: run Slurm commands on a login node over one reused asyncssh connection.

- **Authentication** by key only (`client_keys`; none given: the user's default keys and agent).
  The server's host key must be in `known_hosts` (default `~/.ssh/known_hosts`); an unknown or
  changed key is refused (`SshHostKeyRejected`), never accepted on first use.
- **One connection, many channels.** Commands run concurrently on separate channels, at most
  `max_sessions` at a time (OpenSSH's `MaxSessions` defaults to 10 per connection).
- **Reconnect with exponential backoff.** A dropped link is noticed by the next command (or by
  keepalives) and reopened (stamina runs the attempts); failed attempts back off 0.5 s, 1 s,
  2 s ... up to 30 s (less up to 20 % jitter), shared by every caller, so a hundred waiting
  activities do not hammer the login node.
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
import stamina

from resurgo.slurm.errors import CommandTimeout, SchedulerUnavailable
from resurgo.slurm.output_files import OutputRefused, owner_uid
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

# The remote half of `read_file` (argv: path offset max_bytes owner-or-empty): the same checks
# as resurgo.slurm.output_files, on the login node. Exit 2 "missing:", exit 3 "refused:".
_REMOTE_READ = """
import errno, os, pwd, stat, sys
path, offset, size, owner = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def stop(code, why):
    sys.stderr.write(why + "\\n"); sys.exit(code)
try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
except (FileNotFoundError, NotADirectoryError) as e:
    stop(2, "missing: " + e.strerror)
except OSError as e:
    stop(3, "refused: " + ("it is a symbolic link; output files are read only when they are "
         "the file itself" if e.errno == errno.ELOOP else "cannot be opened: " + e.strerror))
st = os.fstat(fd)
if not stat.S_ISREG(st.st_mode):
    kinds = {stat.S_IFIFO: "FIFO", stat.S_IFDIR: "directory", stat.S_IFCHR: "character device",
             stat.S_IFBLK: "block device", stat.S_IFSOCK: "socket"}
    stop(3, "refused: it is a %s, not a regular file; it is not read"
         % kinds.get(stat.S_IFMT(st.st_mode), "special file"))
if owner:
    try:
        uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
    except KeyError:
        stop(3, "refused: the job's user %r is not known on the login node" % owner)
    if st.st_uid != uid:
        stop(3, "refused: it is owned by uid %d, not by the job's user (uid %d); it is not read"
             % (st.st_uid, uid))
out = sys.stdout.buffer
out.write(b"%d %d\\n" % (st.st_size, st.st_ino))
if offset < st.st_size:
    out.write(os.pread(fd, size, offset))
"""


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

    async def read_file(
        self, path: str, offset: int, max_bytes: int, *, owner: str | int | None = None
    ) -> tuple[bytes, int, int]:
        """Up to max_bytes from offset, with the file's size and inode, in one round trip.

        The login node's python3 opens the path with the checks `output_files` makes locally
        (O_NOFOLLOW|O_NONBLOCK, then fstat: a regular file owned by `owner`), so a symlink,
        FIFO or another user's file is refused there (`OutputRefused`), never read as root."""
        if offset < 0 or max_bytes < 0:
            raise ValueError(f"bad read window offset={offset} max_bytes={max_bytes}")
        if owner is not None and not str(owner):
            owner_uid(owner)  # raises OutputRefused: the job's user is unknown
        # -I -S: no user site, no PYTHON* variables, no site import (and a faster start).
        argv = ["python3", "-I", "-S", "-c", _REMOTE_READ, path, str(offset), str(max_bytes),
                "" if owner is None else str(owner)]  # fmt: skip
        timeout = self.settings.command_timeout
        command = self.remote_command(argv, timeout)
        result = await self._exec(command, timeout, f"read {path}", encoding=None)
        out = result.stdout if isinstance(result.stdout, bytes) else b""
        err = result.stderr.decode("utf-8", "replace") if isinstance(result.stderr, bytes) else ""
        header, newline, data = out.partition(b"\n")
        if result.exit_status != 0 or not newline:
            if result.exit_status == 2 and err.startswith("missing:"):
                raise FileNotFoundError(2, f"{err[8:].strip()} (on {self.target})", path)
            if result.exit_status == 3 and err.startswith("refused:"):
                raise OutputRefused(f"{path} on {self.target}: {err[8:].strip()[:300]}")
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
            # Without -L: the path itself, as the local runner sees it (symlinks not followed).
            command = "LC_ALL=C stat -c '%s %i %n' -- " + " ".join(map(shlex.quote, chunk))
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
            conn = self._conn
            if conn is not None and not conn.is_closed():
                return conn  # another caller reconnected while this one queued
            # A caller arriving while the shared backoff runs waits its turn, or fails at once
            # when the next attempt is further off than its budget.
            wait = self._not_before - loop.time()
            if wait > 0:
                if loop.time() + wait >= deadline:
                    raise SchedulerUnavailable(
                        f"SSH to {self.target} unavailable after {self._failures} "
                        f"attempt(s), next in {wait:.1f}s: {self._last_error}"
                    )
                await asyncio.sleep(wait)

            def again(exc: BaseException) -> bool | float:
                # stamina runs the attempts; the wait between them is the backoff every caller
                # shares (`_failed`: exponential, jittered), not a count of this caller's own,
                # so callers queued on the lock do not each start over at the initial delay.
                # No retry past the caller's deadline, nor for a key the server refuses.
                if not isinstance(exc, (TimeoutError, asyncssh.Error, OSError)):
                    return False
                wait = max(self._not_before - loop.time(), 0.001)
                return wait if loop.time() + wait < deadline - 0.05 else False

            try:
                async for attempt in stamina.retry_context(on=again, attempts=None, timeout=None):
                    with attempt:
                        budget = min(self.settings.connect_timeout, deadline - loop.time())
                        if budget <= 0:
                            raise SchedulerUnavailable(
                                f"SSH to {self.target}: no time left to connect"
                            )
                        try:
                            self._conn = await asyncio.wait_for(self._open(), budget)
                        except TimeoutError:
                            self._failed(TimeoutError(f"no SSH session within {budget:.1f}s"))
                            raise
                        except (SshHostKeyRejected, SshAuthFailed, asyncssh.Error, OSError) as e:
                            self._failed(e)
                            raise
            except (TimeoutError, asyncssh.Error, OSError) as exc:
                raise SchedulerUnavailable(
                    f"SSH to {self.target} failed: {self._last_error}"
                ) from exc
            self.connects += 1
            if self._failures:
                log.info("SSH to %s re-established after %d failed attempt(s)",
                         self.target, self._failures)  # fmt: skip
            self._failures = 0
            self._not_before = 0.0
            assert self._conn is not None
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
