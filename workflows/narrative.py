"""The workflow's text for the Temporal UI, as pure functions.

The Temporal UI renders current details and summaries as Markdown (and Markdown lets HTML
through). Job names, node names from logs, advice reasons and directive values are written by
cluster users, so every such string is escaped here before it is interpolated: it shows as the
literal text the user wrote and can neither format, link, embed HTML nor add lines.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from resurgo.contracts import Advice
from resurgo.policy import decide as policy

# Longest user-derived string shown in one place (the audit trail keeps the full text).
MAX_SHOWN = 200
# Every ASCII punctuation character CommonMark lets a backslash escape, except `&` and `;`
# (entities, written below) and the quotes (inert outside HTML attributes, and HTML is escaped).
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>=$%@^:/,?])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# GitHub-flavoured Markdown turns bare `http://…` and `www.…` into links, escapes or not: a zero
# width space after the scheme/`www` breaks the pattern without changing what a reader sees.
_AUTOLINK = re.compile(r"(?i)(:(?=//)|www(?=\.)|@)")


def _visible(char: str) -> str:
    """Control, format, surrogate, private and line/paragraph separator characters (newlines
    included) would start a new Markdown block or hide text: each shows as one space."""
    category = unicodedata.category(char)
    return " " if category[0] == "C" or category in ("Zl", "Zp") else char


def escape(text: object, limit: int = MAX_SHOWN) -> str:
    """`text` (user-derived) as Markdown that renders as exactly that text, on one line."""
    raw = str(text)
    shown = "".join(_visible(c) for c in raw[:limit])
    shown = _AUTOLINK.sub("\\1\u200b", shown)
    shown = "".join(_HTML.get(c, c) for c in shown)
    # After the entities: their `&` and `;` are not in the escaped set, so they stay entities.
    shown = _MARKDOWN.sub(r"\\\1", shown)
    return shown + ("…" if len(raw) > limit else "")


def escape_all(items: Iterable[object]) -> str:
    return ", ".join(escape(i) for i in items)


def details(
    *,
    label: str,
    job_name: str,
    mode: str,
    phase: str,
    attempt: int,
    last_category: str | None,
    excluded_nodes: list[str],
    pending: Advice | None,
    last: Advice | None,
) -> str:
    """The workflow's current details: what the Temporal UI shows at the top of its page."""
    lines = [
        f"**{escape(label)}** {escape(job_name) or '-'} — {escape(mode)} mode",
        f"- phase: **{escape(phase)}**, attempt {attempt}",
        f"- last category: {escape(last_category or '-')}",
        f"- excluded nodes: {escape_all(excluded_nodes) or '-'}",
    ]
    if pending:
        advice = escape(policy.describe_advice(pending))
        lines.append(f"- **awaiting approval** of g{pending.generation}: {advice} "
                     "(update `decide_advice`)")  # fmt: skip
    if last:
        lines.append(f"- last advice g{last.generation}: "
                     f"{escape(policy.describe_advice(last))} — {escape(last.reason)}")  # fmt: skip
    return "\n".join(lines)
