"""The failure pattern registry: known log signatures as data (`patterns.json`), and a fast scanner.

Each entry names a symptom (`kind`), a category *hint* (a regex match is never a verdict on its
own; attribution decides), a `role` (`root` can be a root cause, `cascade` is a consequence of
another failure and never the root cause, `context` is supporting information such as the srun
task-exit line) and a `severity` (`fatal`: the process or job cannot continue; `error`: a failure
that usually ends the job; `warning`: degradation).

Matching rules:
- regexes are compiled with `re.ASCII` and searched (not matched) in the line's *body*, i.e.
  after an `srun -l` label (`3: `) and a leading `[rankN]:` prefix, so `^` means "start of the
  message"; spans are reported in the coordinates of the original line;
- `examples` must match their entry and `near_misses` must match no entry at all:
  `Registry.check_examples` checks both and raises `RegistryError` otherwise. Loading a registry
  file or document runs it; loading the packaged catalogue does not (every process loads it,
  the check costs start-up time, and its tests run the check instead).

Fast path (`resurgo.detect.prefilter`): the literals every match of an entry must contain
(`resurgo.detect.literals`) select the few entries worth running on a line.

Chunk path (`scan_chunk`, `scan_many`): a whole chunk of lines is searched for the required
literals at once by a chunk engine (`resurgo.detect.scanner`: Hyperscan when installed, else
stdlib `re`), so a benign line costs no Python call at all. Every path gives exactly the result
of `scan_naive`, line by line.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from resurgo.detect.lines import strip_prefixes
from resurgo.detect.literals import REGEX_FLAGS, literal_filter
from resurgo.detect.pattern_entry import (
    Determinism,
    PatternEntry,
    PatternMatch,
    RegistryError,
    RegistryFile,
    Role,
    Scope,
    Severity,
    first_error,
)
from resurgo.detect.prefilter import Prefilter, group_by_keyword
from resurgo.detect.scanner import (
    ChunkEngine,
    EngineName,
    RegexEngine,
    RequiredLiteral,
    build_engine,
    requested_engine,
)

__all__ = [
    "CHUNK_LINES",
    "ENGINE_AFTER_LINES",
    "Determinism",
    "PatternEntry",
    "PatternMatch",
    "Registry",
    "RegistryError",
    "Role",
    "Scope",
    "Severity",
]

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = frozenset({1})
PACKAGED_FILE = "patterns.json"
CATALOGUE_GLOB = "catalogue_*.json"
"""The failure catalogue: more entries in the same format next to `patterns.json`, one file
per domain (Xid, application, kernel...); `Registry.load()` merges them in name order."""
CHUNK_LINES = 2048
"""Lines joined into one buffer per engine call (a buffer this size stays in the CPU cache)."""
ENGINE_AFTER_LINES = 50_000
"""With the `auto` engine, lines scanned line by line (prefilter) before the chunk engine is
built: compiling Hyperscan's database costs about what the prefilter spends on this many lines,
so a small bundle or a short-lived watch never pays for it. Explicit engines start at once."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    entry: PatternEntry
    pattern: re.Pattern[str]
    fold: bool
    literals: frozenset[str] | None
    template: PatternMatch
    """The entry's match with an empty span; each match is a copy with span and groups set."""


def _compile(entry: PatternEntry) -> _Compiled:
    fold, literals = literal_filter(entry.regex)
    template = PatternMatch.model_construct(
        id=entry.id,
        kind=entry.kind,
        category=entry.category,
        role=entry.role,
        severity=entry.severity,
        span=(0, 0),
        groups={},
        tags=entry.tags,
    )
    return _Compiled(entry, re.compile(entry.regex, REGEX_FLAGS), fold, literals, template)


class Registry:
    """A validated, immutable set of pattern entries with a prefiltered scanner."""

    def __init__(
        self,
        entries: Sequence[PatternEntry],
        *,
        version: int = 1,
        source: str = "",
        engine: str | None = None,
        check: bool = True,
    ) -> None:
        """`engine`: the chunk engine (`auto`, `hyperscan` or `re`; default from the environment
        variable `RESURGO_SCAN_ENGINE`, else `auto`). It only changes speed, never results.
        `check`: run `check_examples` (RegistryError when an example or near miss is wrong)."""
        self.version = version
        self.source = source or "<memory>"
        if version not in SUPPORTED_VERSIONS:
            raise RegistryError(f"{self.source}: unsupported registry version {version!r}")
        try:
            self._engine_request: EngineName = requested_engine(engine)
        except ValueError as exc:
            raise RegistryError(f"{self.source}: {exc}") from None
        self._engine: ChunkEngine | None = None
        self._engine_lock = threading.Lock()
        self._lines_before_engine = 0
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            if entry.id in seen:
                raise RegistryError(
                    f"{self.source}: duplicate pattern id {entry.id!r} "
                    f"(entries {seen[entry.id]} and {index})"
                )
            seen[entry.id] = index
        self._compiled: tuple[_Compiled, ...] = tuple(_compile(e) for e in entries)
        self._by_id = {c.entry.id: c.entry for c in self._compiled}
        self._build_prefilter()
        if check:
            self.check_examples()

    # ------------------------------------------------------------------ construction
    @classmethod
    def load(
        cls,
        path: str | PathLike[str] | None = None,
        *,
        engine: str | None = None,
        check: bool | None = None,
    ) -> Registry:
        """Load and validate a registry file (default: the packaged `patterns.json` and
        catalogue). `check`: run `check_examples`; by default for a file given here, not for
        the packaged catalogue (its tests check it)."""
        if path is None:
            return cls._load_packaged(engine=engine, check=bool(check))
        else:
            source = str(path)
            try:
                text = Path(path).read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise RegistryError(f"{source}: cannot read: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RegistryError(f"{source}: not valid JSON: {exc}") from exc
        return cls.from_data(data, source=source, engine=engine, check=check is not False)

    @classmethod
    def _load_packaged(cls, *, engine: str | None = None, check: bool = False) -> Registry:
        """`patterns.json` plus every `catalogue_*.json` beside it, as one registry."""
        source = f"resurgo.detect/{PACKAGED_FILE}"
        try:
            folder = resources.files("resurgo.detect")
            catalogue = [
                f.name for f in folder.iterdir() if fnmatch.fnmatch(f.name, CATALOGUE_GLOB)
            ]
            names = [PACKAGED_FILE, *sorted(catalogue)]
            texts = [(name, folder.joinpath(name).read_text("utf-8")) for name in names]
        except (OSError, ModuleNotFoundError) as exc:
            raise RegistryError(f"{source}: cannot read the packaged registry: {exc}") from exc
        patterns: list[Any] = []
        version = 1
        for name, text in texts:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RegistryError(f"resurgo.detect/{name}: not valid JSON: {exc}") from exc
            if not isinstance(data, Mapping) or not isinstance(data.get("patterns"), list):
                raise RegistryError(f"resurgo.detect/{name}: expected 'version' and 'patterns'")
            if name == PACKAGED_FILE:
                version = data.get("version", 1)
            elif data.get("version") != version:
                raise RegistryError(f"resurgo.detect/{name}: version differs from {source}")
            patterns.extend(data["patterns"])
        where = source + (f" + {len(names) - 1} catalogue files" if len(names) > 1 else "")
        return cls.from_data({"version": version, "patterns": patterns}, source=where,
                             engine=engine, check=check)  # fmt: skip

    @classmethod
    def from_data(
        cls, data: object, *, source: str = "", engine: str | None = None, check: bool = True
    ) -> Registry:
        """Build from the decoded JSON document (`{"version": 1, "patterns": [...]}`);
        `check`: run `check_examples`."""
        where = source or "<memory>"
        if not isinstance(data, Mapping):
            raise RegistryError(f"{where}: expected an object with 'version' and 'patterns'")
        try:
            doc = RegistryFile.model_validate(data)
        except ValidationError as exc:
            raise RegistryError(f"{where}: {first_error(exc)}") from exc
        entries: list[PatternEntry] = []
        for index, raw in enumerate(doc.patterns):
            name = raw.get("id") if isinstance(raw.get("id"), str) else f"#{index}"
            try:
                entries.append(PatternEntry.model_validate(raw))
            except ValidationError as exc:
                raise RegistryError(f"{where}: pattern {name!r}: {first_error(exc)}") from exc
        return cls(entries, version=doc.version, source=where, engine=engine, check=check)

    @classmethod
    def default(cls) -> Registry:
        """The packaged registry, loaded once per process."""
        return _default_registry()

    # ------------------------------------------------------------------ introspection
    @property
    def entries(self) -> tuple[PatternEntry, ...]:
        return tuple(c.entry for c in self._compiled)

    def get(self, pattern_id: str) -> PatternEntry:
        """The entry with this id (KeyError if unknown)."""
        return self._by_id[pattern_id]

    def __len__(self) -> int:
        return len(self._compiled)

    def __iter__(self) -> Iterator[PatternEntry]:
        return iter(self.entries)

    def __contains__(self, pattern_id: object) -> bool:
        return pattern_id in self._by_id

    @property
    def unfiltered_ids(self) -> tuple[str, ...]:
        """Entries without a prefilter literal (they run on every line)."""
        return tuple(self._compiled[i].entry.id for i in self._always)

    @property
    def prefilter_keywords(self) -> tuple[str, ...]:
        """The literals the prefilter looks for (case-sensitive ones, then lower-case ones)."""
        return tuple(k for p in (self._raw, self._folded) if p is not None for k in p.keywords)

    @property
    def scan_engine(self) -> str:
        """The chunk engine in use: `hyperscan` or `re` (built on first use)."""
        return self._chunk_engine().name

    @property
    def scan_engine_detail(self) -> str:
        """The chunk engine with its library version."""
        return self._chunk_engine().detail

    # ------------------------------------------------------------------ scanning
    def scan(self, line: str) -> list[PatternMatch]:
        """All entries matching `line`, in registry order. Never raises for any `str`."""
        candidates = self._candidates(line)
        return self._run(line, candidates) if candidates else []

    def scan_many(self, lines: Iterable[str]) -> list[tuple[int, list[PatternMatch]]]:
        """`(index, matches)` for every line (by position in `lines`) that matched something."""
        if isinstance(lines, Sequence):
            return self.scan_chunk(lines)
        out: list[tuple[int, list[PatternMatch]]] = []
        it = iter(lines)
        base = 0
        while block := list(itertools.islice(it, CHUNK_LINES)):
            if self._engine_pays(len(block)):
                self._scan_block(block, base, out)
            else:
                self._scan_lines(block, base, out)
            base += len(block)
        return out

    def scan_chunk(self, lines: Sequence[str]) -> list[tuple[int, list[PatternMatch]]]:
        """Like `scan_many` for a sequence: `(index into lines, matches)` for each line that
        matched, in order. The chunk engine searches whole buffers of lines for the entries'
        literals; only the lines it flags run regexes. Same result as `scan` on every line."""
        out: list[tuple[int, list[PatternMatch]]] = []
        if not self._engine_pays(len(lines)):
            self._scan_lines(lines, 0, out)
            return out
        if len(lines) <= CHUNK_LINES:
            self._scan_block(lines, 0, out)
            return out
        for base in range(0, len(lines), CHUNK_LINES):
            self._scan_block(lines[base : base + CHUNK_LINES], base, out)
        return out

    def scan_naive(self, line: str) -> list[PatternMatch]:
        """Reference scanner without the prefilter (tests and benchmarks compare against it)."""
        return self._run(line, range(len(self._compiled)))

    def _engine_pays(self, more_lines: int) -> bool:
        """Whether to scan `more_lines` lines with the chunk engine (see ENGINE_AFTER_LINES)."""
        if self._engine is not None or self._engine_request != "auto":
            return True
        self._lines_before_engine += more_lines
        return self._lines_before_engine >= ENGINE_AFTER_LINES

    def _scan_lines(
        self, lines: Sequence[str], base: int, out: list[tuple[int, list[PatternMatch]]]
    ) -> None:
        for index, line in enumerate(lines):
            matches = self.scan(line)
            if matches:
                out.append((base + index, matches))

    def _scan_block(
        self, lines: Sequence[str], base: int, out: list[tuple[int, list[PatternMatch]]]
    ) -> None:
        if not lines:
            return
        engine = self._chunk_engine()
        try:
            found = engine.candidates(lines)
        except Exception:  # an engine failure costs speed, never results
            log.exception("pattern registry: %s engine failed; scanning line by line", engine.name)
            found = None
        if found is None:  # the engine refused the chunk (a line holds a newline)
            self._scan_lines(lines, base, out)
            return
        always = self._always
        if always:
            for index, line in enumerate(lines):
                hits = found.get(index)
                candidates = sorted(set(hits).union(always)) if hits else always
                matches = self._run(line, candidates)
                if matches:
                    out.append((base + index, matches))
            return
        for index in sorted(found):
            matches = self._run(lines[index], sorted(found[index]))
            if matches:
                out.append((base + index, matches))

    def _chunk_engine(self) -> ChunkEngine:
        engine = self._engine
        if engine is None:
            with self._engine_lock:
                engine = self._engine
                if engine is None:
                    engine = self._engine = build_engine(
                        self._engine_request, self._literals, self._regex_engine
                    )
        return engine

    def _regex_engine(self) -> RegexEngine:
        return RegexEngine(
            None if self._raw is None else self._raw.scan_iter,
            None if self._folded is None else self._folded.scan_iter,
            self._candidates,
        )

    def _candidates(self, line: str) -> Sequence[int]:
        """Entries that may match `line`: those whose keyword occurs in it, plus unfiltered ones."""
        hits: set[int] = set()
        found = self._raw is not None and self._raw.collect(line, hits)
        if self._folded is not None and self._folded.collect(line.lower(), hits):
            found = True
        if not found:
            return self._always
        hits.update(self._always)
        return sorted(hits)

    def _run(self, line: str, candidates: Iterable[int]) -> list[PatternMatch]:
        body = strip_prefixes(line)
        text, offset = body.body, body.offset
        out: list[PatternMatch] = []
        for index in candidates:
            compiled = self._compiled[index]
            m = compiled.pattern.search(text)
            if m is None:
                continue
            groups = (
                {k: v for k, v in m.groupdict().items() if v is not None}
                if compiled.pattern.groupindex
                else {}
            )
            span = (m.start() + offset, m.end() + offset)
            out.append(compiled.template.model_copy(update={"span": span, "groups": groups}))
        return out

    # ------------------------------------------------------------------ internals
    def _build_prefilter(self) -> None:
        raw: dict[str, set[int]] = {}
        folded: dict[str, set[int]] = {}
        always: list[int] = []
        for index, compiled in enumerate(self._compiled):
            if not compiled.literals:
                always.append(index)
                continue
            into = folded if compiled.fold else raw
            for literal in compiled.literals:
                into.setdefault(literal, set()).add(index)
        # The chunk engines look for the literals themselves (not the shorter keywords): an
        # automaton pays nothing for their length and they flag far fewer benign lines.
        self._literals: tuple[RequiredLiteral, ...] = tuple(
            RequiredLiteral(literal, fold, tuple(sorted(table[literal])))
            for fold, table in ((False, raw), (True, folded))
            for literal in sorted(table)
        )
        raw = group_by_keyword(raw, fold=False)
        folded = group_by_keyword(folded, fold=True)
        self._always: tuple[int, ...] = tuple(always)
        self._raw = Prefilter(raw) if raw else None
        self._folded = Prefilter(folded) if folded else None

    def check_examples(self) -> None:
        """Every entry's examples match it (through the prefilter too) and its near misses
        match no entry at all; RegistryError names the first that does not."""
        for compiled in self._compiled:
            e = compiled.entry
            for n, example in enumerate(e.examples, 1):
                if not any(m.id == e.id for m in self.scan(example)):
                    if any(m.id == e.id for m in self.scan_naive(example)):
                        raise RegistryError(
                            f"{self.source}: pattern {e.id!r}: example {n} matches but the "
                            f"prefilter misses it (internal error): {example!r}"
                        )
                    raise RegistryError(
                        f"{self.source}: pattern {e.id!r}: example {n} does not match: {example!r}"
                    )
            for n, near in enumerate(e.near_misses, 1):
                hits = [m.id for m in self.scan_naive(near)]
                if hits:
                    raise RegistryError(
                        f"{self.source}: pattern {e.id!r}: near-miss {n} matches "
                        f"{', '.join(hits)}: {near!r}"
                    )


@functools.lru_cache(maxsize=1)
def _default_registry() -> Registry:
    return Registry.load()
