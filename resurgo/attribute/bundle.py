"""Evidence bundles: reading a directory of job, scheduler, node and metrics text.

A bundle directory holds:

- `job.log` (required): the job's output, possibly with `srun -l` labels or NCCL host prefixes;
- `scheduler.txt` (optional): Slurm facts as text (see `resurgo.attribute.scheduler`);
- `metrics.txt` (optional): Prometheus text exposition, e.g. DCGM samples with a host label;
- `<source>_<hostname>.txt` (optional): node-side logs, source one of `NODE_SOURCES`, or a
  diagnostic tool's output named after the tool (`nvidia-smi_gpu07.txt`, `ibstat_gpu07.txt`):
  the `node` source's diagnostics (attribution-labels.md: nvidia-smi -q, ibstat, lspci,
  ipmitool, nhc) under the name of the command that printed them.

Everything is decoded leniently (invalid UTF-8, control characters, over-long lines) with the
same normalisation the live watcher uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from resurgo.contracts import LogLine
from resurgo.detect.lines import decode_line
from resurgo.errors import PermanentError

NODE_SOURCES = ("dmesg", "journal", "syslog", "console", "sel", "slurmd", "node")
# Node diagnostic commands whose output a bundle may name after the command (the `node` source).
DIAGNOSTIC_TOOLS = (
    "nvidia-smi", "nvidia_smi", "dcgmi", "ibstat", "ibstatus", "perfquery", "ibportstate",
    "ibv_devinfo", "mlxlink", "lspci", "ipmitool", "nhc", "cpupower", "tuned-adm",
)  # fmt: skip
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINES = 200_000
_NODE_FILE = re.compile(
    rf"^(?P<source>{'|'.join(map(re.escape, (*DIAGNOSTIC_TOOLS, *NODE_SOURCES)))})[_-]"
    r"(?P<host>[A-Za-z0-9][\w.-]*?)(?:\.(?:txt|log))?$"
)


def is_diagnostic(source: str) -> bool:
    """A node file holding diagnostic output (`node_<host>.txt` or a tool-named one)."""
    return source.startswith(tuple(f"{t}_" for t in ("node", *DIAGNOSTIC_TOOLS)))


class BundleError(PermanentError):
    """The bundle cannot be used (missing, unreadable or empty job log)."""


@dataclass
class Bundle:
    path: Path | None
    job: list[LogLine]
    scheduler: list[LogLine] = field(default_factory=list)
    metrics: list[LogLine] = field(default_factory=list)
    node_logs: dict[str, list[LogLine]] = field(default_factory=dict)
    """Host name (as in the file name) → its lines from every node-side file."""


def read_lines(path: Path, source: str, *, max_lines: int = MAX_LINES) -> list[LogLine]:
    """Decode a text file into LogLines (1-based line numbers). Keeps head and tail if huge."""
    with path.open("rb") as fh:
        data = fh.read(MAX_FILE_BYTES)
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    out = [LogLine(source=source, line_no=n, text=decode_line(b)) for n, b in enumerate(raw, 1)]
    if len(out) > max_lines:
        half = max_lines // 2
        out = out[:half] + out[-half:]
    return out


def load_bundle(path: str | Path) -> Bundle:
    """Read a bundle directory; `BundleError` says what is wrong with it."""
    root = Path(path)
    if not root.exists():
        raise BundleError(f"{root}: no such directory")
    if not root.is_dir():
        raise BundleError(f"{root}: not a directory")
    job_file = root / "job.log"
    if not job_file.is_file():
        raise BundleError(f"{root}: no job.log (the job's output is required)")
    try:
        job = read_lines(job_file, "job.log")
    except OSError as exc:
        raise BundleError(f"{job_file}: cannot read: {exc.strerror or exc}") from exc
    if not any(line.text.strip() for line in job):
        raise BundleError(f"{job_file}: empty")
    bundle = Bundle(path=root, job=job)
    for name, attr in (("scheduler.txt", "scheduler"), ("metrics.txt", "metrics")):
        file = root / name
        if file.is_file():
            try:
                setattr(bundle, attr, read_lines(file, name))
            except OSError as exc:
                raise BundleError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    for file in sorted(root.iterdir()):
        m = _NODE_FILE.match(file.name)
        if not m or not file.is_file():
            continue
        try:
            lines = read_lines(file, file.name)
        except OSError as exc:
            raise BundleError(f"{file}: cannot read: {exc.strerror or exc}") from exc
        bundle.node_logs.setdefault(m.group("host"), []).extend(lines)
    return bundle


# ------------------------------------------------------------------------------ timestamps
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}
_DMESG_T = re.compile(
    r"^\[\s*(?:\w{3}\s+)?(?P<mon>\w{3})\s+(?P<day>\d{1,2})\s+(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
    r"\s+(?P<year>\d{4})\s*\]"
)
_ISO = re.compile(
    r"^\[?(?P<year>\d{4})-(?P<mon>\d\d)-(?P<day>\d\d)[T ](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
)
_SYSLOG = re.compile(
    r"^(?P<mon>\w{3})\s+(?P<day>\d{1,2})\s+(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.\d{1,9})?\s"
)  # (switch OSes such as SONiC add microseconds)
_UPTIME = re.compile(r"^\[\s*(?P<secs>\d{1,10}\.\d{1,9})\]")
# A dated time stamp anywhere near a line's start, ISO or with slashes (`2024-05-01 12:00:03`,
# `2024-05-01T12:00:03`, `%Y/%m/%d %H:%M:%S` of Python logging's datefmt and Go's log package),
# under any launcher's prefixes.
_STAMP = re.compile(r"\b(\d{4}[-/]\d\d[-/]\d\d)[T ](\d\d:\d\d:\d\d)\b")


def stamp_in(text: str, within: int = 400) -> datetime | None:
    """The first dated time stamp in the line's first `within` characters (naive)."""
    m = _STAMP.search(text[:within])
    if m is None:
        return None
    try:
        return datetime.fromisoformat(f"{m.group(1).replace('/', '-')} {m.group(2)}")
    except ValueError:
        return None


def line_time(
    text: str, *, year: int | None = None, boot: datetime | None = None
) -> datetime | None:
    """The (naive) wall-clock time a node-side log line carries, if it carries one."""
    try:
        if m := _ISO.match(text):
            return datetime(
                int(m["year"]), int(m["mon"]), int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"])
            )
        if (m := _DMESG_T.match(text)) and m["mon"] in _MONTHS:
            return datetime(
                int(m["year"]), _MONTHS[m["mon"]], int(m["day"]), int(m["h"]), int(m["m"]),
                int(m["s"]),
            )  # fmt: skip
        # (the year and boot time first: without them these two formats give no time)
        if year is not None and (m := _SYSLOG.match(text)) and m["mon"] in _MONTHS:
            return datetime(
                year, _MONTHS[m["mon"]], int(m["day"]), int(m["h"]), int(m["m"]), int(m["s"])
            )
        if boot is not None and (m := _UPTIME.match(text)):
            from datetime import timedelta

            return boot.replace(tzinfo=None) + timedelta(seconds=float(m["secs"]))
    except (ValueError, OverflowError):
        return None
    return None
