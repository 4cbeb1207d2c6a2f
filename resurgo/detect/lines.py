"""Normalisation of untrusted log lines: decoding, control characters and launcher prefixes.

Job output is written by arbitrary programs, so a "line" may hold invalid UTF-8, NULs, terminal
escape sequences, tqdm carriage returns or megabytes without a newline. Everything here is pure,
never raises on any input and costs a few C-level string operations per line.

Prefixes handled (in the order launchers add them):
- `srun -l` task labels: `0: text`, ` 12: text` (srun pads the number to a common width);
- PyTorch rank prefixes: `[rank3]: text`, `[rank3]:[E ...] text`, `[Rank 3] text`;
- NCCL's own `host:pid:tid [dev] NCCL ...` prefix (parsed, not stripped).
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_LINE_BYTES = 64 * 1024
"""Longest line kept (bytes of input); the head is kept, the rest dropped."""

MAX_LINE_CHARS = MAX_LINE_BYTES
"""Longest line kept by `sanitize_line` (characters)."""

_SRUN_LABEL = re.compile(r" {0,8}(\d{1,7}): ", re.ASCII)
_RANK_PREFIX = re.compile(r"\[[Rr]ank ?(\d{1,7})\](?::? ?)", re.ASCII)
_NCCL_PREFIX = re.compile(
    r"(?=[\w.-]{0,253}[A-Za-z])(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
    r":(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) "
    r"\[(?P<device>\d{1,4})\] ",
    re.ASCII,
)
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


def strip_prefixes(line: str) -> LinePrefix:
    """Remove the srun label and a leading `[rankN]:` prefix; report both and the body offset."""
    offset = 0
    task: int | None = None
    rank: int | None = None
    m = _SRUN_LABEL.match(line)
    if m is not None:
        task = int(m.group(1))
        offset = m.end()
    r = _RANK_PREFIX.match(line, offset)
    if r is not None:
        rank = int(r.group(1))
        offset = r.end()
    return LinePrefix(task, rank, line[offset:] if offset else line, offset)


def rank_of(line: str) -> int | None:
    """The rank named by a leading `[rankN]:` / `[Rank N]` prefix (after any srun label)."""
    return strip_prefixes(line).rank


def parse_nccl_prefix(line: str) -> NcclPrefix | None:
    """Parse NCCL's `host:pid:tid [dev] ` prefix, after any srun label or rank prefix."""
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
