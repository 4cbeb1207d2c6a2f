"""Open a job's output file the way a root process must open a path any user chose.

The job's `StdOut` path is written by the job's owner, and the controller reads it as root. A
plain `open()` would follow a symlink to another user's file, block forever on a FIFO (stranding
a thread per retry) and read whatever the path names. Here a read:

- opens with `O_NOFOLLOW | O_NONBLOCK` (a symlink as the last component is refused, a FIFO or
  device does not block the open) and then checks the open file itself (`fstat`, no race with
  a rename): a regular file only, owned by the job's user;
- runs on a small executor of its own, so a slow shared file system stalls at most those
  threads, never the default pool the rest of the process shares, and gives up after a bound.

A refusal is `OutputRefused`, whose message says why (for the log and the audit trail).
"""

from __future__ import annotations

import asyncio
import errno
import os
import pwd
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from resurgo.errors import ResurgoError

READ_THREADS = 4
# A read or stat that has not returned after this long is given up on (its thread may stay
# stuck on a dead mount; the bounded pool caps how many can).
IO_TIMEOUT = 30.0
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

T = TypeVar("T")
_executor: ThreadPoolExecutor | None = None


class OutputRefused(ResurgoError):
    """The job's output path is not a file Resurgo will read (the message says why).

    It never leaves the controller: the watch keeps watching Slurm state without the file, and
    attribution goes on without its lines; both say why in what they report."""


def executor() -> ThreadPoolExecutor:
    """The output-file pool (created on first use, shared by every watch in the process)."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="resurgo-output")
    return _executor


async def off_loop(fn: Callable[[], T], what: str) -> T:
    """Run blocking file I/O on the output pool, bounded by IO_TIMEOUT."""
    future = asyncio.get_running_loop().run_in_executor(executor(), fn)
    try:
        return await asyncio.wait_for(future, IO_TIMEOUT)
    except TimeoutError:
        raise TimeoutError(f"{what} did not finish in {IO_TIMEOUT:.0f}s") from None


def owner_uid(owner: str | int) -> int:
    """The uid of the job's user (Slurm's `UserId`: a name, or a bare number)."""
    if isinstance(owner, int):
        return owner
    if owner.isdigit():
        return int(owner)
    if not owner:
        raise OutputRefused("the job's user is unknown, so its output file is not read")
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise OutputRefused(f"the job's user {owner!r} is not known on this host") from None


def open_checked(path: str, owner: str | int | None) -> int:
    """A descriptor for `path` if it is a regular file owned by `owner` (None: any owner).

    Raises FileNotFoundError for a missing file (it may appear later) and `OutputRefused`
    for anything Resurgo must not read."""
    uid = None if owner is None else owner_uid(owner)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputRefused(f"{path} is a symbolic link; output files are read only "
                                "when they are the file itself") from None  # fmt: skip
        if exc.errno == errno.ENOTDIR:
            raise FileNotFoundError(errno.ENOENT, "not a directory on the path", path) from None
        raise OutputRefused(f"{path} cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        check_file(path, info, uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_file(path: str, info: os.stat_result, uid: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = _kind(info.st_mode)
        raise OutputRefused(f"{path} is a {kind}, not a regular file; it is not read")
    if uid is not None and info.st_uid != uid:
        raise OutputRefused(
            f"{path} is owned by uid {info.st_uid}, not by the job's user (uid {uid}); "
            "it is not read"
        )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symbolic link"),
    ):
        if test(mode):
            return name
    return "special file"


def read_checked(
    path: str, offset: int, max_bytes: int, owner: str | int | None
) -> tuple[bytes, int, int]:
    """Up to max_bytes from offset of a checked output file: (data, size, inode)."""
    fd = open_checked(path, owner)
    try:
        info = os.fstat(fd)
        if offset > info.st_size:
            return b"", info.st_size, info.st_ino
        return os.pread(fd, max_bytes, offset), info.st_size, info.st_ino
    finally:
        os.close(fd)


def stat_paths(paths: list[str]) -> dict[str, tuple[int, int] | None]:
    """(size, inode) of each path itself (a symlink is not followed), None when missing."""
    stats: dict[str, tuple[int, int] | None] = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            stats[path] = None
        except OSError:
            continue
        else:
            stats[path] = (st.st_size, st.st_ino)
    return stats
