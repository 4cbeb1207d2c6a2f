"""Required-literal extraction for the pattern registry's regexes (stdlib regex parser).

`required_literals` finds literal text any match of a regex must contain, `needs_folding`
whether the regex matches case-insensitively anywhere; the registry's prefilter
(`resurgo.detect.prefilter`) and chunk engines (`resurgo.detect.scanner`) look for those
literals before running any entry's regex.
"""

from __future__ import annotations

import importlib
import itertools
import re
import sys
from collections.abc import Iterator
from typing import Any

REGEX_FLAGS = re.ASCII
"""The flags every registry regex is compiled with (and parsed with here)."""


# ---------------------------------------------------------------------- literal extraction
#
# `required_literals(R)` returns a set S of ASCII strings such that every match of R (compiled
# with re.ASCII) contains some s in S, or None when no useful set exists. With `fold=True` the
# strings are lower-case and the containment holds after lower-casing the subject, which is
# what case-insensitive regexes need. Soundness: a LITERAL node matches exactly its character
# (or, folded, its ASCII case variants); zero-width nodes (anchors, lookarounds) consume
# nothing, so the literals on both sides of them are adjacent in the subject; a branch requires
# one of its alternatives; a repeat with min >= 1 requires its body. A run of adjacent elements
# with a small finite language yields exact strings (the product of the element languages), and
# any contiguous window of that run, or any substring of such a string, is required as well.

_MAX_SET = 64
_MIN_LITERAL = 3


def _parser() -> Any:
    try:
        return importlib.import_module("re._parser")
    except ImportError:  # pragma: no cover - Python < 3.11
        return importlib.import_module("sre_parse")


def needs_folding(regex: str) -> bool:
    """Whether `regex` matches case-insensitively anywhere (global or scoped `(?i)`)."""
    try:
        sp = _parser()
        parsed = sp.parse(regex, REGEX_FLAGS)
    except Exception:
        return True
    if parsed.state.flags & re.IGNORECASE:
        return True
    return _Extractor(sp, fold=False).scoped_ignorecase(list(parsed))


def literal_filter(regex: str) -> tuple[bool, frozenset[str] | None]:
    """`(needs_folding(regex), required_literals(regex, fold=that))`, parsing `regex` once."""
    try:
        sp = _parser()
        parsed = sp.parse(regex, REGEX_FLAGS)
    except Exception:
        return True, None
    items = list(parsed)
    fold = bool(parsed.state.flags & re.IGNORECASE) or _Extractor(sp, fold=False).scoped_ignorecase(
        items
    )
    try:
        found = _Extractor(sp, fold=fold).sequence(items)
    except Exception:
        return fold, None
    if not found or min(len(s) for s in found) < _MIN_LITERAL:
        return fold, None
    return fold, frozenset(found)


def required_literals(regex: str, *, fold: bool = True) -> frozenset[str] | None:
    """Literals one of which every match of `regex` contains (lower-case if `fold`), or None.

    With `fold=False` the caller must know that `regex` is case-sensitive (`needs_folding`).
    """
    try:
        sp = _parser()
        parsed = sp.parse(regex, REGEX_FLAGS)
        found = _Extractor(sp, fold=fold).sequence(list(parsed))
    except Exception:
        return None
    if not found or min(len(s) for s in found) < _MIN_LITERAL:
        return None
    return frozenset(found)


class _Extractor:
    def __init__(self, sp: Any, *, fold: bool) -> None:
        self.sp = sp
        self.fold = fold
        self.zero_width = {sp.AT, sp.ASSERT, sp.ASSERT_NOT}
        self.repeats = {sp.MAX_REPEAT, sp.MIN_REPEAT}
        if hasattr(sp, "POSSESSIVE_REPEAT"):
            self.repeats.add(sp.POSSESSIVE_REPEAT)
        self.atomic = getattr(sp, "ATOMIC_GROUP", None)

    def char(self, code: int) -> str | None:
        ch = chr(code)
        if not (ch.isascii() and ch.isprintable()):
            return None
        return ch.lower() if self.fold else ch

    def scoped_ignorecase(self, items: list[tuple[Any, Any]]) -> bool:
        sp = self.sp
        for op, av in items:
            children: list[list[tuple[Any, Any]]] = []
            if op == sp.SUBPATTERN:
                if av[1] & re.IGNORECASE:
                    return True
                children = [list(av[-1])]
            elif op == sp.BRANCH:
                children = [list(alt) for alt in av[1]]
            elif op in self.repeats:
                children = [list(av[2])]
            elif op in (sp.ASSERT, sp.ASSERT_NOT):
                children = [list(av[1])]
            elif self.atomic is not None and op == self.atomic:
                children = [list(av)]
            if any(self.scoped_ignorecase(child) for child in children):
                return True
        return False

    # exact finite language of a node, or None if infinite/too large/unknown
    def finite(self, op: Any, av: Any) -> set[str] | None:
        sp = self.sp
        if op == sp.LITERAL:
            ch = self.char(av)
            return None if ch is None else {ch}
        if op in self.zero_width:
            return {""}
        if op == sp.IN:
            chars: set[str] = set()
            for item_op, item_av in av:
                if item_op != sp.LITERAL:
                    return None
                ch = self.char(item_av)
                if ch is None:
                    return None
                chars.add(ch)
            return chars if 0 < len(chars) <= 8 else None
        if op == sp.SUBPATTERN:
            return self.finite_seq(list(av[-1]))
        if self.atomic is not None and op == self.atomic:
            return self.finite_seq(list(av))
        if op == sp.BRANCH:
            out: set[str] = set()
            for alternative in av[1]:
                sub = self.finite_seq(list(alternative))
                if sub is None:
                    return None
                out |= sub
                if len(out) > _MAX_SET:
                    return None
            return out
        if op in self.repeats:
            low, high, body = av
            if high > 8:
                return None
            sub = self.finite_seq(list(body))
            if sub is None:
                return None
            out = set()
            for count in range(low, high + 1):
                for combo in itertools.product(sorted(sub), repeat=count):
                    out.add("".join(combo))
                    if len(out) > _MAX_SET:
                        return None
            return out
        return None

    def finite_seq(self, items: list[tuple[Any, Any]]) -> set[str] | None:
        out: set[str] = {""}
        for op, av in items:
            sub = self.finite(op, av)
            if sub is None:
                return None
            out = {a + b for a in out for b in sub}
            if len(out) > _MAX_SET:
                return None
        return out

    # a set of literals one of which every match contains, or None
    def required(self, op: Any, av: Any) -> set[str] | None:
        sp = self.sp
        if op == sp.SUBPATTERN:
            return self.sequence(list(av[-1]))
        if self.atomic is not None and op == self.atomic:
            return self.sequence(list(av))
        if op in self.repeats:
            low, _high, body = av
            return self.sequence(list(body)) if low >= 1 else None
        if op == sp.BRANCH:
            out: set[str] = set()
            for alternative in av[1]:
                sub = self.sequence(list(alternative))
                if not sub:
                    return None
                out |= sub
            return out
        return None

    def sequence(self, items: list[tuple[Any, Any]]) -> set[str] | None:
        # The candidate with the longest shortest string wins, then the smallest set; among
        # equals the first one found. Keys are kept incrementally (a product's shortest string
        # is the sum of its factors' shortest), which keeps loading the registry fast.
        best: set[str] | None = None
        best_key = (0, 0)
        languages = [self.finite(op, av) for op, av in items]
        shortest = [0 if lang is None else min(map(len, lang)) for lang in languages]
        for start in range(len(items)):  # windows over runs of finite elements
            if languages[start] is None:
                continue
            before = languages[start - 1] if start else None
            if before is not None and len(before) == 1:
                # Dominated: the window one element earlier prepends one fixed string, so it
                # has the same set size, no shorter strings, and was found first.
                continue
            product: set[str] = {""}
            length = 0
            for end in range(start, len(items)):
                language = languages[end]
                if language is None:
                    break
                if len(product) == 1 and len(language) == 1:
                    (head,), (tail,) = product, language
                    product = {head + tail}
                else:
                    product = {a + b for a in product for b in language}
                if len(product) > _MAX_SET:
                    break
                length += shortest[end]
                if length > 0 and (key := (length, -len(product))) > best_key:
                    best, best_key = product, key
        for (op, av), language in zip(items, languages, strict=True):
            if language is None:
                sub = self.required(op, av)
                if sub and (key := (min(map(len, sub)), -len(sub))) > best_key:
                    best, best_key = sub, key
        return best


# ---------------------------------------------------------------------- gated patterns
GATE_CHARS = 6
"""Gate literals are cut to this many characters (any substring of a required literal is
required too): fewer, shorter `in` tests, nearly as selective."""


class GatedPattern:
    """A compiled regex whose searches first test, with `in`, for the literals any match must
    contain (found by `required_literals`'s extractor from the regex itself, so they follow
    its edits): text without one skips the regex. Results are exactly the regex's own.

    Worth it for a regex run on every line of a job's output that matches few of them.
    """

    __slots__ = ("_ascii_only", "_literals", "_lower", "pattern")

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self._literals: tuple[str, ...] | None = None  # found on first use (start-up time)
        self._lower = False
        self._ascii_only = False

    def _gate(self) -> tuple[str, ...]:
        fold, found = _gate_literals(self.pattern)
        self._lower = fold
        # Unicode case folding maps a few other characters onto ASCII letters (U+017F onto
        # `s`, the Kelvin sign onto `k`): unless the regex is ASCII-only, a case-insensitive
        # gate holds for ASCII text only.
        self._ascii_only = fold and not self.pattern.flags & re.ASCII
        self._literals = found
        return found

    def may_match(self, text: str) -> bool:
        """False only when the regex cannot match anywhere in `text`."""
        literals = self._literals
        if literals is None:
            literals = self._gate()
        if not literals:
            return True
        if self._lower:
            if self._ascii_only and not text.isascii():
                return True
            text = text.lower()
        for literal in literals:  # noqa: SIM110 (a plain loop: no generator on every line)
            if literal in text:
                return True
        return False

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.pattern.search(text, pos, endpos) if self.may_match(text) else None

    def match(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.pattern.match(text, pos, endpos) if self.may_match(text) else None

    def finditer(
        self, text: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        return self.pattern.finditer(text, pos, endpos) if self.may_match(text) else iter(())


def gated(pattern: re.Pattern[str]) -> GatedPattern:
    """`pattern` behind a literal pre-test (see `GatedPattern`)."""
    return GatedPattern(pattern)


def _gate_literals(pattern: re.Pattern[str]) -> tuple[bool, tuple[str, ...]]:
    """Whether the pattern folds case, and literals one of which every match contains (lower
    case if it folds; empty when there are none)."""
    try:
        sp = _parser()
        parsed = sp.parse(pattern.pattern, pattern.flags)
        items = list(parsed)
        fold = bool(parsed.state.flags & re.IGNORECASE) or _Extractor(
            sp, fold=False
        ).scoped_ignorecase(items)
        found = _Extractor(sp, fold=fold).sequence(items)
    except Exception:
        return True, ()
    if not found or "" in found:
        return fold, ()
    return fold, tuple(sorted({literal[:GATE_CHARS] for literal in found}))
