"""`resurgo audit --api`: the audit timeline (and `--follow`) read through `resurgo api`."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.text import Text

from resurgo.cli.exits import ExitCode
from resurgo.cli.operator import api_call, jobs, make_client
from resurgo.cli.output import console, err, fail

__all__ = ["audit_via_api"]


def audit_via_api(
    job_id: int | None,
    *,
    cluster: str | None,
    attempt: int | None,
    types: list[str] | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
    follow: bool = False,
    interval: float = 2.0,
    limit: int = 1000,
) -> None:
    """`resurgo audit --api`: the same timeline, read through the API."""
    from resurgo.audit.store import StoredAuditEvent
    from resurgo.cli.audit import FINAL_TYPES, check_event_types, event_line
    from resurgo.cli.timeline import render_timeline, timeline_json

    if job_id is None:
        if attempt is not None or types or follow:
            fail("--attempt, --type and --follow need a JOB", ExitCode.USAGE)
        jobs(cluster=cluster, as_json=as_json, api_url=api_url, token=token, config=config,
             limit=limit)  # fmt: skip
        return
    wanted = check_event_types(types or []) or None
    client = make_client(api_url, token, config)

    def read_all() -> list[StoredAuditEvent]:
        raw: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = client.get("/v1/audit", job=job_id, cluster=cluster, attempt=attempt,
                              type=wanted, cursor=cursor, limit=1000)  # fmt: skip
            raw += page["events"]
            cursor = page["next_cursor"]
            if not cursor:
                return [StoredAuditEvent.model_validate(e) for e in raw]

    with api_call(client, f"reading the audit trail of job {job_id}…"):
        events = read_all()
        if follow:
            # The API pages by id only when a page is full, so each round re-reads the trail
            # and prints what is new (a job's trail is hundreds of events, not millions).
            seen: set[int] = set()
            try:
                while True:
                    for e in sorted(events, key=lambda ev: ev.id):
                        if e.id not in seen:
                            seen.add(e.id)
                            typer.echo(e.model_dump_json() if as_json else event_line(e))
                    if any(e.type in FINAL_TYPES for e in events):
                        return
                    time.sleep(interval)
                    events = read_all()
            except KeyboardInterrupt:
                raise typer.Exit(130) from None
    if as_json:
        typer.echo(timeline_json(events))
    elif events:
        render_timeline(events, console)
    if not events:
        err.print(Text(f"no audit events for job {job_id}" + (f" on {cluster}" if cluster else "")))
        raise typer.Exit(int(ExitCode.NOT_FOUND))
