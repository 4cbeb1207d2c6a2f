"""The Recovery Console: server-rendered pages (Jinja2, autoescaped) with a little JavaScript
from the package itself, mounted by the API at `/console` (and `/` leads there).

Reads go through the API's own `Gateway`; approvals and mode changes call exactly the methods
the `/v1` routes call (`Gateway.decide`, `Gateway.set_mode`), with the idempotency key of the
rendered form, so a double submit is answered once. Pages that tell a job's story read the
audit store, so they still work when Temporal is down (and say so).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.middleware.sessions import SessionMiddleware

from resurgo.api.arrays import ArrayReads
from resurgo.api.auth import Principal, Role, TokenRegistry
from resurgo.api.console.insights import gates_of, nodes_view, overview_view
from resurgo.api.console.job_page import job_page_context
from resurgo.api.console.live import MAX_JOBS, JobsSnapshot, LiveJobs, row_from_item
from resurgo.api.console.session import (
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_MAX_AGE,
    ConsoleAuth,
    NotLoggedIn,
    Refused,
    read_form,
)
from resurgo.api.core import ApiProblem
from resurgo.api.job_refs import slurm_ref
from resurgo.api.listing import JobFilter
from resurgo.api.service import Gateway
from resurgo.api.visibility import shown_to
from resurgo.config import ResurgoConfig
from resurgo.contracts import Mode
from resurgo.metrics.reader import DigestReader

log = logging.getLogger("resurgo.api.console")

HERE = Path(__file__).resolve().parent
PREFIX = "/console"
UI_ENV = "RESURGO_TEMPORAL_UI_URL"
MAX_CURSOR = 4096  # the API's cursors are a few hundred characters
NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@+-")


def temporal_ui_base(config: ResurgoConfig) -> str:
    """$RESURGO_TEMPORAL_UI_URL (kept from before the config key), else `temporal.ui_url`, else
    the dev server's UI next to the configured frontend."""
    for explicit in (os.environ.get(UI_ENV, ""), config.temporal.ui_url or ""):
        explicit = explicit.strip().rstrip("/")
        if explicit.startswith(("http://", "https://")):
            return explicit
    host = config.temporal.address.rpartition(":")[0] or "localhost"
    return f"http://{host}:8233"


def session_cookie_secure(config: ResurgoConfig, insecure: bool) -> bool:
    """`api.session_cookie_secure`, or when unset: Secure unless the API listens on loopback
    only (or runs --insecure, which is loopback only), where browsers talk plain http to it."""
    if config.api.session_cookie_secure is not None:
        return config.api.session_cookie_secure
    from resurgo.api.server import is_loopback  # the server module imports this one

    return not (insecure or is_loopback(config.api.host))


def templates() -> Jinja2Templates:
    # Autoescape everything: job names, log lines and reasons are written by any cluster user.
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["ago"] = _ago
    env.filters["iso"] = lambda v: v.astimezone(UTC).isoformat() if v else ""
    env.filters["hhmm"] = lambda v: v.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if v else ""
    return Jinja2Templates(env=env)


def _ago(value: datetime | None) -> str:
    if value is None:
        return ""
    seconds = int((datetime.now(UTC) - value).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds // size}{unit} ago"
    return f"{max(seconds, 0)}s ago"


def create_console(
    config: ResurgoConfig, gateway: Gateway, registry: TokenRegistry, *, insecure: bool
) -> FastAPI:
    auth = ConsoleAuth(registry, insecure)
    digest = DigestReader(gateway.store, max_age=1.0)
    live = LiveJobs(gateway, digest)
    pages = templates()
    ui_base = temporal_ui_base(config)
    namespace = config.temporal.namespace

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.live = live
    app.add_middleware(
        SessionMiddleware,
        secret_key=auth.session_key(),
        session_cookie=SESSION_COOKIE,
        max_age=SESSION_MAX_AGE,
        path=PREFIX,
        same_site="strict",
        https_only=session_cookie_secure(config, insecure),
    )
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def workflow_url(workflow_id: str) -> str:
        ns, wid = quote(namespace, safe=""), quote(workflow_id, safe="")
        return f"{ui_base}/namespaces/{ns}/workflows/{wid}"

    def render(
        request: Request, name: str, principal: Principal | None, status: int = 200, **context: Any
    ) -> HTMLResponse:
        flash = request.session.pop("flash", None)
        base = {
            "prefix": PREFIX,
            "principal": principal,
            "insecure": insecure,
            "can_act": principal is not None and principal.role >= Role.OPERATOR,
            "csrf": auth.csrf_token(request),
            "csrf_field": CSRF_FIELD,
            "flash": flash,
            "workflow_url": workflow_url,
            "new_key": lambda: uuid.uuid4().hex,
        }
        response = pages.TemplateResponse(request, name, {**base, **context}, status_code=status)
        # The pages show job data: never cached, never framed, no script from elsewhere.
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "frame-ancestors 'none'; form-action 'self'"
        )
        return response

    def back(path: str, message: str, ok: bool, request: Request) -> RedirectResponse:
        request.session["flash"] = {"ok": ok, "text": message}
        return RedirectResponse(PREFIX + path, status_code=303)

    @app.exception_handler(NotLoggedIn)
    async def to_login(request: Request, _: NotLoggedIn) -> Response:
        if request.url.path.endswith("/stream"):
            return Response("log in first", status_code=401)
        return RedirectResponse(f"{PREFIX}/login", status_code=303)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> HTMLResponse:
        try:
            principal: Principal | None = auth.principal(request)
        except NotLoggedIn:
            principal = None
        return render(request, "error.html", principal, exc.status, detail=exc.detail)

    # ---- login -------------------------------------------------------------------------------
    @app.get("/login")
    async def login_page(request: Request) -> HTMLResponse:
        return render(request, "login.html", None, error=None)

    @app.post("/login")
    async def login(request: Request) -> Response:
        fields = await read_form(request)
        try:
            auth.check_csrf(request, fields)
        except Refused:
            return render(request, "login.html", None, 403, error="The form expired: try again.")
        principal = auth.login(request, fields.get("token", ""))
        if principal is None:
            log.warning("console: a login with an unknown token was refused")
            return render(request, "login.html", None, 401, error="That token is not valid.")
        log.info("console: %s logged in (%s)", principal.name, principal.role.name.lower())
        return RedirectResponse(f"{PREFIX}/", status_code=303)

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        await auth.form(request, Role.VIEWER)
        request.session.clear()
        return RedirectResponse(f"{PREFIX}/login", status_code=303)

    # ---- jobs ------------------------------------------------------------------------------
    arrays = ArrayReads(gateway)
    rows_template = pages.get_template("_job_rows.html")
    rendered: dict[str, Markup] = {}

    def job_rows(snap: JobsSnapshot) -> Markup:
        """The rows of a snapshot, rendered (autoescaped) once for every page view and stream:
        a thousand rows cost one render per change, not one per viewer."""
        if snap.fingerprint not in rendered:
            rendered.clear()
            html = rows_template.render(snap=snap, prefix=PREFIX, workflow_url=workflow_url)
            # Autoescaped by the template above; Markup only keeps it from being escaped twice.
            rendered[snap.fingerprint] = Markup(html.replace("\n", " "))
        return rendered[snap.fingerprint]

    @app.get("/")
    async def jobs(request: Request) -> HTMLResponse:
        principal = auth.principal(request)
        snap = await live.snapshot()
        gates = await asyncio.to_thread(gates_of, config, digest)
        return render(
            request, "jobs.html", principal, snap=snap, gates=gates, rows=job_rows(snap),
            truncated=len(snap.rows) >= MAX_JOBS,
        )  # fmt: skip

    @app.get("/all")
    async def all_jobs(
        request: Request, cursor: str | None = None, limit: int = MAX_JOBS
    ) -> Response:
        """Every job, page by page, beyond the live list's latest MAX_JOBS: the API's own
        listing (live first, then finished, newest first) and its opaque cursor."""
        principal = auth.principal(request)
        if not 1 <= limit <= MAX_JOBS or (cursor is not None and len(cursor) > MAX_CURSOR):
            raise Refused(400, f"limit is 1 to {MAX_JOBS}; the cursor comes from a “more” link")
        try:
            page = await asyncio.wait_for(gateway.list_jobs(JobFilter(), cursor, limit), 30)
        except ApiProblem as exc:
            raise Refused(exc.status, f"This page cannot be listed: {exc.detail}") from exc
        except (TimeoutError, RuntimeError, OSError) as exc:
            raise Refused(503, f"The jobs cannot be listed right now ({exc}).") from exc
        seen = await asyncio.to_thread(
            digest.view, lambda d: {i.workflow_id: d.summary_of(i.workflow_id) for i in page.items}
        )
        rows = [row_from_item(i, seen.get(i.workflow_id)) for i in page.items]
        degraded = (
            "Temporal cannot be read: these jobs come from the audit trail; whether one is still "
            "monitored is unknown."
            if page.degraded
            else None
        )
        snap = JobsSnapshot(rows, degraded, 0.0)
        more = f"{PREFIX}/all?{urlencode({'cursor': page.next_cursor, 'limit': limit})}"
        return render(
            request, "all_jobs.html", principal, snap=snap, limit=limit,
            more=more if page.next_cursor else None, first=cursor is None,
            # Autoescaped by the rows template; Markup only keeps it from being escaped twice.
            rows=Markup(rows_template.render(snap=snap, prefix=PREFIX, workflow_url=workflow_url)),
        )  # fmt: skip

    @app.get("/stream")
    async def stream(request: Request) -> EventSourceResponse:
        auth.principal(request)

        async def events() -> AsyncIterator[ServerSentEvent]:
            async for snap in live.changes():
                yield ServerSentEvent(data=str(job_rows(snap)), event="jobs", id=snap.fingerprint)
                yield ServerSentEvent(data=snap.degraded or "", event="degraded")

        return EventSourceResponse(events(), ping=15, headers={"Cache-Control": "no-store"})

    @app.get("/jobs/{cluster}/{job_id}")
    async def job(request: Request, cluster: str, job_id: str) -> HTMLResponse:
        principal = auth.principal(request)
        _check_name(cluster)
        context = await job_page_context(
            gateway, principal, cluster, job_id, request.query_params.get("workflow_id")
        )
        gates = await asyncio.to_thread(gates_of, config, digest)
        return render(request, "job.html", principal, gates=gates.get(cluster), **context)

    @app.post("/jobs/{cluster}/{job_id}/mode")
    async def set_mode(request: Request, cluster: str, job_id: str) -> Response:
        principal, fields = await auth.form(request, Role.OPERATOR)
        _check_name(cluster)
        _check_job(job_id)
        here = f"/jobs/{cluster}/{job_id}"
        if fields.get("confirm") != "yes":
            return back(here, "Mode not changed: tick the confirmation first.", False, request)
        try:
            mode = Mode(fields.get("mode", ""))
            await gateway.set_mode(
                cluster, job_id, mode, fields.get("reason", "")[:2000], principal, _key(fields)
            )
        except ValueError:
            return back(here, "Unknown mode.", False, request)
        except ApiProblem as exc:
            return back(here, f"Mode not changed: {exc.detail}", False, request)
        return back(here, f"{cluster}/{job_id} is now in {mode.value} mode.", True, request)

    @app.get("/arrays/{cluster}/{array_id}")
    async def array(request: Request, cluster: str, array_id: str) -> HTMLResponse:
        principal = auth.principal(request)
        _check_name(cluster)
        if not (array_id.isascii() and array_id.isdigit() and len(array_id) <= 19):
            raise Refused(400, "not an array id: the array's Slurm job id, digits only")
        try:
            found = await asyncio.wait_for(arrays.array(cluster, int(array_id)), 30)
        except ApiProblem as exc:
            raise Refused(exc.status, exc.detail) from exc
        except (TimeoutError, RuntimeError, OSError) as exc:
            raise Refused(503, f"The array cannot be read right now ({exc}).") from exc
        # Output lines reach only those allowed to read this user's jobs (as in the API).
        shown = shown_to(principal, found.user, found)
        return render(request, "array.html", principal, a=shown)

    # ---- approvals -----------------------------------------------------------------------------
    @app.get("/approvals")
    async def approvals(request: Request) -> HTMLResponse:
        principal = auth.principal(request)
        degraded = None
        items: list[Any] = []
        try:
            page = await asyncio.wait_for(gateway.list_advice(True, None, None, 200), 8)
            items = page.items
        except (ApiProblem, TimeoutError, RuntimeError, OSError) as exc:
            degraded = (
                f"Temporal cannot be read ({getattr(exc, 'detail', exc)}): pending "
                "approvals cannot be listed or decided until it is back."
            )
        return render(
            request,
            "approvals.html",
            principal,
            items=items,
            degraded=degraded,
            now=datetime.now(UTC),
        )

    @app.post("/approvals/{cluster}/{job_id}/{generation}")
    async def decide(request: Request, cluster: str, job_id: str, generation: int) -> Response:
        principal, fields = await auth.form(request, Role.OPERATOR)
        _check_name(cluster)
        _check_job(job_id)
        verdict = fields.get("decision")
        reason = fields.get("reason", "").strip()[:2000]
        if verdict not in ("approve", "reject"):
            return back("/approvals", "Choose approve or reject.", False, request)
        if verdict == "reject" and not reason:
            return back(
                "/approvals",
                "A rejection needs a reason (it is kept in the audit trail).",
                False,
                request,
            )
        try:
            await gateway.decide(
                cluster,
                job_id,
                generation,
                approve=verdict == "approve",
                reason=reason,
                principal=principal,
                request_id=_key(fields),
            )
        except ApiProblem as exc:
            return back("/approvals", f"Not recorded: {exc.detail}", False, request)
        log.info(
            "console: %s/%s g%s %sd by %s", cluster, job_id, generation, verdict, principal.name
        )
        return back("/approvals", f"{cluster}/{job_id} g{generation} {verdict}d.", True, request)

    # ---- nodes and overview ------------------------------------------------------------------
    @app.get("/nodes")
    async def nodes(request: Request) -> HTMLResponse:
        principal = auth.principal(request)
        view = await asyncio.to_thread(nodes_view, digest)
        return render(request, "nodes.html", principal, view=view)

    @app.get("/overview")
    async def overview(request: Request) -> HTMLResponse:
        principal = auth.principal(request)
        view = await asyncio.to_thread(overview_view, digest)
        gates = await asyncio.to_thread(gates_of, config, digest)
        return render(request, "overview.html", principal, view=view, gates=gates)

    return app


def _check_name(cluster: str) -> None:
    if not cluster or len(cluster) > 128 or not set(cluster) <= NAME_OK:
        raise Refused(400, "not a cluster name")


def _check_job(job_id: str) -> None:
    if slurm_ref(job_id) is None:
        raise Refused(400, "not a job: its Slurm id, or <array id>_<task id> for an array task")


def _key(fields: dict[str, str]) -> str | None:
    """The rendered form's idempotency key (a retry of the same form is answered once)."""
    key = fields.get("key", "")
    return f"console-{key}" if key.isalnum() and len(key) <= 64 else None


__all__ = ["PREFIX", "create_console", "temporal_ui_base"]
