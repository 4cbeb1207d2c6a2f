"""The registry's per-line prefilter: keywords chosen from the entries' required literals
(`resurgo.detect.literals`), and one trie-shaped regex over them per case mode.

Fast path: at load time every regex is analysed (with the stdlib regex parser) for literal text
any match must contain; each literal is trimmed to start at a rare character. The literals of
case-sensitive entries form one trie-shaped regex searched in the line, those of
case-insensitive entries another one searched in `line.lower()`. A benign line (no literal)
costs those two C-level searches and nothing else; a line with literals runs only the entries
they belong to. Entries without a usable literal run on every line (the tests keep none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class Prefilter:
    """One trie regex over keywords, and which entries each keyword found at a position implies."""

    def __init__(self, keywords: Mapping[str, set[int]]) -> None:
        words = sorted(keywords)
        trie = re.compile(_trie_regex(words))
        self.search = trie.search
        self.scan_iter = trie.finditer
        # The trie reports the shortest keyword starting at a position; every longer keyword
        # starting there extends it, so a keyword implies the entries of all its extensions
        # (in sorted order, the words right after it that start with it).
        implies: dict[str, tuple[int, ...]] = {}
        for index, word in enumerate(words):
            entries = set(keywords[word])
            after = index + 1
            while after < len(words) and words[after].startswith(word):
                entries |= keywords[words[after]]
                after += 1
            implies[word] = tuple(sorted(entries))
        self.implies = implies
        self.keywords = tuple(words)

    def collect(self, text: str, into: set[int]) -> bool:
        """Add the entries of every keyword occurring in `text` (overlapping ones too)."""
        m = self.search(text)
        if m is None:
            return False
        search, implies = self.search, self.implies
        while m is not None:  # every start position holding a keyword, one search each
            into.update(implies[m.group()])
            m = search(text, m.start() + 1)
        return True


def group_by_keyword(by_literal: Mapping[str, set[int]], *, fold: bool) -> dict[str, set[int]]:
    """keyword -> entries: each literal's entries under its keyword (`choose_keywords`)."""
    keywords = choose_keywords(by_literal, fold=fold)
    out: dict[str, set[int]] = {}
    for literal, indices in by_literal.items():
        out.setdefault(keywords[literal], set()).update(indices)
    return out


# Approximate occurrences per 1000 characters of healthy training-job output (progress lines,
# NCCL INFO, English). Only the relative order matters: the prefilter's cost per benign line is
# about the number of positions holding the first character of some keyword.
_FREQUENCY: dict[str, float] = {
    " ": 180,
    ":": 25,
    ".": 13,
    "|": 10,
    ",": 4,
    "=": 4,
    "-": 4,
    "'": 4,
    "/": 4,
    "_": 4,
    "[": 4,
    "]": 4,
    "(": 2,
    ")": 2,
    '"': 2,
    "e": 45,
    "n": 35,
    "s": 32,
    "a": 30,
    "o": 28,
    "t": 28,
    "r": 25,
    "i": 25,
    "l": 20,
    "m": 18,
    "d": 15,
    "c": 12,
    "p": 12,
    "u": 10,
    "h": 10,
    "g": 8,
    "b": 8,
    "f": 6,
    "k": 5,
    "w": 4,
    "y": 4,
    "v": 3,
    "x": 2,
    "z": 1,
    "q": 0.5,
    "j": 0.5,
    "E": 5,
    "C": 5,
    "N": 4,
    "I": 4,
    "S": 3,
    "T": 3,
    "A": 3,
    "R": 3,
    "O": 3,
    "L": 3,
    "D": 2,
    "M": 2,
    "P": 2,
    "F": 2,
}
_FREQUENCY.update({d: 30.0 for d in "0123456789"})
_MIN_KEYWORD = 4


def _frequency(ch: str, fold: bool) -> float:
    if fold and ch.isalpha():
        return _FREQUENCY.get(ch, 1.0) + _FREQUENCY.get(ch.upper(), 1.0)
    return _FREQUENCY.get(ch, 1.0 if ch.isupper() else 0.5)


def choose_keywords(literals: Iterable[str], *, fold: bool) -> dict[str, str]:
    """literal -> keyword: a suffix of the literal that starts at a rarely seen character.

    Any substring of a required literal is required too, so each literal may be replaced by one
    of its suffixes (at least `_MIN_KEYWORD` long when the literal allows). The start characters
    ("anchors") are chosen by greedy weighted set cover so that few, rare characters start all
    keywords; the prefilter then rejects most positions of a line with a single charset test.
    """
    starts: dict[str, set[str]] = {}
    for literal in set(literals):
        last = max(len(literal) - _MIN_KEYWORD, 0)
        starts[literal] = {literal[i] for i in range(last + 1)}
    anchors: set[str] = set()
    uncovered = set(starts)
    while uncovered:
        counts: dict[str, int] = {}
        for literal in uncovered:
            for ch in starts[literal]:
                counts[ch] = counts.get(ch, 0) + 1
        best = max(sorted(counts), key=lambda ch: counts[ch] / _frequency(ch, fold))
        anchors.add(best)
        uncovered = {literal for literal in uncovered if best not in starts[literal]}
    for ch in sorted(anchors, key=lambda c: (-_frequency(c, fold), c)):  # drop redundant ones
        rest = anchors - {ch}
        if all(chars & rest for chars in starts.values()):
            anchors = rest
    out: dict[str, str] = {}
    for literal, chars in starts.items():
        first = min(i for i, ch in enumerate(literal) if ch in anchors and ch in chars)
        out[literal] = literal[first:]
    return out


def _trie_regex(words: Sequence[str]) -> str:
    """A regex matching any of `words`, factored as a trie so each position is cheap to reject."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a shorter word ends here; any longer continuation is redundant
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return emit(trie)
