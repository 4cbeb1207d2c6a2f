"""`resurgo audit --api`: the audit timeline (and `--follow`) read through `resurgo api`."""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from resurgo.cli.audit_stream import follow_stream
from resurgo.cli.exits import ExitCode
from resurgo.cli.operator import (
    STATUS_EXIT,
    ApiClient,
    ApiError,
    ApiUnreachable,
    api_call,
    jobs,
    make_client,
)
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
    from resurgo.cli.audit import check_event_types
    from resurgo.cli.timeline import render_timeline, timeline_json

    if job_id is None:
        if attempt is not None or types or follow:
            fail("--attempt, --type and --follow need a JOB", ExitCode.USAGE)
        jobs(cluster=cluster, as_json=as_json, api_url=api_url, token=token, config=config,
             limit=limit)  # fmt: skip
        return
    wanted = check_event_types(types or []) or None
    client = make_client(api_url, token, config)

    named_by: list[str] = []

    def read_all() -> list[StoredAuditEvent]:
        raw: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = client.get("/v1/audit", job=job_id, cluster=cluster, attempt=attempt,
                              type=wanted, cursor=cursor, limit=1000)  # fmt: skip
            raw += page["events"]
            cursor = page["next_cursor"]
            if page.get("named_by") and not named_by:
                named_by.append(page["named_by"])  # a hetjob component's own job id
            if not cursor:
                return [StoredAuditEvent.model_validate(e) for e in raw]

    if follow:
        # No spinner here: while one runs on a terminal, Rich sends stdout's lines to stderr.
        try:
            follow_stream(client, cluster or _cluster_of(client, job_id), job_id, attempt,
                          wanted, as_json)  # fmt: skip
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except ApiUnreachable as exc:
            fail(str(exc), ExitCode.UNAVAILABLE)
        except ApiError as exc:
            fail(f"{exc.status}: {exc.detail}", STATUS_EXIT.get(exc.status, ExitCode.FAILURE))
        finally:
            client.close()
        return
    with api_call(client, f"reading the audit trail of job {job_id}…"):
        events = read_all()
    for note in named_by:  # stderr: JSON output stays parseable
        err.print(Text(note))
    if as_json:
        typer.echo(timeline_json(events))
    elif events:
        render_timeline(events, console)
    if not events:
        err.print(Text(f"no audit events for job {job_id}" + (f" on {cluster}" if cluster else "")))
        raise typer.Exit(int(ExitCode.NOT_FOUND))


def _cluster_of(client: ApiClient, job_id: int) -> str:
    """The cluster of the job's most recent audit event (the stream route names a cluster)."""
    page = client.get("/v1/audit", job=job_id, order="desc", limit=1)
    if not page["events"]:
        fail(f"no audit events for job {job_id} yet: pass --cluster to wait for it",
             ExitCode.NOT_FOUND)  # fmt: skip
    return str(page["events"][0]["cluster"])
