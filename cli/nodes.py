"""`resurgo nodes`: the node health ledger (nodes by risk, one node's history) and marking a
drained node repaired so its validation starts.

Heavy imports (the store, Temporal) load inside the commands.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.text import Text

from resurgo.cli.app import subcommands
from resurgo.cli.exits import ExitCode
from resurgo.cli.output import console, err, fail, show

app = subcommands("Node health: the ledger of failures, drains and validations per node.")
app.info.no_args_is_help = False
app.info.invoke_without_command = True

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="TOML config (or $RESURGO_CONFIG)")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON instead of a table")]
UrlOpt = Annotated[str | None, typer.Option("--url", help="audit store URL (default: config)")]


def _records(config: str | None, url: str | None, cluster: str | None, node: str | None):  # type: ignore[no-untyped-def]
    from resurgo.audit.store import AuditStore, store_url_from_env
    from resurgo.config import ConfigError, load_config
    from resurgo.nodes.read import node_records

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)
    with AuditStore(url or cfg.audit.url or store_url_from_env()) as store:
        return node_records(store, cluster=cluster, node=node, policy=cfg.policy(None))


@app.callback()
def nodes(
    ctx: typer.Context,
    cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    url: UrlOpt = None,
) -> None:
    """List nodes by risk (distinct jobs blamed within the lemon window), with their counts."""
    if ctx.invoked_subcommand is not None:
        return
    records = _records(config, url, cluster, None)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json", exclude={"history"}) for r in records]))
        return
    from rich.table import Table  # only the human view draws one

    table = Table("cluster", "node", "state", "risk", "failures", "jobs", "excl", "drains",
                  "resumes", "last failure")  # fmt: skip
    for r in records:
        jobs = ",".join(str(j) for j in r.failing_jobs[-8:])
        last = r.last_failure_at.strftime("%Y-%m-%d %H:%M:%S") if r.last_failure_at else "-"
        state = Text(r.state, style="red" if r.state != "in_service" else "")
        table.add_row(r.cluster, r.node, state, str(r.risk), str(r.failures), jobs or "-",
                      str(r.exclusions), str(r.drains), str(r.resumes), last)  # fmt: skip
    show(table)


@app.command("show")
def show_node(
    cluster: Annotated[str, typer.Argument(help="cluster name")],
    node: Annotated[str, typer.Argument(help="node name")],
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    url: UrlOpt = None,
) -> None:
    """One node's history: failures (job, category, evidence), exclusions, drains, checks."""
    records = _records(config, url, cluster, node)
    if not records:
        fail(f"no history for node {node} of cluster {cluster}", ExitCode.NOT_FOUND)
    record = records[0]
    if as_json:
        typer.echo(record.model_dump_json())
        return
    console.print(Text(f"{cluster}/{node}: {record.state}, risk {record.risk}, "
                       f"{record.failures} failure(s) of jobs {record.failing_jobs}"))  # fmt: skip
    from rich.table import Table  # only the human view draws one

    table = Table("time", "what", "job", "category", "summary")
    for e in record.history:
        table.add_row(e.at.strftime("%Y-%m-%d %H:%M:%S"), e.kind,
                      str(e.job_id) if e.job_id is not None else "-", e.category or "-",
                      e.summary[:300])  # fmt: skip
    show(table)


def _update(config: str | None, cluster: str, node: str, send: Any) -> Any:
    """Run `send(client)` against Temporal; refusals and a missing workflow end the command."""
    import asyncio  # here, not at the top: every `resurgo` start would pay for it

    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    from resurgo.config import ConfigError, load_config
    from resurgo.workflows.client import connect

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)

    async def run() -> Any:
        return await send(await connect(cfg.temporal))

    try:
        return asyncio.run(run())
    except WorkflowUpdateFailedError as exc:
        _exit(f"{cluster}/{node}: {exc.cause}", ExitCode.FAILURE)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            _exit(f"no node health workflow for {cluster}/{node}", ExitCode.NOT_FOUND)
        raise


def _exit(message: str | Text, code: ExitCode = ExitCode.OK) -> NoReturn:
    """Print and leave at once: the Temporal client's native threads can crash the interpreter's
    teardown of a short-lived process (temporalio/sdk-python#300), turning success into SIGABRT."""
    if code == ExitCode.OK:
        console.print(message)
    else:
        err.print(Text(f"error: {message}", style="red"), soft_wrap=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


ClusterArg = Annotated[str, typer.Argument(help="cluster name")]
NodeArg = Annotated[str, typer.Argument(help="node name")]
ActorOpt = Annotated[str | None, typer.Option(help="who (default: $USER)")]


@app.command("repaired")
def repaired(
    cluster: ClusterArg,
    node: NodeArg,
    note: Annotated[str, typer.Option(help="what was repaired")] = "",
    actor: ActorOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Mark a node Resurgo drained as repaired: its health check runs now."""
    import getpass

    from resurgo.nodes.models import RepairMark
    from resurgo.workflows.node_client import mark_repaired

    mark = RepairMark(actor=actor or getpass.getuser(), note=note)
    status = _update(config, cluster, node, lambda c: mark_repaired(c, cluster, node, mark))
    _exit(Text(f"{cluster}/{node} marked repaired by {mark.actor}; {status.phase}"))


@app.command("drain")
def drain_decision(
    cluster: ClusterArg,
    node: NodeArg,
    approve: Annotated[bool, typer.Option("--approve/--reject", help="the decision")],
    reason: Annotated[str, typer.Option(help="why")] = "",
    actor: ActorOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Approve or reject the drain of a lemon node waiting for an operator."""
    import getpass

    from resurgo.contracts import ApprovalDecision
    from resurgo.workflows.node_client import decide_drain

    decision = ApprovalDecision(generation=0, approve=approve, actor=actor or getpass.getuser(),
                                reason=reason)  # fmt: skip
    ack = _update(config, cluster, node, lambda c: decide_drain(c, cluster, node, decision))
    _exit(Text(f"drain of {cluster}/{node} {ack.message} by {decision.actor}"))
