"""`resurgo audit JOB --follow --api`: the job's audit events from the API's live stream.

Reads `GET /v1/jobs/{cluster}/{job}/events` (server-sent events) and prints each event as the
store-side `--follow` does (one tab-separated line, or one JSON object with `--json`) until the
API says monitoring ended (`event: end`). A dropped connection is reopened with
`Last-Event-ID`, so nothing is printed twice; consecutive failed reconnects are bounded
(stamina: backoff with jitter), after which the command fails as an unreachable API does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import typer

from resurgo.cli.operator import ApiClient, ApiError, ApiUnreachable, _detail

__all__ = ["follow_stream"]

RECONNECTS = 6
# Longer than the server's keep-alive comments (15 s): a silent connection is a dead one.
READ_TIMEOUT = 45.0


class StreamDropped(Exception):
    """The connection closed before `event: end`, having delivered nothing new."""


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None


def parse_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Server-sent events from a stream's lines (comments, i.e. keep-alives, skipped)."""
    event, ident = "message", None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield SseEvent(event, "\n".join(data), ident)
            event, data, ident = "message", [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            ident = value


def follow_stream(
    client: ApiClient,
    cluster: str,
    job: int | str,
    attempt: int | None,
    types: list[str] | None,
    as_json: bool,
) -> None:
    """Print the job's events as they are recorded until monitoring of the job ends."""
    import httpx
    import stamina

    from resurgo.audit.store import StoredAuditEvent
    from resurgo.cli.audit import event_line

    path = f"/v1/jobs/{cluster}/{job}/events"
    last: str | None = None

    def show(sse: SseEvent) -> None:
        e = StoredAuditEvent.model_validate_json(sse.data)
        if (attempt is None or e.attempt == attempt) and (not types or e.type in types):
            typer.echo(e.model_dump_json() if as_json else event_line(e))

    def read_once() -> bool:
        """One connection: True at `end`, False when it dropped after delivering events."""
        nonlocal last
        headers = {"Accept": "text/event-stream"}
        if last is not None:
            headers["Last-Event-ID"] = last
        progressed = False
        timeout = httpx.Timeout(30.0, read=READ_TIMEOUT)
        try:
            with client._http.stream("GET", path, headers=headers, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise ApiError(resp.status_code, _detail(resp))
                for sse in parse_sse(resp.iter_lines()):
                    if sse.event == "end":
                        return True
                    if sse.event == "audit":
                        show(sse)
                        last, progressed = sse.id or last, True
        except httpx.TransportError:
            if not progressed:
                raise
            return False
        if not progressed:
            raise StreamDropped(f"the API closed the stream of job {job} before its end")
        return False

    try:
        while True:
            # A fresh budget of attempts after every connection that delivered something.
            for retry in stamina.retry_context(
                on=(httpx.TransportError, StreamDropped),
                attempts=RECONNECTS,
                wait_initial=0.5,
                wait_max=5.0,
            ):
                with retry:
                    ended = read_once()
            if ended:
                return
    except (httpx.TransportError, StreamDropped) as exc:
        raise ApiUnreachable(f"lost the Resurgo API's stream at {client.url}: {exc}") from exc
