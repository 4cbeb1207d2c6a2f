"""Operator commands: `resurgo jobs|job|advice|approve|reject|mode` (and `audit --api`).

They talk to `resurgo api` over HTTP. The API URL and token come from `--api-url`/`--token`, else
`$RESURGO_API_URL`/`$RESURGO_API_TOKEN`, else the config's `[api]` section (`url`, or
`http://host:port`; `token_file`). Tables by default, `--json` for scripts (the API's own JSON).
Exit codes: 0 done, 1 the API refused (the message says why), 2 bad usage or config, 3 the API
is unreachable or failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from resurgo.config import ConfigError, load_config

console = Console()
err = Console(stderr=True)

ENV_URL = "RESURGO_API_URL"
ENV_TOKEN = "RESURGO_API_TOKEN"
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

UrlOpt = Annotated[
    str | None,
    typer.Option("--api-url", envvar=ENV_URL, help="Resurgo API base URL", show_default=False),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar=ENV_TOKEN, help="API bearer token", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the API's JSON instead of a table")]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="TOML config (or $RESURGO_CONFIG)")
]
ClusterArg = Annotated[str, typer.Argument(help="cluster name")]
JobArg = Annotated[int, typer.Argument(help="Slurm job id")]


class ApiError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class ApiUnreachable(Exception):
    pass


class ApiClient:
    """A small synchronous client of the Resurgo API."""

    def __init__(self, url: str, token: str | None, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
    ) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self._http.request(method, path, params=clean, json=body)
        except httpx.TransportError as exc:
            raise ApiUnreachable(f"cannot reach the Resurgo API at {self.url}: {exc}") from exc
        if resp.status_code >= 400:
            raise ApiError(resp.status_code, _detail(resp))
        return resp.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body=body)


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500] or resp.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # request validation errors
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail
        )
    return str(detail or body)


def make_client(url: str | None, token: str | None, config: str | None) -> ApiClient:
    try:
        settings = load_config(config).api
    except ConfigError as exc:
        err.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(EXIT_USAGE) from exc
    if not token and settings.token_file:
        try:
            token = Path(settings.token_file).expanduser().read_text().strip()
        except OSError as exc:
            err.print(f"[red]cannot read token file {settings.token_file}:[/red] {exc.strerror}")
            raise typer.Exit(EXIT_USAGE) from exc
    return ApiClient(url or settings.client_url(), token)


@contextmanager
def api_call(client: ApiClient, waiting: str) -> Iterator[None]:
    """A spinner while waiting; API failures become a clear message and an exit code."""
    try:
        with err.status(waiting, spinner="dots"):
            yield
    except ApiUnreachable as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_UNAVAILABLE) from exc
    except ApiError as exc:
        what = {401: "not authenticated", 403: "not allowed", 404: "not found",
                409: "refused", 422: "invalid request"}.get(exc.status, "failed")  # fmt: skip
        err.print(Text(f"{what} ({exc.status}): {exc.detail}", style="red"))
        raise typer.Exit(EXIT_UNAVAILABLE if exc.status >= 500 else EXIT_REFUSED) from exc
    finally:
        client.close()


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _when(value: str | None) -> str:
    if not value:
        return "-"
    try:
        at = datetime.fromisoformat(value).astimezone(UTC)
    except ValueError:
        return value
    return at.strftime("%Y-%m-%d %H:%M:%S")


def _nodes(values: list[str] | None) -> str:
    return ",".join(values or []) or "-"


def _describe(advice: dict[str, Any]) -> str:
    kind = str(advice.get("kind", "?"))
    nodes = advice.get("nodes") or []
    return f"{kind} {_nodes(nodes)}" if nodes else kind


# ---------------------------------------------------------------------------------- commands


def jobs(
    cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
    state: Annotated[
        str | None, typer.Option(help="phase or outcome, e.g. awaiting_approval")
    ] = None,
    mode: Annotated[str | None, typer.Option(help="observe | action")] = None,
    category: Annotated[str | None, typer.Option(help="last attribution category")] = None,
    since: Annotated[str | None, typer.Option(help="active at or after (ISO 8601)")] = None,
    until: Annotated[str | None, typer.Option(help="began before (ISO 8601)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="at most this many jobs")] = 50,
    cursor: Annotated[str | None, typer.Option(help="continue from a next_cursor")] = None,
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List jobs: live ones first, then finished ones."""
    client = make_client(api_url, token, config)
    items: list[dict[str, Any]] = []
    with api_call(client, "listing jobs…"):
        while len(items) < limit:
            page = client.get(
                "/v1/jobs", cluster=cluster, state=state, mode=mode, category=category,
                since=since, until=until, cursor=cursor, limit=min(limit - len(items), 1000),
            )  # fmt: skip
            items += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                break
    if as_json:
        emit_json({"items": items, "next_cursor": cursor})
        return
    table = Table("cluster", "job", "state", "mode", "attempt", "category", "approval", "user",
                  "first seen", title="jobs", title_justify="left")  # fmt: skip
    for j in items:
        table.add_row(
            Text(j["cluster"]), str(j["job_id"]),
            Text(str(j["state"] or "-"), style="bold" if j["live"] else "dim"),
            Text(str(j["mode"] or "-")), str(j["attempt"] if j["attempt"] is not None else "-"),
            Text(str(j["last_category"] or "-")),
            Text("PENDING", style="yellow bold") if j["needs_approval"] else Text("-"),
            Text(str(j.get("user") or "-")), _when(j.get("first_seen")),
        )  # fmt: skip
    console.print(table if items else Text("no jobs"))
    if cursor:
        err.print(f"more: --cursor {cursor}")


def job(
    cluster: ClusterArg,
    job_id: JobArg,
    workflow_id: Annotated[str | None, typer.Option(help="when a Slurm id was reused")] = None,
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show one job: attempts, anomalies, attribution, advice, reconciliation."""
    client = make_client(api_url, token, config)
    with api_call(client, f"reading {cluster}/{job_id}…"):
        d = client.get(f"/v1/jobs/{cluster}/{job_id}", workflow_id=workflow_id)
    if as_json:
        emit_json(d)
        return
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows = [
        ("job", f"{d['cluster']}/{d['job_id']}  ({d['workflow_id']})"),
        ("state", f"{d['phase'] or '-'}" + ("  (live)" if d["live"] else "  (finished)")),
        ("mode", str(d["mode"] or "-")),
        ("attempt", str(d["attempt"] if d["attempt"] is not None else "-")),
        ("last category", str(d["last_category"] or "-")),
        ("excluded nodes", _nodes(d["excluded_nodes"])),
        ("outcome", str(d["outcome"] or "-")),
        ("user / partition", f"{d.get('user') or '-'} / {d.get('partition') or '-'}"),
    ]
    pending = d.get("pending_approval")
    if pending:
        rows.append(("AWAITING APPROVAL", f"g{pending['generation']} {_describe(pending)}: "
                                          f"{pending['reason']}"))  # fmt: skip
    for key, value in rows:
        head.add_row(key, Text(value))
    console.print(head)
    attempts = Table("attempt", "started", "nodes", "excluded", "progress", "anomalies",
                     "attribution", title="attempts", title_justify="left")  # fmt: skip
    for a in d["attempts"]:
        progress = "-" if a["first_iteration"] is None else f"it {a['first_iteration']}"
        if a["resumed_from"] is not None:
            progress += f" (resumed {a['resumed_from']})"
        attempts.add_row(
            str(a["attempt"]), _when(a["started_at"]), Text(_nodes(a["nodes"])),
            Text(_nodes(a["excluded_nodes"])), progress,
            Text("; ".join(f"{x['kind']}: {x['summary']}" for x in a["anomalies"]) or "-"),
            Text("; ".join(f"{x['category']} {_nodes(x['culprit_nodes'])} "
                           f"({x['confidence']:.2f})" for x in a["attributions"]) or "-"),
        )  # fmt: skip
    console.print(attempts)
    advice = Table("gen", "attempt", "advice", "state", "decided by", "reconciliation", "reason",
                   title="advice", title_justify="left")  # fmt: skip
    for v in d["advice"]:
        a, decision, rec = v["advice"], v.get("decision"), v.get("reconciliation")
        advice.add_row(
            f"g{a['generation']}", str(a["attempt"]), Text(_describe(a)), Text(v["state"]),
            Text(f"{decision['actor']}" + (f": {decision['reason']}" if decision["reason"]
                                           else "") if decision else "-"),
            Text(f"{rec['status']} ({rec['reason']})" if rec else "-"), Text(a["reason"]),
        )  # fmt: skip
    console.print(advice)
    for warning in d.get("warnings", []):
        err.print(Text(f"warning: {warning}", style="yellow"))


def advice(
    pending: Annotated[
        bool, typer.Option("--pending", help="only advice awaiting approval")
    ] = False,
    cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """The latest advice of live jobs (or only what waits for approval)."""
    client = make_client(api_url, token, config)
    with api_call(client, "reading advice…"):
        page = client.get("/v1/advice", pending=str(pending).lower(), cluster=cluster, limit=limit)
    if as_json:
        emit_json(page)
        return
    table = Table("cluster", "job", "gen", "advice", "pending", "expires", "state", "mode",
                  "reason", title="pending approvals" if pending else "advice",
                  title_justify="left")  # fmt: skip
    for item in page["items"]:
        a, j = item["advice"], item["job"]
        table.add_row(
            Text(j["cluster"]), str(j["job_id"]), f"g{a['generation']}", Text(_describe(a)),
            Text("yes", style="yellow bold") if item["pending"] else "no",
            _when(item.get("expires_at")), Text(str(item["state"] or "-")),
            Text(str(item["mode"] or "-")), Text(a["reason"]),
        )  # fmt: skip
    console.print(table if page["items"] else Text("nothing pending" if pending else "no advice"))
    for warning in page.get("warnings", []):
        err.print(Text(f"warning: {warning}", style="yellow"))


def _decide(
    verb: str, cluster: str, job_id: int, generation: int, reason: str, as_json: bool,
    api_url: str | None, token: str | None, config: str | None,
) -> None:  # fmt: skip
    client = make_client(api_url, token, config)
    with api_call(client, f"{verb.rstrip('e')}ing g{generation} of {cluster}/{job_id}…"):
        result = client.post(
            f"/v1/jobs/{cluster}/{job_id}/advice/{generation}/{verb}", {"reason": reason}
        )
    if as_json:
        emit_json(result)
        return
    decision = result["decision"]
    console.print(
        Text(f"{cluster}/{job_id} g{generation}: {result['ack']['message']} "
             f"by {decision['actor']}" + (f" ({reason})" if reason else ""))
    )  # fmt: skip


def approve(
    cluster: ClusterArg,
    job_id: JobArg,
    generation: Annotated[int, typer.Argument(help="advice generation (see `resurgo advice`)")],
    reason: Annotated[str, typer.Option(help="kept in the audit trail")] = "",
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Approve the advice waiting for approval; Resurgo then carries it out."""
    _decide("approve", cluster, job_id, generation, reason, as_json, api_url, token, config)


def reject(
    cluster: ClusterArg,
    job_id: JobArg,
    generation: Annotated[int, typer.Argument(help="advice generation (see `resurgo advice`)")],
    reason: Annotated[str, typer.Option(help="why (required; kept in the audit trail)")],
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Reject the advice waiting for approval: nothing is done to the job."""
    if not reason.strip():
        err.print("[red]--reason must not be empty[/red]")
        raise typer.Exit(EXIT_USAGE)
    _decide("reject", cluster, job_id, generation, reason, as_json, api_url, token, config)


def mode(
    cluster: ClusterArg,
    job_id: JobArg,
    new_mode: Annotated[str, typer.Argument(metavar="observe|action", help="the new mode")],
    reason: Annotated[str, typer.Option(help="kept in the audit trail")] = "",
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Switch a live job between observe and action mode."""
    if new_mode not in ("observe", "action"):
        err.print(f"[red]mode must be observe or action, not {new_mode!r}[/red]")
        raise typer.Exit(EXIT_USAGE)
    client = make_client(api_url, token, config)
    with api_call(client, f"switching {cluster}/{job_id} to {new_mode}…"):
        result = client.post(
            f"/v1/jobs/{cluster}/{job_id}/mode", {"mode": new_mode, "reason": reason}
        )
    if as_json:
        emit_json(result)
        return
    console.print(
        Text(f"{cluster}/{job_id} is now in {result['status']['mode']} mode "
             f"(by {result['change']['actor']})")
    )  # fmt: skip


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
) -> None:
    """`resurgo audit --api`: the same timeline, read through the API."""
    from resurgo.audit.store import StoredAuditEvent
    from resurgo.cli.timeline import render_timeline, timeline_json

    if job_id is None:
        jobs(cluster=cluster, as_json=as_json, api_url=api_url, token=token, config=config)
        return
    client = make_client(api_url, token, config)
    raw: list[dict[str, Any]] = []
    cursor: str | None = None
    with api_call(client, f"reading the audit trail of job {job_id}…"):
        while True:
            page = client.get("/v1/audit", job=job_id, cluster=cluster, attempt=attempt,
                              type=types or None, cursor=cursor, limit=1000)  # fmt: skip
            raw += page["events"]
            cursor = page["next_cursor"]
            if not cursor:
                break
    events = [StoredAuditEvent.model_validate(e) for e in raw]
    if not events:
        err.print(f"no audit events for job {job_id}" + (f" on {cluster}" if cluster else ""))
        raise typer.Exit(EXIT_REFUSED)
    if as_json:
        typer.echo(timeline_json(events))
    else:
        render_timeline(events, console)


def api_token(
    name: Annotated[str, typer.Argument(help="the principal; recorded as the actor")],
    role: Annotated[str, typer.Option(help="viewer | operator | admin")] = "viewer",
) -> None:
    """Make a new API token: prints the token once, and the config entry that accepts it."""
    from resurgo.tokens import hash_token, new_token

    if role not in ("viewer", "operator", "admin"):
        err.print(f"[red]role must be viewer, operator or admin, not {role!r}[/red]")
        raise typer.Exit(EXIT_USAGE)
    token = new_token()
    err.print("token (shown once; give it to the user, e.g. as $RESURGO_API_TOKEN):")
    typer.echo(token)
    err.print("add to the config (only the digest is stored):")
    err.print(
        Text(f'[api.tokens.{json.dumps(name)}]\nrole = "{role}"\nsha256 = "{hash_token(token)}"')
    )


COMMANDS: dict[str, Callable[..., None]] = {
    "jobs": jobs,
    "job": job,
    "advice": advice,
    "approve": approve,
    "reject": reject,
    "mode": mode,
    "api-token": api_token,
}


def register(app: typer.Typer) -> None:
    """Add the operator commands to the `resurgo` CLI."""
    for name, fn in COMMANDS.items():
        app.command(name)(fn)
