"""The console's settings a deployment chooses: whether its session cookie is Secure
(`api.session_cookie_secure`, and the address `resurgo api` really binds) and where its links to
the Temporal Web UI point (`temporal.ui_url`, $RESURGO_TEMPORAL_UI_URL). Served by the real app
(no Temporal needed for the login page) and read the way a browser would: the Set-Cookie
header."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from fastapi import FastAPI

from resurgo.api.console.app import temporal_ui_base
from resurgo.api.server import build
from resurgo.config import ApiSettings, ApiToken, ResurgoConfig, TemporalSettings

TOKEN = "console-settings-test-token"


def config(**api: object) -> ResurgoConfig:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens = {"otto": ApiToken(role="operator", sha256=digest)}
    return ResurgoConfig(
        temporal=TemporalSettings(address="127.0.0.1:1"), api=ApiSettings(tokens=tokens, **api)
    )


async def session_cookie(cfg: ResurgoConfig, host: str) -> str:
    """The console's Set-Cookie header for the login page of `resurgo api --host HOST`."""
    app = build(cfg, host=host, insecure=False, tokens_file=None).app
    assert isinstance(app, FastAPI)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as browser:
        page = await browser.get("/console/login")
    assert page.status_code == 200
    (cookie,) = [c for c in page.headers.get_list("set-cookie") if "resurgo_console=" in c]
    return cookie.lower()


@pytest.mark.parametrize(
    ("host", "setting", "secure"),
    [
        ("0.0.0.0", None, True),  # reachable from other hosts: HTTPS only by default
        ("10.1.2.3", None, True),
        ("127.0.0.1", None, False),  # a browser on this host talks plain http
        ("localhost", None, False),
        ("127.0.0.1", True, True),  # an operator's choice wins either way
        ("0.0.0.0", False, False),
    ],
)
async def test_the_session_cookie_is_secure_unless_served_on_loopback(
    host: str, setting: bool | None, secure: bool
) -> None:
    cookie = await session_cookie(config(session_cookie_secure=setting), host)
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert ("; secure" in cookie) is secure, cookie


def test_workflow_links_follow_the_configured_temporal_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESURGO_TEMPORAL_UI_URL", raising=False)
    cfg = ResurgoConfig(temporal=TemporalSettings(address="temporal.prod:7233"))
    assert temporal_ui_base(cfg) == "http://temporal.prod:8233"  # the dev server's UI
    cfg = ResurgoConfig(
        temporal=TemporalSettings(address="temporal.prod:7233", ui_url="https://ui.example.org/")
    )
    assert temporal_ui_base(cfg) == "https://ui.example.org"
    monkeypatch.setenv("RESURGO_TEMPORAL_UI_URL", "https://legacy.example.org")
    assert temporal_ui_base(cfg) == "https://legacy.example.org"  # still honoured, and wins


def test_a_temporal_ui_url_that_is_not_http_is_refused() -> None:
    from pydantic import ValidationError

    for bad in ("javascript:alert(1)", "ui.example.org", 'https://x" onclick="y'):
        with pytest.raises(ValidationError):
            TemporalSettings(ui_url=bad)
