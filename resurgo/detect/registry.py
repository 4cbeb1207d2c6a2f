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
- `examples` must match their entry and `near_misses` must match no entry at all; `Registry.load`
  checks both and raises `RegistryError` otherwise.

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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.literals import REGEX_FLAGS, needs_folding, required_literals
from resurgo.detect.prefilter import Prefilter, group_by_keyword
from resurgo.detect.scanner import (
    ChunkEngine,
    EngineName,
    RegexEngine,
    RequiredLiteral,
    build_engine,
    requested_engine,
)

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = frozenset({1})
PACKAGED_FILE = "patterns.json"
CATALOGUE_GLOB = "catalogue_*.json"
"""The failure catalogue: more entries in the same format next to `patterns.json`, one file
per domain (Xid, application, kernel...); `Registry.load()` merges them in name order."""
CHUNK_LINES = 2048
"""Lines joined into one buffer per engine call (a buffer this size stays in the CPU cache)."""

Role = Literal["root", "cascade", "context"]
Scope = Literal["gpu", "node", "job", "shared", "unknown"]
Determinism = Literal["recurs", "transient", "unknown"]
Severity = Literal["fatal", "error", "warning"]

_ID = r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$"


class RegistryError(ValueError):
    """The registry file is missing, malformed or inconsistent (message says which entry)."""


class PatternEntry(BaseModel):
    """One failure signature."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID, max_length=64)
    regex: str = Field(min_length=1, max_length=2000)
    kind: AnomalyKind
    category: Category
    role: Role
    severity: Severity
    description: str = Field(min_length=1)
    examples: tuple[str, ...] = Field(min_length=1)
    near_misses: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    """Free-form markers, e.g. `checkpoint_save`, `checkpoint_load`, `nan`."""
    scope: Scope = "unknown"
    """What the failure is bound to: one `gpu`, one `node`, the `job` (its code, data,
    configuration or environment: the same fault wherever it runs), or a `shared` service
    (file system, registry, switch, site power: no node to blame)."""
    determinism: Determinism = "unknown"
    """Whether the same cause `recurs` on a retry as it is, is `transient`, or `unknown`."""
    source: str = ""
    """The public reference the signature comes from (vendor docs, project source, issue)."""

    @field_validator("category")
    @classmethod
    def _not_none(cls, value: Category) -> Category:
        if value == Category.NONE:
            raise ValueError("'none' is not a failure category")
        return value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value, REGEX_FLAGS)
        except (re.error, ValueError, OverflowError, RecursionError) as exc:
            raise ValueError(f"invalid regex: {exc}") from None
        return value


class PatternMatch(BaseModel):
    """One entry matching one line."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: AnomalyKind
    category: Category
    role: Role
    severity: Severity
    span: tuple[int, int]
    """Start and end of the match in the original line."""
    groups: dict[str, str] = Field(default_factory=dict)
    """Named groups that matched (e.g. `node`, `rank`, `xid`, `pci`, `peer`, `exit_code`)."""
    tags: tuple[str, ...] = ()


class _RegistryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    patterns: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _Compiled:
    entry: PatternEntry
    pattern: re.Pattern[str]
    fold: bool
    literals: frozenset[str] | None
    template: PatternMatch
    """The entry's match with an empty span; each match is a copy with span and groups set."""


def _compile(entry: PatternEntry) -> _Compiled:
    fold = needs_folding(entry.regex)
    literals = required_literals(entry.regex, fold=fold)
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
    ) -> None:
        """`engine`: the chunk engine (`auto`, `hyperscan` or `re`; default from the environment
        variable `RESURGO_SCAN_ENGINE`, else `auto`). It only changes speed, never results."""
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
        self._check_examples()

    # ------------------------------------------------------------------ construction
    @classmethod
    def load(
        cls, path: str | PathLike[str] | None = None, *, engine: str | None = None
    ) -> Registry:
        """Load and validate a registry file (default: the packaged `patterns.json`)."""
        if path is None:
            return cls._load_packaged(engine=engine)
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
        return cls.from_data(data, source=source, engine=engine)

    @classmethod
    def _load_packaged(cls, *, engine: str | None = None) -> Registry:
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
                             engine=engine)  # fmt: skip

    @classmethod
    def from_data(cls, data: object, *, source: str = "", engine: str | None = None) -> Registry:
        """Build from the decoded JSON document (`{"version": 1, "patterns": [...]}`)."""
        where = source or "<memory>"
        if not isinstance(data, Mapping):
            raise RegistryError(f"{where}: expected an object with 'version' and 'patterns'")
        try:
            doc = _RegistryFile.model_validate(data)
        except ValidationError as exc:
            raise RegistryError(f"{where}: {_first_error(exc)}") from exc
        entries: list[PatternEntry] = []
        for index, raw in enumerate(doc.patterns):
            name = raw.get("id") if isinstance(raw.get("id"), str) else f"#{index}"
            try:
                entries.append(PatternEntry.model_validate(raw))
            except ValidationError as exc:
                raise RegistryError(f"{where}: pattern {name!r}: {_first_error(exc)}") from exc
        return cls(entries, version=doc.version, source=where, engine=engine)

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
            self._scan_block(block, base, out)
            base += len(block)
        return out

    def scan_chunk(self, lines: Sequence[str]) -> list[tuple[int, list[PatternMatch]]]:
        """Like `scan_many` for a sequence: `(index into lines, matches)` for each line that
        matched, in order. The chunk engine searches whole buffers of lines for the entries'
        literals; only the lines it flags run regexes. Same result as `scan` on every line."""
        out: list[tuple[int, list[PatternMatch]]] = []
        if len(lines) <= CHUNK_LINES:
            self._scan_block(lines, 0, out)
            return out
        for base in range(0, len(lines), CHUNK_LINES):
            self._scan_block(lines[base : base + CHUNK_LINES], base, out)
        return out

    def scan_naive(self, line: str) -> list[PatternMatch]:
        """Reference scanner without the prefilter (tests and benchmarks compare against it)."""
        return self._run(line, range(len(self._compiled)))

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
            for index, line in enumerate(lines):
                matches = self.scan(line)
                if matches:
                    out.append((base + index, matches))
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

    def _check_examples(self) -> None:
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


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}" if where else f"{first.get('msg')}{more}"
