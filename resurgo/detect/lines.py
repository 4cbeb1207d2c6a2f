"""Normalisation of untrusted log lines: decoding, control characters and launcher prefixes.

Job output is written by arbitrary programs, so a "line" may hold invalid UTF-8, NULs, terminal
escape sequences, tqdm carriage returns or megabytes without a newline. Everything here is pure,
never raises on any input and costs a few C-level string operations per line.

Prefixes handled (in the order launchers add them):
- `srun -l` task labels: `0: text`, ` 12: text` (srun pads the number to a common width);
- PyTorch rank prefixes: `[rank3]: text`, `[rank3]:[E ...] text`, `[Rank 3] text`, also behind
  a host (`[node-7][rank3]: text`);
- NCCL's own `host:pid:tid [dev] NCCL ...` prefix (parsed, not stripped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, NamedTuple

MAX_LINE_BYTES = 8 * 1024
"""Longest line kept (bytes of input); the head is kept, the rest dropped. No real error line
is this long, and every detector's cost grows with it (a line of registry literals costs the
scanner ~20 ms per KiB)."""

MAX_LINE_CHARS = MAX_LINE_BYTES
"""Longest line kept by `sanitize_line` (characters)."""

_SRUN_LABEL = re.compile(r" {0,8}(\d{1,7}): ", re.ASCII)
_RANK_PREFIX = re.compile(r"\[[Rr]ank ?(\d{1,7})\](?::? ?)", re.ASCII)
_COMMON = re.compile(r"(?: {0,8}(\d{1,7}): )?(?:\[[Rr]ank ?(\d{1,7})\](?::? ?))?", re.ASCII)
_LOCAL_PREFIX = re.compile(r"\[default(\d{1,5})\]:? ?", re.ASCII)
# A wrapper's per-task label (`[task 3] Traceback ...`: a job script prefixing each srun
# task's output with $SLURM_PROCID, the way `srun --label` prints `3: `).
_TASK_PREFIX = re.compile(r"\[(?:task|proc|procid) ?(\d{1,7})\]:? ?", re.ASCII)
_MPI_PREFIX = re.compile(r"\[\d{1,7},(\d{1,7})\]<std(?:out|err)>: ?", re.ASCII)
# UCX's log prefix (openucx/ucx src/ucs/debug/log.c: `[%lu.%06lu] [%s:%-5d:%d]`, epoch seconds,
# then host:pid:thread) and Open MPI's opal_output prefix (`[host:pid] `): a time and a host.
_EPOCH_PREFIX = re.compile(r"\[(?P<epoch>\d{10}\.\d{1,9})\]\s+", re.ASCII)
_HOST_PID_PREFIX = re.compile(
    r"\[(?P<host>[A-Za-z][A-Za-z0-9.-]{0,62}):\d{1,9}(?::\d{1,9})?\]\s+", re.ASCII
)
# Host names: letters, digits, dots and hyphens (never an underscore), at most 63 per label.
# (Directly followed by a rank label too: `[node-773][rank13]: ` from a wrapper that puts the
# host before PyTorch's own rank prefix.)
_BRACKET_HOST = re.compile(
    r"\[(?P<host>[A-Za-z][A-Za-z0-9.-]{0,62})\](?::? |(?=\[(?:[Rr]ank ?|default)\d))", re.ASCII
)
# Ray's prefix on the lines its workers print (`(WorkerDict pid=231421)`, `(RayWorkerWrapper
# pid=60211, ip=10.30.4.4)`, `(raylet, ip=10.1.4.43)`; vLLM's `(VllmWorker TP0 pid=35532)`):
# the address names the host its process ran on.
_RAY_PREFIX = re.compile(
    r"\((?:raylet|gcs_server|(?:[A-Za-z_][\w.:-]{0,60}(?: [\w.:-]{1,20}){0,2} )?pid=\d{1,9})"
    r"(?:, ip=(?P<ip>[0-9A-Fa-f.:]{3,39}))?\)(?: |$)",
    re.ASCII,
)
_COLON_HOST = re.compile(r"(?P<host>[A-Za-z][A-Za-z0-9.-]{0,62}): (?=\S)", re.ASCII)
# Names that look like hosts but are devices, log levels or counters.
_NOT_HOST = re.compile(
    r"(?i)(?:(?:eth|ib|bond|en[ops]|ens|eno|wlan|nvme|md|loop|mlx\d|hfi|cuda|nvidia)\d|"
    r"(?:gpu|cpu|dev|sd[a-z])\d?$|(?:rank|local|default|step|iter|epoch|batch|worker|proc|"
    r"thread|task|job|error|warn|info|debug|fatal|crit|notice|python|torch|nccl|gloo|mpi|stage|nvidia|"
    r"layer|shard)|(?:[etpd]p|fp|bf|int|v|s)\d{1,2}$|.*(?:error|exception|warn))",
    re.ASCII,
)
_JSON_TEXT = ("line", "_msg", "msg", "message", "log", "MESSAGE", "text")
_JSON_HOST = ("host", "hostname", "node", "nodename", "instance", "_HOSTNAME", "kubernetes_host")
_JSON_TIME = ("ts", "_time", "time", "timestamp", "@timestamp", "__REALTIME_TIMESTAMP")
_MONTHS = frozenset(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
)
# Leading time stamps: ISO 8601 / Python logging (`2024-05-01 12:00:00,123`, `...T...Z`),
# syslog (`May  1 12:00:00`), bare `12:00:00.123`, glog (`I0501 12:00:00.123456`), in
# brackets or not, followed by an optional separator (Open MPI's --timestamp-output: `...Z: `).
_TIME_PREFIX = re.compile(
    r"\[?(?P<time>\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?|"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,9})?|"
    r"\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)\]?(?: ?[-|] ?|: | )",
    re.ASCII,
)
# glog/absl's own line prefix (`I1216 09:16:24.842427 88121 trainer.py:606] `: severity, date,
# time, thread id, file:line), bare as absl and glog print it or in brackets as PyTorch's c10d
# does (`[W724 13:10:15.447000 20811 torch/distributed/run.py:793] `).
_GLOG_PREFIX = re.compile(
    r"\[?[IWEF](?P<time>\d{3,4} \d\d:\d\d:\d\d(?:\.\d{1,9})?) {1,8}\d{1,10} "
    r"[\w./-]{1,200}:\d{1,7}\] *",
    re.ASCII,
)
_NCCL_PREFIX = re.compile(
    r"(?=[\w.-]{0,253}[A-Za-z])(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
    r":(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) "
    r"\[(?P<device>\d{1,4})\] ",
    re.ASCII,
)
# What any NCCL prefix holds (`:<tid> [<dev>] `): a line without it needs no prefix peeling.
_NCCL_GATE = re.compile(r"\d \[\d{1,4}\] ", re.ASCII)
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

# C0 controls except TAB become nothing; CR/LF/VT/FF and Unicode line separators become a space
# (a tqdm bar rewritten with "\r" stays one readable line); DEL and C1 controls are dropped.
_CONTROL_TABLE: dict[int, str | None] = {c: None for c in range(0x20)}
_CONTROL_TABLE.update({c: None for c in range(0x7F, 0xA0)})
_CONTROL_TABLE.update({ord("\t"): "\t", ord("\r"): " ", ord("\n"): " ", 0x0B: " ", 0x0C: " "})
_CONTROL_TABLE.update({0x2028: " ", 0x2029: " ", 0xFEFF: None})
_CONTROL_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in _CONTROL_TABLE if c != 9) + "]")


class LinePrefix(NamedTuple):
    """What `strip_prefixes` found: the srun task label, the rank and where the body starts."""

    task: int | None
    rank: int | None
    body: str
    offset: int
    """Index in the original line where `body` starts."""
    host: str | None = None
    """The host a `[host]`, `host:` or pdsh-style prefix names (as printed)."""
    local_rank: int | None = None
    """torchrun's `[defaultN]:` label: the local rank on its node."""
    time: str | None = None
    """A leading time stamp, as printed (`2024-05-01 12:00:00,123`, `[12:00:00]`...)."""


# A NamedTuple's own constructor is a Python function; this one is C (all fields given).
_new = tuple.__new__


class NcclPrefix(NamedTuple):
    """The `host:pid:tid [dev] ` prefix NCCL puts on its INFO/WARN lines."""

    host: str
    pid: int
    tid: int
    device: int
    rest: str
    """The text after the prefix, e.g. `NCCL WARN ...` or `transport/net_ib.cc:1696 NCCL WARN`."""


def sanitize_line(text: str, max_chars: int = MAX_LINE_CHARS) -> str:
    """Make one already-decoded line safe to match and store.

    Keeps at most `max_chars` characters (the head), removes ANSI escape sequences and control
    characters (TAB kept; CR, LF and other line breaks become spaces) and trailing whitespace.
    """
    if max_chars >= 0 and len(text) > max_chars:
        text = text[:max_chars]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if _CONTROL_RE.search(text) is not None:
        text = text.translate(_CONTROL_TABLE)
    return text.rstrip()


def decode_line(raw: bytes | bytearray | memoryview, max_bytes: int = MAX_LINE_BYTES) -> str:
    """Decode one raw line (with or without its newline) from a job's output.

    Invalid UTF-8 becomes U+FFFD, control characters and escape sequences are removed, and only
    the first `max_bytes` bytes are looked at (a character cut by the limit is dropped).
    """
    data = bytes(raw[:max_bytes]) if max_bytes >= 0 else bytes(raw)
    text = data.decode("utf-8", errors="replace")
    if max_bytes >= 0 and len(raw) > max_bytes and text.endswith("\ufffd"):
        text = text.rstrip("\ufffd")
    return sanitize_line(text, max_chars=-1)


def split_srun_label(line: str) -> tuple[int | None, str]:
    """Split an `srun -l` task label: `" 3: text"` → `(3, "text")`; no label → `(None, line)`."""
    m = _SRUN_LABEL.match(line)
    if m is None:
        return None, line
    return int(m.group(1)), line[m.end() :]


_MEMO: ContextVar[dict[str, LinePrefix] | None] = ContextVar("resurgo_line_prefixes", default=None)
MEMO_MAX_LINES = 1_000_000
"""Distinct lines one `memoised_prefixes` block remembers at most (then it computes again)."""
_RESULTS: ContextVar[dict[str, dict[str, Any]] | None] = ContextVar(
    "resurgo_line_results", default=None
)


def block_memo(name: str) -> dict[str, Any] | None:
    """Inside a `memoised_prefixes` block, the memory of the per-line function `name` (text →
    its result; the caller stores at most MEMO_MAX_LINES); None outside any block. For
    functions of one line's text that several passes call on the same lines."""
    results = _RESULTS.get()
    if results is None:
        return None
    memo = results.get(name)
    if memo is None:
        memo = results[name] = {}
    return memo


@contextmanager
def memoised_prefixes() -> Iterator[None]:
    """Within this block (or function, as a decorator), `strip_prefixes` computes each distinct
    line once. Attribution reads every line of an attempt in several passes (who ran where,
    the event scan, series, stragglers...); peeling the prefixes again in each pass was a third
    of its time. The memory belongs to the block (per thread and task) and is bounded."""
    if _MEMO.get() is not None:  # nested: the outer block's memory serves
        yield
        return
    token = _MEMO.set({})
    results = _RESULTS.set({})
    try:
        yield
    finally:
        _RESULTS.reset(results)
        _MEMO.reset(token)


def strip_prefixes(line: str) -> LinePrefix:
    """Peel any stack of launcher prefixes off a line and report what they said.

    Handled in any order and combination (launchers nest them: srun adds its label outside
    pdsh's host, torchrun its rank inside): `N: ` srun labels, `[host]` / `host: ` (pdsh,
    DeepSpeed, Lightning, site wrappers), `[rankN]:` / `[Rank N]` (PyTorch), `[defaultN]:`
    (torchrun's local rank), `[1,3]<stderr>:` (mpirun), and a leading time stamp. A host
    prefix must look like a host name (letters, a digit, no underscore, not a device or a
    log level), so `ib0: link down` or `ERROR: x` keep their text.
    """
    memo = _MEMO.get()
    if memo is None:
        return _strip_prefixes(line)
    found = memo.get(line)
    if found is None:
        found = _strip_prefixes(line)
        if len(memo) < MEMO_MAX_LINES:
            memo[line] = found
    return found


def _strip_prefixes(line: str) -> LinePrefix:
    if not line:
        return _new(LinePrefix, (None, None, line, 0, None, None, None))
    first = line[0]
    if first == "{" and (record := _json_record(line)) is not None:
        return record
    task: int | None = None
    rank: int | None = None
    host: str | None = None
    local: int | None = None
    when: str | None = None
    offset = 0
    # Fast path for the common stack (`12: [rank3]: text`, `[rank3]: text`) and plain text
    # (every line of a job's output comes through here, several times). `_COMMON` can only
    # match something at a space, a `[` or an ASCII digit.
    if (first == " " or first == "[" or "0" <= first <= "9") and (
        common := _COMMON.match(line)
    ) is not None:
        if common.group(1) is not None:
            task = int(common.group(1))
        if common.group(2) is not None:
            rank = int(common.group(2))
        offset = common.end()
    c = line[offset : offset + 1]
    if not (
        c == "["
        or c == "{"
        or c == "("
        or c.isdigit()
        or (c.isalpha() and _maybe_more(line, offset))
    ):
        if offset == 0:
            return _new(LinePrefix, (None, None, line, 0, None, None, None))
        return _new(LinePrefix, (task, rank, line[offset:], offset, None, None, None))
    for _ in range(8):
        c = line[offset : offset + 1]
        if c == "[":
            if (r := _RANK_PREFIX.match(line, offset)) is not None:
                if rank is None:
                    rank = int(r.group(1))
                offset = r.end()
                continue
            if (d := _LOCAL_PREFIX.match(line, offset)) is not None:
                if local is None:
                    local = int(d.group(1))
                offset = d.end()
                continue
            if (tp := _TASK_PREFIX.match(line, offset)) is not None:
                if task is None:
                    task = int(tp.group(1))
                offset = tp.end()
                continue
            if (mp := _MPI_PREFIX.match(line, offset)) is not None:
                if rank is None:
                    rank = int(mp.group(1))
                offset = mp.end()
                continue
            if (t := _TIME_PREFIX.match(line, offset)) is not None:
                when = when or t.group("time")
                offset = t.end()
                continue
            if line[offset + 1 : offset + 2] in ("I", "W", "E", "F") and (
                g := _GLOG_PREFIX.match(line, offset)
            ):
                when = when or g.group("time")
                offset = g.end()
                continue
            if (h := _BRACKET_HOST.match(line, offset)) is not None and _host_like(h["host"]):
                host = host or h.group("host")
                offset = h.end()
                continue
            if (e := _EPOCH_PREFIX.match(line, offset)) is not None:
                when = when or _json_time(e.group("epoch"))
                offset = e.end()
                continue
            if (hp := _HOST_PID_PREFIX.match(line, offset)) is not None and _host_like(hp["host"]):
                host = host or hp.group("host")
                offset = hp.end()
                continue
            break
        if c == "(":
            if (ray := _RAY_PREFIX.match(line, offset)) is not None:
                host = host or ray.group("ip")
                offset = ray.end()
                continue
            break
        if c.isdigit() or c == " ":
            if task is None and (m := _SRUN_LABEL.match(line, offset)) is not None:
                task = int(m.group(1))
                offset = m.end()
                continue
            if c.isdigit() and (t := _TIME_PREFIX.match(line, offset)) is not None:
                when = when or t.group("time")
                offset = t.end()
                continue
            break
        if c.isalpha():
            if c in "IWEF" and (g := _GLOG_PREFIX.match(line, offset)) is not None:
                when = when or g.group("time")
                offset = g.end()
                continue
            if line[offset : offset + 3] in _MONTHS and (t := _TIME_PREFIX.match(line, offset)):
                when = when or t.group("time")
                offset = t.end()
                continue
            if (
                ": " in line[offset : offset + 66]
                and (h := _COLON_HOST.match(line, offset)) is not None
                and h["host"].islower()
                and _host_like(h["host"])
            ):
                # Lower case only: `jinja2.exceptions.TemplateError: ...` is an exception,
                # `MyLogger2: ...` a logger, where pdsh prints host names as Slurm spells them.
                host = host or h.group("host")
                offset = h.end()
                continue
        break
    if offset == 0:
        return _new(LinePrefix, (None, None, line, 0, None, None, None))
    return _new(LinePrefix, (task, rank, line[offset:], offset, host, local, when))


def _json_record(line: str) -> LinePrefix | None:
    """A log shipper's JSON record (Loki, VictoriaLogs, Fluent Bit, journald export): its
    message field is the line, with host and time from their fields (epoch `ts` included).
    A trainer's own JSON metrics line (`{"step": 10, "loss": 1.2}`) has no message field and
    stays as it is."""
    if not any(f'"{key}"' in line for key in _JSON_TEXT):
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    text = next((v for k in _JSON_TEXT if isinstance(v := data.get(k), str)), None)
    if text is None:
        return None
    raw_labels = data.get("labels")
    labels: dict[str, object] = raw_labels if isinstance(raw_labels, dict) else {}
    fields = {**labels, **data}
    host = next((v for k in _JSON_HOST if isinstance(v := fields.get(k), str) and v), None)
    when = next((_json_time(v) for k in _JSON_TIME if (v := fields.get(k)) is not None), None)
    text = sanitize_line(text)
    inner = strip_prefixes(text) if text[:1] != "{" else LinePrefix(None, None, text, 0)
    found = line.find(inner.body)
    return LinePrefix(
        inner.task,
        inner.rank,
        inner.body,
        found if found >= 0 else 0,
        inner.host or host,
        inner.local_rank,
        inner.time or when,
    )


def _json_time(value: object) -> str | None:
    """An ISO time for a record's time field: epoch seconds/ms/ns (numbers or digit strings)
    become UTC ISO 8601; other strings are kept as printed."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        if re.fullmatch(r"\d{9,19}(?:\.\d+)?", value):
            number = float(value)
        else:
            return value[:64] or None
    if number is None:
        return None
    while number > 1e11:  # ms, us, ns → s
        number /= 1000.0
    try:
        return datetime.fromtimestamp(number, tz=UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _maybe_more(line: str, offset: int) -> bool:
    """Whether a line going on with a letter may still carry a host or time prefix."""
    return (
        line[offset : offset + 3] in _MONTHS
        or ": " in line[offset : offset + 66]
        or (line[offset] in "IWEF" and line[offset + 1 : offset + 5].isdigit())  # (glog)
    )


def _host_like(name: str) -> bool:
    return (
        any(ch.isdigit() for ch in name) and not name[0].isdigit() and _NOT_HOST.match(name) is None
    )


def rank_of(line: str) -> int | None:
    """The rank named by a leading `[rankN]:` / `[Rank N]` prefix (after any srun label)."""
    return strip_prefixes(line).rank


def parse_nccl_prefix(line: str) -> NcclPrefix | None:
    """Parse NCCL's `host:pid:tid [dev] ` prefix, after any srun label or rank prefix."""
    # The body is a suffix of the line, except for a shipper's JSON record (decoded text).
    # (`"] "` first: the gate's one literal, absent from most lines, costs less than its regex)
    if line[:1] != "{" and ("] " not in line or _NCCL_GATE.search(line) is None):
        return None
    pre = strip_prefixes(line)
    m = _NCCL_PREFIX.match(pre.body)
    if m is None:
        return None
    return NcclPrefix(
        host=m.group("host"),
        pid=int(m.group("pid")),
        tid=int(m.group("tid")),
        device=int(m.group("device")),
        rest=pre.body[m.end() :],
    )


def host_of(line: str) -> str | None:
    """The host an NCCL-prefixed line came from, if the line has that prefix."""
    nccl = parse_nccl_prefix(line)
    return None if nccl is None else nccl.host
