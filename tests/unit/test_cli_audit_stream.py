"""`resurgo audit --follow --api` over a stream that drops, never answers, or is interrupted:
what the user sees (lines printed once each, the exit code), with the HTTP side scripted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import stamina
import typer

from resurgo.audit.store import StoredAuditEvent
from resurgo.cli import audit_api
from resurgo.cli.audit import event_line
from resurgo.cli.exits import ExitCode
from resurgo.cli.operator import ApiClient

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def stored(n: int, type_: str = "progress") -> StoredAuditEvent:
    return StoredAuditEvent(
        id=n, event_id=f"e{n}", cluster="c1", job_id=7, workflow_id="resurgo:c1:7:1",
        attempt=0, type=type_, producer="workflow", at=AT, summary=f"step {n}\tTAB",
    )  # fmt: skip


def sse(e: StoredAuditEvent) -> bytes:
    return f"id: {e.id}\nevent: audit\ndata: {e.model_dump_json()}\n\n".encode()


END = b'event: end\ndata: {"reason": "monitoring_ended"}\n\n'


def client_with(handler: Any) -> ApiClient:
    client = ApiClient("http://api.test", "tok")
    client._http = httpx.Client(base_url=client.url, transport=httpx.MockTransport(handler))
    return client


def follow(client: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_api, "make_client", lambda *_: client)
    audit_api.audit_via_api(7, cluster="c1", attempt=None, types=None, as_json=False,
                            api_url=None, token=None, config=None, follow=True)  # fmt: skip


@pytest.fixture(autouse=True)
def no_backoff() -> Iterator[None]:
    with stamina.set_testing(True, attempts=3):
        yield


def test_a_dropped_stream_resumes_after_the_last_event_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [stored(1, "monitoring_started"), stored(2), stored(3, "monitoring_ended")]
    asked: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("last-event-id"))
        assert request.url.path == "/v1/jobs/c1/7/events"
        if len(asked) == 1:

            def dropping() -> Iterator[bytes]:
                yield sse(events[0]) + b": ping\n\n" + sse(events[1])
                raise httpx.ReadError("connection reset by peer")

            return httpx.Response(200, content=dropping())
        after = int(asked[-1] or 0)
        body = b"".join(sse(e) for e in events if e.id > after) + END
        return httpx.Response(200, content=body)

    follow(client_with(handler), monkeypatch)  # returns: exit 0
    assert asked == [None, "2"]
    assert capsys.readouterr().out.splitlines() == [event_line(e) for e in events]


def test_an_api_that_stays_down_fails_as_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("connection refused")

    with pytest.raises(typer.Exit) as exit_:
        follow(client_with(handler), monkeypatch)
    assert exit_.value.exit_code == int(ExitCode.UNAVAILABLE)
    assert calls == 3  # bounded: stamina's attempts, not forever
    assert "lost the Resurgo API's stream" in capsys.readouterr().err


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        def interrupted() -> Iterator[bytes]:
            yield sse(stored(1, "monitoring_started"))
            raise KeyboardInterrupt

        return httpx.Response(200, content=interrupted())

    with pytest.raises(typer.Exit) as exit_:
        follow(client_with(handler), monkeypatch)
    assert exit_.value.exit_code == 130


def test_a_refusal_is_not_retried(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(403, json={"error": {"code": "forbidden", "message": "no [x]"}})

    with pytest.raises(typer.Exit) as exit_:
        follow(client_with(handler), monkeypatch)
    assert exit_.value.exit_code == int(ExitCode.DENIED) and calls == 1
    assert "403: no [x]" in capsys.readouterr().err
