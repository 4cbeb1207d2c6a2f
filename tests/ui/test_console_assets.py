"""The console ships everything it runs: no asset from elsewhere, no template that turns
escaping off, no script that writes unescaped text except the server-rendered rows."""

from __future__ import annotations

import re
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "resurgo" / "api" / "console"


def test_every_script_style_and_image_comes_from_the_package() -> None:
    pages = list((CONSOLE / "templates").glob("*.html"))
    assert len(pages) >= 8
    for page in pages:
        text = page.read_text()
        for url in re.findall(r'(?:src|href)="([^"]+)"', text):
            assert not re.match(r"(?:https?:)?//", url), f"{page.name} loads {url}"
        assert "<script>" not in text, f"{page.name}: inline script (the CSP forbids it)"
        assert "style=" not in text, f"{page.name}: inline style (the CSP forbids it)"


def test_nothing_turns_autoescaping_off() -> None:
    for page in (CONSOLE / "templates").glob("*.html"):
        text = page.read_text()
        assert "|safe" not in text.replace(" ", "") and "autoescape false" not in text, page.name
    script = (CONSOLE / "static" / "console.js").read_text()
    assert "eval(" not in script and "document.write" not in script
    # The one innerHTML: rows the server rendered through the autoescaping template.
    assert script.count("innerHTML") == 1 and "tbody.innerHTML = e.data" in script
