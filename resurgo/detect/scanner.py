"""Chunk engines for the pattern registry: which lines of a chunk may match which entries.

Scanning a log line by line costs at least one Python call per line (0.1-0.3 µs), so a chunk
of lines is joined with `"\\n"` into one buffer and the registry's required literals (see
`literals.required_literals`) are searched in the whole buffer at C speed. Only the lines that
hold a literal (few in healthy output) go on to the entries' own Python regexes.

Engines (`RESURGO_SCAN_ENGINE` = `auto` | `hyperscan` | `re`, default `auto`):
- `hyperscan`: every required literal of every entry (untrimmed, case-insensitive ones with
  `HS_FLAG_CASELESS`, which folds ASCII letters only, as `re.ASCII | re.IGNORECASE` does) in one
  Hyperscan literal database, scanned over the UTF-8 bytes of the chunk. A hit maps to its line by
  counting newlines before it; the hit's entries become that line's candidates.
- `re`: the registry's keyword tries (stdlib `re`) searched over the chunk and over its
  lower-cased copy; a line with a hit gets its candidates from the per-line prefilter. Same
  results at about the speed of the per-line prefilter; used when Hyperscan is not installed or
  cannot run here.

Both are exact supersets: a line no literal hits cannot match any entry (each literal is
required by its entry, and the entry's body is a substring of the line). Literals never contain
a newline, so a hit never spans two lines. A chunk in which some line itself contains `"\\n"`
is refused (`None`) and the caller scans it line by line.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

try:
    import hyperscan  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - the optional engine is not installed
    hyperscan = None  # type: ignore[assignment, unused-ignore]

log = logging.getLogger(__name__)

EngineName = Literal["auto", "hyperscan", "re"]
ENGINE_ENV = "RESURGO_SCAN_ENGINE"
ENGINE_NAMES: tuple[EngineName, ...] = ("auto", "hyperscan", "re")

Finditer = Callable[[str], Iterator[re.Match[str]]]
Candidates = dict[int, Collection[int]]
"""Line index in the chunk -> indices of the entries to run on that line (any order)."""


@dataclass(frozen=True, slots=True)
class RequiredLiteral:
    """One literal some entries require: `fold` means it is matched ASCII-case-insensitively."""

    text: str
    fold: bool
    entries: tuple[int, ...]


class ChunkEngine(Protocol):
    name: str
    """`hyperscan` or `re`."""
    detail: str
    """Human-readable description (library and version)."""

    def candidates(self, lines: Sequence[str]) -> Candidates | None:
        """Candidate entries per line, or None if the chunk cannot be scanned as one buffer."""
        ...


def hyperscan_available() -> bool:
    return hyperscan is not None


def requested_engine(name: str | None) -> EngineName:
    """The engine asked for: `name`, else `$RESURGO_SCAN_ENGINE`, else `auto`."""
    value = (name if name is not None else os.environ.get(ENGINE_ENV, "auto")).strip().lower()
    for known in ENGINE_NAMES:
        if value == known:
            return known
    raise ValueError(f"unknown scan engine {value!r} (expected one of {', '.join(ENGINE_NAMES)})")


class HyperscanEngine:
    """All required literals in one Hyperscan block-mode literal database."""

    name = "hyperscan"

    def __init__(self, literals: Sequence[RequiredLiteral]) -> None:
        if hyperscan is None:
            raise RuntimeError("the 'hyperscan' package is not installed")
        if not literals:
            raise ValueError("no literals to compile")
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(
            expressions=[lit.text.encode("ascii") for lit in literals],
            ids=list(range(len(literals))),
            flags=[hyperscan.HS_FLAG_CASELESS if lit.fold else 0 for lit in literals],
            literal=True,
        )
        self._db = db
        self._scratch = hyperscan.Scratch(db)
        self._local = threading.local()  # one scratch per thread: a scratch serves one scan
        self._implies: tuple[tuple[int, ...], ...] = tuple(lit.entries for lit in literals)
        self._bits = len(literals).bit_length()  # a hit is one int: end offset, literal index
        self._mask = (1 << self._bits) - 1
        version = getattr(hyperscan, "__version__", "?")
        info = db.info()
        info_text = info.decode("ascii", "replace") if isinstance(info, bytes) else str(info)
        self.detail = f"hyperscan {version} ({info_text.split(' Features')[0]}), "
        self.detail += f"{len(literals)} literals"

    def _thread_scratch(self) -> hyperscan.Scratch:
        scratch: hyperscan.Scratch | None = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._scratch.clone()
            self._local.scratch = scratch
        return scratch

    def candidates(self, lines: Sequence[str]) -> Candidates | None:
        data = "\n".join(lines).encode("utf-8", "surrogatepass")
        hits: list[int] = []
        append = hits.append
        bits = self._bits

        def on_match(literal: int, start: int, end: int, flags: int, context: object) -> None:
            append(end << bits | literal)

        self._db.scan(data, match_event_handler=on_match, scratch=self._thread_scratch())
        hits.sort()  # Hyperscan does not promise to report matches in offset order
        out: dict[int, set[int]] = {}
        implies, mask = self._implies, self._mask
        count = data.count
        line = 0
        pos = 0
        for hit in hits:
            end = hit >> bits
            # UTF-8 never uses the byte 0x0A inside a multi-byte character.
            line += count(b"\n", pos, end)
            pos = end
            entries = implies[hit & mask]
            found = out.get(line)
            if found is None:
                out[line] = set(entries)
            else:
                found.update(entries)
        if line + count(b"\n", pos) != len(lines) - 1:
            return None  # some line holds a newline itself: hits cannot be mapped to lines
        return dict(out)


class RegexEngine:
    """Stdlib fallback: keyword tries over the chunk find the lines, the prefilter the entries."""

    name = "re"

    def __init__(
        self,
        raw_finditer: Finditer | None,
        folded_finditer: Finditer | None,
        per_line: Callable[[str], Collection[int]],
    ) -> None:
        self._raw = raw_finditer
        self._folded = folded_finditer
        self._per_line = per_line
        self.detail = "stdlib re (keyword tries over the chunk)"

    def candidates(self, lines: Sequence[str]) -> Candidates | None:
        text = "\n".join(lines)
        if text.count("\n") != len(lines) - 1:
            return None
        found: set[int] = set()
        # Non-overlapping matches are enough here: every line holding a keyword yields at least
        # one match (keywords never span a newline), and the per-line prefilter then collects
        # every keyword of that line. `str.lower` may change the length of a non-ASCII text, so
        # lines are counted within the text each search ran on.
        if self._raw is not None:
            found.update(_lines_hit(text, self._raw))
        if self._folded is not None:
            found.update(_lines_hit(text.lower(), self._folded))
        per_line = self._per_line
        out: Candidates = {}
        for index in sorted(found):
            entries = per_line(lines[index])
            if entries:
                out[index] = entries
        return out


def _lines_hit(text: str, finditer: Finditer) -> list[int]:
    lines: list[int] = []
    line = 0
    pos = 0
    count = text.count
    for m in finditer(text):
        start = m.start()
        line += count("\n", pos, start)
        pos = start
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def build_engine(
    requested: EngineName,
    literals: Sequence[RequiredLiteral],
    fallback: Callable[[], RegexEngine],
) -> ChunkEngine:
    """The requested engine; `auto` (and `hyperscan` when it cannot run) falls back to `re`."""
    if requested == "re" or not literals:  # no literal at all: every entry runs on every line
        return fallback()
    try:
        return HyperscanEngine(literals)
    except Exception as exc:  # any failure (not installed, CPU, compiler) means: use `re`
        if requested == "hyperscan" or hyperscan is not None:
            log.warning("pattern registry: Hyperscan unusable (%s); scanning with stdlib re", exc)
        return fallback()
