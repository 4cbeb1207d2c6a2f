"""Operator commands: `resurgo jobs|job|advice|approve|reject|mode` (and `audit --api`).

They talk to `resurgo api` over HTTP. The API URL and token come from `--api-url`/`--token`, else
`$RESURGO_API_URL`/`$RESURGO_API_TOKEN`, else the config's `[api]` section (`url`, or
`http://host:port`; `token_file`). Tables by default (tab-separated when piped), `--json` for
scripts (the API's own JSON).
Exit codes (`resurgo.cli.exits`): 0 done, 1 the API refused (409), 2 bad usage or config,
3 not found (404), 4 the API is unreachable or failed (5xx), 5 token or role refused (401/403).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from resurgo.cli.app import Role
from resurgo.cli.exits import ExitCode
from resurgo.cli.output import console, err, fail, show, warn
from resurgo.kinds import Mode

if TYPE_CHECKING:  # httpx and the config (pydantic-settings) load when a command calls the API
    import httpx

ENV_URL = "RESURGO_API_URL"
ENV_TOKEN = "RESURGO_API_TOKEN"
EXIT_REFUSED = ExitCode.FAILURE
EXIT_USAGE = ExitCode.USAGE
EXIT_UNAVAILABLE = ExitCode.UNAVAILABLE
# What an HTTP error status means for the exit code; anything else >= 500 is UNAVAILABLE.
STATUS_EXIT = {
    400: ExitCode.USAGE, 401: ExitCode.DENIED, 403: ExitCode.DENIED, 404: ExitCode.NOT_FOUND,
    409: ExitCode.FAILURE, 413: ExitCode.USAGE, 422: ExitCode.USAGE,
}  # fmt: skip

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
# The shapes the API takes (resurgo.api.job_refs; the CLI does not import the API): a job id,
# an array task `<array>_<task>`, a hetjob component `<leader>+<n>`.
JOB_REF = re.compile(r"[0-9]{1,19}(?:[_+][0-9]{1,10})?")
JobRefArg = Annotated[
    str,
    typer.Argument(
        help="Slurm job id; <array id>_<task id> for an array task; a heterogeneous job's id "
        "(<id>+<n>, one component as squeue prints it, names the whole job)"
    ),
]


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
        import httpx

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
        import httpx

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
    if isinstance(body, dict) and isinstance(body.get("error"), dict):  # {"error": {...}}
        error = body["error"]
        details = error.get("details")
        message = str(error.get("message") or error.get("code") or body)
        if isinstance(details, list) and details:
            message += ": " + "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}"
                for d in details if isinstance(d, dict)
            )  # fmt: skip
        return message
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # request validation errors (older servers)
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail
        )
    return str(detail or body)


def make_client(url: str | None, token: str | None, config: str | None) -> ApiClient:
    from resurgo.config import ConfigError, load_config

    try:
        settings = load_config(config).api
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)
    if not token and settings.token_file:
        try:
            token = Path(settings.token_file).expanduser().read_text().strip()
        except OSError as exc:
            fail(f"cannot read token file {settings.token_file}: {exc.strerror}", ExitCode.USAGE)
    return ApiClient(url or settings.client_url(), token)


@contextmanager
def api_call(client: ApiClient, waiting: str) -> Iterator[None]:
    """A spinner while waiting; API failures become a clear message and an exit code."""
    try:
        with err.status(waiting, spinner="dots"):
            yield
    except ApiUnreachable as exc:
        fail(str(exc), ExitCode.UNAVAILABLE)
    except ApiError as exc:
        what = {401: "not authenticated", 403: "not allowed", 404: "not found",
                409: "refused", 422: "invalid request"}.get(exc.status, "failed")  # fmt: skip
        err.print(Text(f"{what} ({exc.status}): {exc.detail}", style="red"), soft_wrap=True)
        code = STATUS_EXIT.get(exc.status, ExitCode.UNAVAILABLE if exc.status >= 500 else
                               ExitCode.FAILURE)  # fmt: skip
        raise typer.Exit(int(code)) from exc
    finally:
        client.close()


def _when_option(option: str, value: str | None) -> str | None:
    """`--since 7d` / `--until 2026-11-01` as the ISO date-time the API takes."""
    if value is None:
        return None
    from resurgo.durations import parse_since

    try:
        return parse_since(value).isoformat()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from exc


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
    mode: Annotated[Mode | None, typer.Option(help="only jobs in this mode")] = None,
    category: Annotated[str | None, typer.Option(help="last attribution category")] = None,
    since: Annotated[
        str | None, typer.Option(help="active at or after: 7d, 1h30m ago or an ISO date/time")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="began before: 7d, 1h30m ago or an ISO date/time")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="at most this many jobs")] = 50,
    cursor: Annotated[str | None, typer.Option(help="continue from a next_cursor")] = None,
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List jobs: live ones first, then finished ones (at most --limit; says when there is more)."""
    since, until = _when_option("--since", since), _when_option("--until", until)
    client = make_client(api_url, token, config)
    items: list[dict[str, Any]] = []
    degraded = False
    with api_call(client, "listing jobs…"):
        while len(items) < limit:
            page = client.get(
                "/v1/jobs", cluster=cluster, state=state, mode=mode and mode.value,
                category=category,
                since=since, until=until, cursor=cursor, limit=min(limit - len(items), 1000),
            )  # fmt: skip
            items += page["items"]
            cursor = page["next_cursor"]
            degraded = degraded or bool(page.get("degraded"))
            if not cursor:
                break
    if degraded:
        warn("Temporal is unreachable: jobs from the audit store only, live state unknown")
    if as_json:
        emit_json({"items": items, "next_cursor": cursor, "degraded": degraded})
        return
    table = Table("cluster", "job", "state", "mode", "attempt", "category", "approval", "user",
                  "first seen", title="jobs", title_justify="left")  # fmt: skip
    for j in items:
        table.add_row(
            Text(j["cluster"]), str(j.get("name") or j["job_id"]),
            Text(str(j["state"] or "-"), style="bold" if j["live"] else "dim"),
            Text(str(j["mode"] or "-")), str(j["attempt"] if j["attempt"] is not None else "-"),
            Text(str(j["last_category"] or "-")),
            Text("PENDING", style="yellow bold") if j["needs_approval"] else Text("-"),
            Text(str(j.get("user") or "-")), _when(j.get("first_seen")),
        )  # fmt: skip
    show(table if items else Text("no jobs"))
    if cursor:
        err.print(Text(f"more jobs than --limit {limit}; next page: --cursor {cursor}"))


def job(
    cluster: ClusterArg,
    job_id: JobRefArg,
    workflow_id: Annotated[str | None, typer.Option(help="when a Slurm id was reused")] = None,
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show one job: attempts, anomalies, attribution, advice, reconciliation."""
    if not JOB_REF.fullmatch(job_id):  # it goes into a URL path: checked before it is sent
        fail(f"a job is its Slurm id or <array id>_<task id>, got {job_id!r}", ExitCode.USAGE)
    client = make_client(api_url, token, config)
    with api_call(client, f"reading {cluster}/{job_id}…"):
        d = client.get(f"/v1/jobs/{cluster}/{job_id}", workflow_id=workflow_id)
    if as_json:
        emit_json(d)
        return
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows = [("asked for", d["named_by"])] if d.get("named_by") else []  # a component's own id
    rows += [
        ("job", f"{d['cluster']}/{d.get('name') or d['job_id']}  ({d['workflow_id']})"),
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
    show(head)
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
    show(attempts)
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
    show(advice)
    for warning in d.get("warnings", []):
        warn(warning)


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
            Text(j["cluster"]), str(j.get("name") or j["job_id"]), f"g{a['generation']}",
            Text(_describe(a)),
            Text("yes", style="yellow bold") if item["pending"] else "no",
            _when(item.get("expires_at")), Text(str(item["state"] or "-")),
            Text(str(item["mode"] or "-")), Text(a["reason"]),
        )  # fmt: skip
    show(table if page["items"] else Text("nothing pending" if pending else "no advice"))
    for warning in page.get("warnings", []):
        warn(warning)


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
        fail("--reason must not be empty", ExitCode.USAGE)
    _decide("reject", cluster, job_id, generation, reason, as_json, api_url, token, config)


def mode(
    cluster: ClusterArg,
    job_id: JobArg,
    new_mode: Annotated[Mode, typer.Argument(help="the new mode")],
    reason: Annotated[str, typer.Option(help="kept in the audit trail")] = "",
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Switch a live job between observe and action mode."""
    client = make_client(api_url, token, config)
    with api_call(client, f"switching {cluster}/{job_id} to {new_mode}…"):
        result = client.post(
            f"/v1/jobs/{cluster}/{job_id}/mode", {"mode": new_mode.value, "reason": reason}
        )
    if as_json:
        emit_json(result)
        return
    console.print(
        Text(f"{cluster}/{job_id} is now in {result['status']['mode']} mode "
             f"(by {result['change']['actor']})")
    )  # fmt: skip


# Token names become the actor in the audit trail: keep them to one plain word.
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+\-]{0,127}")


def api_token(
    name: Annotated[str, typer.Argument(help="the principal; recorded as the actor")],
    role: Annotated[Role, typer.Option(help="what the token may do")] = Role.VIEWER,
) -> None:
    """Make a new API token: prints the token once (stdout), and the tokens-file entry that
    accepts it (stderr; paste it into the file named by --tokens-file or [api] tokens_file)."""
    import tomli_w

    from resurgo.tokens import hash_token, new_token

    if not TOKEN_NAME.fullmatch(name):
        raise typer.BadParameter(
            "letters, digits and _.@+- only (it is recorded as the actor)", param_hint="NAME"
        )
    token = new_token()
    entry = {name: {"role": role.value, "sha256": hash_token(token)}}
    err.print("token (shown once; give it to the user, e.g. as $RESURGO_API_TOKEN):")
    typer.echo(token)
    err.print("entry for the API tokens file (only the digest is stored):")
    err.print(Text(tomli_w.dumps({"tokens": entry}).rstrip()), soft_wrap=True)
    err.print(Text("(in the main config file the same table is named [api.tokens.NAME])",
                   style="dim"))  # fmt: skip


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
