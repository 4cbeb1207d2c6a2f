"""`GET /v1/jobs/{cluster}/{job_id}/events`: one job's audit events as server-sent events, live.

Each audit event is one SSE event (`event: audit`, `id:` its row id, `data:` the event as JSON,
output lines withheld exactly as `/timeline` withholds them). A client that reconnects with
`Last-Event-ID` (or `?after=<id>`) gets what follows that id, so nothing is sent twice. When
monitoring of the job has ended (its `monitoring_ended` event, or a workflow Temporal no longer
runs, e.g. terminated) the stream sends `event: end` and closes.

The audit store is polled server-side, once a second per open stream, asking only for events
after the last one sent: N followers cost N small indexed queries, and nothing while the job is
quiet beyond that. SSE comments keep idle connections (and proxies in between) alive; a client
that goes away ends its poll loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from resurgo.api.auth import Principal
from resurgo.api.conventions import PlainDigits
from resurgo.api.core import ApiProblem, GatewayCore
from resurgo.api.errors import documented
from resurgo.api.job_refs import JOB_REF_PATTERN
from resurgo.api.visibility import owners, shown_to
from resurgo.audit.store import StoredAuditEvent

__all__ = ["ENDED", "events_router"]

# The workflow's last event: after it nothing more is recorded for the job.
ENDED = "monitoring_ended"
# How often a quiet stream asks Temporal whether the workflow still runs (one describe call).
LIVENESS_SECONDS = 10.0
POLL_SECONDS = 1.0
PING_SECONDS = 15
BATCH = 500
MAX_EVENT_ID = 2**63 - 1

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,127}$"
WORKFLOW_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,254}$"

Cluster = Annotated[str, Path(pattern=NAME, max_length=128, description="cluster name")]
JobRef = Annotated[
    str,
    Path(
        pattern=JOB_REF_PATTERN,
        max_length=30,
        description="Slurm job id, `<array job id>_<task id>`, or a hetjob's `<id>+<component>`",
    ),
]
After = Annotated[
    int | None,
    Query(ge=0, le=MAX_EVENT_ID, description="send only events with a larger id"),
    PlainDigits,
]
# A header, so it is checked as text: anything but a row id is refused (422), never guessed.
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        pattern=r"^[0-9]{1,19}$",
        description="the `id` of the last event received (EventSource sends it on reconnect)",
    ),
]
WorkflowId = Annotated[
    str | None,
    Query(
        pattern=WORKFLOW_ID, max_length=255, description="pick one job when a Slurm id was reused"
    ),
]

STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "`text/event-stream`: `event: audit` (id = audit row id, data = the "
        'event as JSON) until `event: end` (data: `{"reason": ...}`)',
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **documented(400, 401, 403, 404, 422, 503),
}


def events_router(
    gateway: GatewayCore,
    viewer: Callable[..., Awaitable[Principal]],
    *,
    poll: float = POLL_SECONDS,
    ping: int = PING_SECONDS,
) -> APIRouter:
    router = APIRouter(tags=["jobs"])

    @router.get(
        "/v1/jobs/{cluster}/{job_id}/events",
        responses=STREAM_DOC,
        response_class=EventSourceResponse,
    )
    async def job_events(
        request: Request,
        cluster: Cluster,
        job_id: JobRef,
        workflow_id: WorkflowId = None,
        after: After = None,
        last_event_id: LastEventId = None,
        who: Principal = Depends(viewer),  # noqa: B008 - FastAPI's dependency idiom
    ) -> EventSourceResponse:
        """The job's audit events as server-sent events, oldest first, then live as they are
        recorded, until monitoring of the job ends (`event: end`). Reconnect with
        `Last-Event-ID` (or `?after=`) to resume without duplicates. Output lines are withheld
        as for `/timeline`."""
        start = int(last_event_id) if last_event_id is not None else after
        if start is not None and start > MAX_EVENT_ID:
            raise ApiProblem(422, "Last-Event-ID is not an event id")
        # Located before the response starts, so an unknown job is a 404 in the error shape.
        loc = await gateway.locate(cluster, job_id, workflow_id)
        wid = loc.ref.workflow_id
        # A workflow Temporal lists as finished records nothing more: end once caught up.
        finished = loc.execution is not None and not loc.live

        async def stream() -> AsyncIterator[ServerSentEvent]:
            last = start
            if start is not None:
                # Resuming past the job's last event (the connection dropped before `end`).
                ended = await asyncio.to_thread(
                    gateway.store.query, workflow_id=wid, types=[ENDED], limit=1
                )
                if ended and ended[0].id <= start:
                    yield _end(ENDED)
                    return
            owner: str | None = None
            known_owner = False
            checked = asyncio.get_running_loop().time()
            stopped = finished
            while True:
                batch: list[StoredAuditEvent] = await asyncio.to_thread(
                    gateway.store.query, workflow_id=wid, after_id=last, limit=BATCH
                )
                if batch and not known_owner:
                    # Recorded by `monitoring_started`; unknown until then (nobody's lines).
                    owner = (await owners(gateway.store, [wid]))[wid]
                    known_owner = owner is not None
                for e in batch:
                    last = e.id
                    shown = shown_to(who, owner, e)
                    yield ServerSentEvent(data=shown.model_dump_json(), event="audit", id=str(e.id))
                    if e.type == ENDED:
                        yield _end(ENDED)
                        return
                if len(batch) == BATCH:
                    continue  # catching up: no pause between full pages
                now = asyncio.get_running_loop().time()
                if not batch and (stopped or now - checked >= LIVENESS_SECONDS):
                    # A workflow that ended without `monitoring_ended` (terminated, cancelled,
                    # or older than that event): once it stopped and everything was sent, end.
                    checked = now
                    if stopped or await _stopped(gateway, wid):
                        stopped = True
                        tail = await asyncio.to_thread(
                            gateway.store.query, workflow_id=wid, after_id=last, limit=1
                        )
                        if not tail:
                            yield _end("workflow finished")
                            return
                        continue
                if await request.is_disconnected():
                    return
                await asyncio.sleep(poll)

        return EventSourceResponse(
            stream(), ping=ping, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )

    return router


def _end(reason: str) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps({"reason": reason}), event="end")


async def _stopped(gateway: GatewayCore, workflow_id: str) -> bool:
    """Temporal says the workflow no longer runs (False when Temporal cannot say)."""
    try:
        client = await gateway.temporal.get()
        described = await client.get_workflow_handle(workflow_id).describe()
    except (ApiProblem, RPCError):
        return False
    return described.status != WorkflowExecutionStatus.RUNNING
