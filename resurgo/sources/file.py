"""The file source: job output files found by a path pattern, read with `logtail`.

The pattern is a glob that may hold Slurm's filename tokens (`sbatch --output`): `%j` (job id),
`%A`/`%a` (array job id / index), `%N` (first node's host name), `%n`, `%t`, `%s`, `%u`, `%x`
(optionally zero-padded, `%5j`) and `%%`; `{job_id}` and `{host}` work too. The job id comes
from `%j` (else `%A`, else Slurm's default name `slurm-<id>.out`), the host from `%N` / `{host}`
or, line by line, from NCCL's `host:pid:tid [dev]` prefix; an `srun -l` label becomes the `task`
label. `.err` files are stream `stderr`, everything else `stdout`.

Files are listed on this host (the controller runs in the cluster); lines are read through the
`CommandRunner`, so the byte cursors, truncation and over-long-line handling are `logtail`'s.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from resurgo.contracts import LogCursor
from resurgo.detect.lines import parse_nccl_prefix, split_srun_label
from resurgo.detect.logtail import read_until_eof
from resurgo.slurm.runner import CommandRunner, LocalRunner
from resurgo.sources.base import (
    FileSourceCursor,
    LabelMapping,
    LogRecord,
    LogStream,
    TimeCursor,
)

_TOKEN = re.compile(r"%(\d{0,2})([jJAaNntsuxX%])|\{(job_id|host)\}")
_SLURM_DEFAULT = re.compile(r"slurm-(\d+)(?:_\d+)?\.(?:out|err)$")
MAX_FILES = 10_000


@dataclass(frozen=True)
class PathInfo:
    path: str
    job_id: str | None
    host: str | None
    stream: str


class PathPattern:
    """A glob with Slurm filename tokens; lists matching files and parses ids out of paths."""

    def __init__(self, pattern: str) -> None:
        if not pattern:
            raise ValueError("empty file pattern")
        self.pattern = os.path.expanduser(pattern)
        self._pieces: list[tuple[str, str]] = []  # ("lit", glob text) | ("tok", token letter)
        pos = 0
        for m in _TOKEN.finditer(self.pattern):
            if m.start() > pos:
                self._pieces.append(("lit", self.pattern[pos : m.start()]))
            if m.group(3):
                self._pieces.append(("tok", "j" if m.group(3) == "job_id" else "N"))
            elif m.group(2) == "%":
                self._pieces.append(("lit", "%"))
            else:
                self._pieces.append(("tok", m.group(2)))
            pos = m.end()
        if pos < len(self.pattern):
            self._pieces.append(("lit", self.pattern[pos:]))
        letters = {v for k, v in self._pieces if k == "tok"}
        self.job_token = next((t for t in ("j", "A", "J") if t in letters), None)
        self.has_host = "N" in letters
        self._regex = re.compile(self._build_regex())

    def _build_regex(self) -> str:
        out: list[str] = []
        defined: set[str] = set()
        for kind, value in self._pieces:
            if kind == "lit":
                out.append(_glob_to_regex(value))
                continue
            if value == self.job_token:
                group, body = "job_id", r"\d+"
            elif value == "N":
                group, body = "host", r"[^/]+?"
            else:
                group, body = "", r"[^/]*?"
            suffix = r"(?:\.\w+)?" if value == "J" else ""
            if not group:
                out.append(body)
            elif group in defined:
                out.append(f"(?P={group}){suffix}")
            else:
                defined.add(group)
                out.append(f"(?P<{group}>{body}){suffix}")
        return "".join(out) + r"\Z"

    def glob(self, job_id: str | None = None) -> str:
        """The glob listing this pattern's files (the job id filled in when given)."""
        parts: list[str] = []
        for kind, value in self._pieces:
            if kind == "lit":
                parts.append(value)
            elif job_id is not None and value == self.job_token:
                parts.append(glob.escape(job_id) + ("*" if value == "J" else ""))
            else:
                parts.append("*")
        return "".join(parts)

    def parse(self, path: str) -> PathInfo | None:
        """Ids carried by a path, or None when the path does not fit the pattern."""
        m = self._regex.match(path)
        if m is None:
            return None
        groups = m.groupdict()
        job_id = groups.get("job_id")
        if job_id is None:
            default = _SLURM_DEFAULT.search(os.path.basename(path))
            job_id = default.group(1) if default else None
        elif job_id.isdigit():
            job_id = str(int(job_id))
        stream = "stderr" if path.endswith(".err") else "stdout"
        return PathInfo(path=path, job_id=job_id, host=groups.get("host"), stream=stream)

    def list(self, job_id: str | None = None, since: datetime | None = None) -> list[PathInfo]:
        """Matching regular files (of `job_id` when given, modified at/after `since`), sorted."""
        out: list[PathInfo] = []
        cutoff = since.timestamp() if since is not None else None
        for path in sorted(glob.glob(self.glob(job_id)))[:MAX_FILES]:
            info = self.parse(path)
            if info is None or (job_id is not None and info.job_id != job_id):
                continue
            try:
                stat = os.stat(path)
            except OSError:
                continue
            if not os.path.isfile(path) or (cutoff is not None and stat.st_mtime < cutoff):
                continue
            out.append(info)
        return out


def _glob_to_regex(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "*":
            out.append(r"[^/]*")
        elif ch == "?":
            out.append(r"[^/]")
        elif ch == "[":
            end = text.find("]", i + 2 if text[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                inner = text[i + 1 : end]
                if inner.startswith("!"):
                    inner = "^" + inner[1:]
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


class FileLogSource:
    """Job output files on this host (see the module docstring)."""

    kind = "file"

    def __init__(
        self,
        pattern: str,
        *,
        runner: CommandRunner | None = None,
        mapping: LabelMapping | None = None,
    ) -> None:
        self.pattern = PathPattern(pattern)
        self.runner: CommandRunner = runner or LocalRunner()
        self.mapping = mapping or LabelMapping()

    async def aclose(self) -> None:
        return None

    async def files(
        self, job_id: str | None = None, since: datetime | None = None
    ) -> list[PathInfo]:
        return await asyncio.to_thread(self.pattern.list, job_id, since)

    def read(
        self,
        job_id: str | None = None,
        cursor: FileSourceCursor | TimeCursor | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        max_records: int | None = None,
    ) -> LogStream:
        """New lines of the job's files; `since` skips files not modified since then."""
        if cursor is not None and not isinstance(cursor, FileSourceCursor):
            raise ValueError(f"a {cursor.kind} cursor cannot resume a file source")
        start = cursor or FileSourceCursor()
        del until  # lines carry no timestamps; the window applies to file modification times

        async def produce(stream: LogStream) -> AsyncIterator[LogRecord]:
            files = dict(start.files)
            delivered = dict(start.delivered)
            count = 0

            def publish() -> None:
                stream.cursor = FileSourceCursor(files=dict(files), delivered=dict(delivered))

            for info in await self.files(job_id, since):
                path = info.path
                batch_start = files.get(path) or LogCursor(path=path)
                skip = delivered.get(path, 0)
                async for got in read_until_eof(self.runner, batch_start):
                    if got.reset:
                        skip = 0
                        batch_start = LogCursor(path=path, inode=got.cursor.inode)
                    last = got.lines[-1][0] if got.lines else None
                    for line_no, text in got.lines:
                        if line_no <= skip:
                            continue
                        if max_records is not None and count >= max_records:
                            stream.truncated = True
                            return
                        if line_no == last:
                            files[path] = got.cursor
                            delivered.pop(path, None)
                        else:
                            files[path] = batch_start
                            delivered[path] = line_no
                        publish()
                        count += 1
                        yield _record(info, line_no, text)
                    files[path] = got.cursor
                    delivered.pop(path, None)
                    publish()
                    batch_start, skip = got.cursor, 0

        return LogStream(produce, start)


def _record(info: PathInfo, line_no: int, text: str) -> LogRecord:
    task, _ = split_srun_label(text)
    host = info.host
    if host is None:
        nccl = parse_nccl_prefix(text)
        host = nccl.host if nccl is not None else None
    labels = {"path": info.path, "stream": info.stream}
    if info.job_id is not None:
        labels["job_id"] = info.job_id
    if host is not None:
        labels["host"] = host
    if task is not None:
        labels["task"] = str(task)
    return LogRecord(
        position=line_no,
        text=text,
        labels=labels,
        job_id=info.job_id,
        host=host,
        stream=info.stream,
        time_ns=None,
    )
