"""The HTTP gateway: jobs, attempts, anomalies, advice, approvals, modes and the audit trail.

`create_app(config)` builds the FastAPI application; `resurgo.api.server.serve` runs it under
uvicorn
(`resurgo api`). OpenAPI 3.1 is served at `/openapi.json` and browsable at `/docs`; every error
has one shape (`resurgo.api.errors`). Every `/v1` route needs a bearer token:
reads need `viewer`, approvals and mode changes need `operator`. A request body is read only
after its token checked out, and never past 64 KiB (413). `/healthz`, `/readyz` and `/metrics`
are open (they carry no job data); `/readyz` names addresses only to a valid token.

Liveness and readiness: `/healthz` answers 200 while the process serves requests (restart it
otherwise). `/readyz` answers 200 while the audit store answers, because every read can then be
served (from the store when Temporal is down: `degraded: true`), and 503 only when the store is
down; Temporal's state is in its checks, so an outage of Temporal alone never takes the API,
and its audit reads, out of service.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from temporalio.client import Client

from resurgo.api.arrays import arrays_router
from resurgo.api.auth import (
    INSECURE_PRINCIPAL,
    BodyGate,
    Principal,
    Role,
    TokenRegistry,
    bearer_principal,
)
from resurgo.api.console.app import PREFIX as CONSOLE
from resurgo.api.console.app import create_console
from resurgo.api.conventions import PlainDigits, add_cors, operation_id
from resurgo.api.core import ApiProblem, TemporalConnection, as_utc
from resurgo.api.errors import install_error_handlers
from resurgo.api.events_stream import events_router
from resurgo.api.job_refs import JOB_REF_PATTERN
from resurgo.api.listing import JobFilter
from resurgo.api.models import (
    AdvicePage,
    AuditPage,
    DecisionRequest,
    DecisionResponse,
    ErrorBody,
    Health,
    JobDetail,
    JobPage,
    ModeRequest,
    ModeResponse,
    Readiness,
    RejectRequest,
    TimelinePage,
)
from resurgo.api.nodes import nodes_router
from resurgo.api.service import Gateway
from resurgo.api.visibility import owners, shown_to
from resurgo.audit.store import MAX_LIMIT, AuditStore, store_url_from_env
from resurgo.config import ResurgoConfig
from resurgo.metrics.exporter import AuditCollector
from resurgo.metrics.process import PROCESS
from resurgo.metrics.reader import DigestReader

log = logging.getLogger("resurgo.api")

__all__ = ["create_app"]

P = TypeVar("P", TimelinePage, AuditPage)

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,127}$"
WORKFLOW_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,254}$"
MAX_JOB_ID = 2**63 - 1
MAX_GENERATION = 2**31 - 1

ClusterPath = Annotated[str, Path(pattern=NAME, max_length=128, description="cluster name")]
# Reads also take an array task (`500_1`) or a hetjob component (`500+1`): checked again in
# resurgo.api.job_refs (range), refused with the one error shape.
JobRefPath = Annotated[
    str,
    Path(
        pattern=JOB_REF_PATTERN,
        max_length=30,
        description="Slurm job id, `<array job id>_<task id>`, or a hetjob's `<id>+<component>`",
    ),
]
NameQuery = Annotated[str | None, Query(pattern=NAME, max_length=128)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT), PlainDigits]
Cursor = Annotated[
    str | None,
    Query(
        max_length=4096,
        pattern=r"^[A-Za-z0-9_\-.]+$",
        description="the `next_cursor` of the previous page",
    ),
]
WorkflowIdQuery = Annotated[
    str | None,
    Query(
        pattern=WORKFLOW_ID, max_length=255, description="pick one job when a Slurm id was reused"
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=r"^[A-Za-z0-9_.\-]{1,100}$",
        description="retrying with the same key returns the first answer instead of acting twice",
    ),
]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody} for code in codes}


# 422 too: validation errors have the one error shape, not FastAPI's own.
READ_ERRORS = _errors(400, 401, 403, 422, 503)
JOB_ERRORS = _errors(400, 401, 403, 404, 422, 503)
WRITE_ERRORS = _errors(400, 401, 403, 404, 409, 413, 422, 503, 504)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "resurgo_api_requests_total", "HTTP requests served",
            ["method", "route", "status"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "resurgo_api_request_duration_seconds", "HTTP request latency",
            ["method", "route"], registry=self.registry,
        )  # fmt: skip
        self.refusals = Counter(
            "resurgo_api_auth_refusals_total", "requests refused by authentication/authorization",
            ["status"], registry=self.registry,
        )  # fmt: skip
        self.decisions = Counter(
            "resurgo_api_operator_actions_total", "approvals, rejections and mode changes",
            ["action", "result"], registry=self.registry,
        )  # fmt: skip


def create_app(
    config: ResurgoConfig,
    *,
    tokens: TokenRegistry | None = None,
    insecure: bool = False,
    client: Client | None = None,
    store: AuditStore | None = None,
) -> FastAPI:
    """The gateway for `config`; `client`/`store` may be injected (tests), else made lazily."""
    registry = tokens if tokens is not None else TokenRegistry.from_settings(config.api)
    if insecure:
        log.warning(
            "!!! RESURGO API RUNNING WITH --insecure: NO AUTHENTICATION, every request acts as "
            "%r with the admin role. Use only for a local demo. !!!",
            INSECURE_PRINCIPAL.name,
        )
    gateway = Gateway(
        TemporalConnection(config.temporal, client),
        store if store is not None else AuditStore(config.audit.url or store_url_from_env()),
        cursor_key=registry.derived_key("resurgo-api-cursor"),
    )
    metrics = Metrics()
    # Recovery metrics (jobs watched, approvals, holds, anomalies, actions, latencies).
    metrics.registry.register(AuditCollector(DigestReader(gateway.store)))
    metrics.registry.register(PROCESS)  # Slurm command and source errors counted in this process
    bearer = HTTPBearer(auto_error=False, description="a token from `[api.tokens]`")

    app = FastAPI(
        title="Resurgo API",
        version="1",
        summary="Jobs, attempts, anomalies, advice, approvals, modes and the audit trail",
        docs_url="/docs",
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.gateway = gateway
    app.state.metrics = metrics
    # Outermost: no route, dependency or body parser sees a request the gate refused.
    app.add_middleware(
        BodyGate,
        registry=registry,
        insecure=insecure,
        on_refusal=lambda status: metrics.refusals.labels(str(status)).inc(),
        session_prefix=f"{CONSOLE}/",
    )

    def require(role: Role) -> Callable[..., Awaitable[Principal]]:
        async def dependency(
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        ) -> Principal:
            if insecure:
                return INSECURE_PRINCIPAL
            principal = registry.authenticate(credentials.credentials) if credentials else None
            if principal is None:
                metrics.refusals.labels("401").inc()
                raise ApiProblem(
                    401,
                    "a valid bearer token is required" if credentials else "no bearer token",
                    headers={"WWW-Authenticate": 'Bearer realm="resurgo"'},
                )
            if principal.role < role:
                metrics.refusals.labels("403").inc()
                raise ApiProblem(
                    403,
                    f"{principal.name!r} has the {principal.role.name.lower()} role; "
                    f"this needs {role.name.lower()}",
                )
            return principal

        return dependency

    Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
    Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]

    # ---- plumbing ------------------------------------------------------------------------------
    @app.middleware("http")
    async def measure(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        response: Response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.requests.labels(request.method, path, str(response.status_code)).inc()
        metrics.latency.labels(request.method, path).observe(time.perf_counter() - started)
        return response

    install_error_handlers(app)
    add_cors(app, config.api)  # outside the body gate, so refusals carry CORS headers too

    # ---- health --------------------------------------------------------------------------------
    @app.get("/healthz", tags=["health"])
    async def healthz() -> Health:
        """The process is up."""
        return Health()

    @app.get(
        "/readyz",
        tags=["health"],
        responses={503: {"model": Readiness, "description": "the audit store is down"}},
    )
    async def readyz(request: Request) -> JSONResponse:
        """Ready (200) while the audit store answers; `degraded` when Temporal does not (reads
        then come from the store). Without a valid token each check says only ok / not ok:
        addresses and errors are for authenticated viewers."""
        ready = await gateway.readiness()
        # The header is read by hand: the route stays open (no security scheme in OpenAPI).
        known = insecure or bearer_principal(registry, request.scope["headers"]) is not None
        if not known:
            ready = ready.model_copy(update={"checks": {
                name: check.model_copy(update={"detail": "ok" if check.ok else "not ok"})
                for name, check in ready.checks.items()
            }})  # fmt: skip
        return JSONResponse(ready.model_dump(mode="json"), status_code=200 if ready.ready else 503)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ---- jobs ----------------------------------------------------------------------------------
    @app.get("/v1/jobs", tags=["jobs"], responses=READ_ERRORS)
    async def list_jobs(
        _: Viewer,
        cluster: NameQuery = None,
        state: NameQuery = None,
        mode: NameQuery = None,
        category: NameQuery = None,
        since: Annotated[datetime | None, Query(description="active at or after")] = None,
        until: Annotated[datetime | None, Query(description="monitoring began before")] = None,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> JobPage:
        """Live jobs (Temporal visibility) first, then finished ones (audit store), newest
        first. Follow `next_cursor` until it is null; a page may hold fewer than `limit` items.
        A job that finishes while you page may be listed twice (live, then finished)."""
        f = JobFilter(cluster, state, mode, category, _aware(since), _aware(until))
        return await gateway.list_jobs(f, cursor, limit)

    @app.get("/v1/jobs/{cluster}/{job_id}", tags=["jobs"], responses=JOB_ERRORS)
    async def job_detail(
        who: Viewer, cluster: ClusterPath, job_id: JobRefPath, workflow_id: WorkflowIdQuery = None
    ) -> JobDetail:
        """One job: attempts, anomalies, attributions, advice (with decisions) and
        reconciliation. The same shape for live and finished jobs. Output lines are withheld
        from a viewer token not allowed to read the job's user's output."""
        detail = await gateway.job_detail(cluster, job_id, workflow_id)
        return shown_to(who, detail.user, detail)

    @app.get("/v1/jobs/{cluster}/{job_id}/timeline", tags=["jobs"], responses=JOB_ERRORS)
    async def job_timeline(
        who: Viewer,
        cluster: ClusterPath,
        job_id: JobRefPath,
        workflow_id: WorkflowIdQuery = None,
        type_: Annotated[list[str] | None, Query(alias="type", max_length=20)] = None,
        cursor: Cursor = None,
        limit: Limit = 200,
    ) -> TimelinePage:
        """The job's audit events, oldest first (output lines withheld as for the job)."""
        page = await gateway.timeline(cluster, job_id, workflow_id, type_, cursor, limit)
        return await withheld_events(who, page)

    # ---- advice and approvals -----------------------------------------------------------------
    @app.get("/v1/advice", tags=["advice"], responses=READ_ERRORS)
    async def list_advice(
        _: Viewer,
        pending: Annotated[bool, Query(description="only advice waiting for approval")] = False,
        cluster: NameQuery = None,
        cursor: Cursor = None,
        limit: Annotated[int, Query(ge=1, le=200), PlainDigits] = 50,
    ) -> AdvicePage:
        """The latest advice of every live job (or only what waits for approval)."""
        return await gateway.list_advice(pending, cluster, cursor, limit)

    generation_path = Path(ge=0, le=MAX_GENERATION, description="advice generation")

    @app.post(
        "/v1/jobs/{cluster}/{job_id}/advice/{generation}/approve",
        tags=["advice"],
        responses=WRITE_ERRORS,
    )
    async def approve(
        principal: Operator,
        cluster: ClusterPath,
        job_id: JobRefPath,
        generation: Annotated[int, generation_path, PlainDigits],
        body: DecisionRequest | None = None,
        idempotency_key: IdempotencyKey = None,
    ) -> DecisionResponse:
        """Approve the advice waiting for approval; the workflow then carries it out."""
        return await _decide(principal, cluster, job_id, generation, True,
                             (body or DecisionRequest()).reason, idempotency_key)  # fmt: skip

    @app.post(
        "/v1/jobs/{cluster}/{job_id}/advice/{generation}/reject",
        tags=["advice"],
        responses=WRITE_ERRORS,
    )
    async def reject(
        principal: Operator,
        cluster: ClusterPath,
        job_id: JobRefPath,
        generation: Annotated[int, generation_path, PlainDigits],
        body: RejectRequest,
        idempotency_key: IdempotencyKey = None,
    ) -> DecisionResponse:
        """Reject the advice waiting for approval: nothing is done to the job."""
        return await _decide(
            principal, cluster, job_id, generation, False, body.reason, idempotency_key
        )

    async def _decide(
        principal: Principal, cluster: str, job_id: str, generation: int, approve: bool,
        reason: str, request_id: str | None,
    ) -> DecisionResponse:  # fmt: skip
        action = "approve" if approve else "reject"
        try:
            result = await gateway.decide(
                cluster, job_id, generation, approve=approve, reason=reason,
                principal=principal, request_id=request_id,
            )  # fmt: skip
        except ApiProblem as exc:
            metrics.decisions.labels(action, str(exc.status)).inc()
            raise
        metrics.decisions.labels(action, "ok").inc()
        log.info("%s/%s g%s %sd by %s", cluster, job_id, generation, action, principal.name)
        return result

    @app.post("/v1/jobs/{cluster}/{job_id}/mode", tags=["jobs"], responses=WRITE_ERRORS)
    async def set_mode(
        principal: Operator,
        cluster: ClusterPath,
        job_id: JobRefPath,
        body: ModeRequest,
        idempotency_key: IdempotencyKey = None,
    ) -> ModeResponse:
        """Switch a live job between observe and action mode."""
        try:
            result = await gateway.set_mode(
                cluster, job_id, body.mode, body.reason, principal, idempotency_key
            )
        except ApiProblem as exc:
            metrics.decisions.labels("mode", str(exc.status)).inc()
            raise
        metrics.decisions.labels("mode", "ok").inc()
        log.info("%s/%s mode -> %s by %s", cluster, job_id, body.mode.value, principal.name)
        return result

    # ---- audit ---------------------------------------------------------------------------------
    @app.get("/v1/audit", tags=["audit"], responses=READ_ERRORS)
    async def audit(
        who: Viewer,
        job: Annotated[
            int | None, Query(ge=0, le=MAX_JOB_ID, description="Slurm job id"), PlainDigits
        ] = None,
        cluster: NameQuery = None,
        workflow_id: WorkflowIdQuery = None,
        attempt: Annotated[int | None, Query(ge=0, le=2**31 - 1), PlainDigits] = None,
        type_: Annotated[list[str] | None, Query(alias="type", max_length=20)] = None,
        producer: NameQuery = None,
        since: Annotated[datetime | None, Query(description="inclusive")] = None,
        until: Annotated[datetime | None, Query(description="exclusive")] = None,
        order: Literal["asc", "desc"] = "asc",
        cursor: Cursor = None,
        limit: Limit = 100,
    ) -> AuditPage:
        """Audit events matching every filter, in id order, a page at a time (output lines
        withheld from a viewer for jobs of users it may not read)."""
        page = await gateway.audit(
            cluster=cluster, job_id=job, workflow_id=workflow_id, attempt=attempt, types=type_,
            producer=producer, since=_aware(since), until=_aware(until), cursor=cursor,
            limit=limit, order=order,
        )  # fmt: skip
        return await withheld_events(who, page)

    async def withheld_events(who: Principal, page: P) -> P:
        if who.role >= Role.OPERATOR or "*" in who.users:
            return page
        owner = await owners(gateway.store, (e.workflow_id for e in page.events))
        events = [shown_to(who, owner[e.workflow_id], e) for e in page.events]
        return page.model_copy(update={"events": events})

    # ---- node health (resurgo/api/nodes.py) ------------------------------------------------
    app.include_router(
        nodes_router(gateway, config.policy(None), require(Role.VIEWER), require(Role.OPERATOR))
    )

    app.include_router(arrays_router(gateway, require(Role.VIEWER), require(Role.OPERATOR)))

    # ---- one job's audit events, live (server-sent events; resurgo/api/events_stream.py) -------
    app.include_router(events_router(gateway, require(Role.VIEWER)))

    # ---- the Recovery Console (its own session cookie and CSRF check) ------------------------
    app.mount(CONSOLE, create_console(config, gateway, registry, insecure=insecure))

    @app.get("/", include_in_schema=False)
    async def console_home() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE}/", status_code=307)

    return app


def _aware(value: datetime | None) -> datetime | None:
    return as_utc(value)
