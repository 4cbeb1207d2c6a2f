"""User-derived text in the Temporal UI's Markdown shows as the literal text, on one line."""

from __future__ import annotations

import re

import pytest

from resurgo.contracts import Advice, AdviceKind
from resurgo.workflows.narrative import MAX_SHOWN, details, escape

HOSTILE = [
    "x JobState= Comment=C",
    "<img src=x onerror=alert(1)>",
    "<script>fetch('//evil')</script>",
    "[approve here](https://evil.example/steal)",
    "![x](http://evil/pixel.png)",
    "**bold** _it_ `code` ~~gone~~ | a | b |",
    "line one\n# Heading\n- [ ] task",
    "carriage\rreturn\u2028sep\u0085next\x0bvt",
    "www.evil.example and mail@evil.example",
    "\\*escaped already\\*",
    "&lt;not an entity&gt; &amp;",
    "\ud800 lone surrogate",
]


def unescape(shown: str) -> str:
    """What a Markdown renderer displays for `shown` (backslash escapes, the three entities,
    the zero-width spaces)."""
    text = re.sub(r"\\(.)", r"\1", shown)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.replace("\u200b", "")


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_renders_as_itself(text: str) -> None:
    shown = escape(text)
    assert "\n" not in shown and "\r" not in shown
    # No live Markdown or HTML left: every special character is escaped or an entity.
    assert not re.search(r"(?<!\\)[<>\[\]()*_`#|!~]", shown), shown
    assert "://" not in shown and "www." not in shown
    visible = "".join(" " if not c.isprintable() and c != " " else c for c in text)
    assert unescape(shown) == visible.replace("\ud800", " ")


def test_long_text_is_cut() -> None:
    shown = escape("a" * 5000)
    assert shown == "a" * MAX_SHOWN + "…"


def test_details_escape_every_user_field() -> None:
    advice = Advice(
        generation=1, attempt=0, kind=AdviceKind.REQUEUE_EXCLUDING, nodes=["node<b>2"],
        reason="ECC on [node2](http://evil)\n# pwned", rule="hw",
    )  # fmt: skip
    text = details(
        label="local/7", job_name="<b>job</b>\n# big", mode="action", phase="running",
        attempt=1, last_category="hardware_gpu", excluded_nodes=["node*1*"],
        pending=None, last=advice,
    )  # fmt: skip
    assert len(text.splitlines()) == 5
    assert "<b>" not in text and "](http" not in text and "\n# " not in text
    assert "&lt;b&gt;job&lt;\\/b&gt;" in text and "node\\*1\\*" in text
