"""The `resurgo` command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from resurgo.cli.app import Fault, LogLevel, make_app, setup_logging, subcommands
from resurgo.cli.exits import ExitCode
from resurgo.cli.nodes import app as nodes_app
from resurgo.cli.output import console, err, fail
from resurgo.kinds import Mode

# Heavy modules (the config and its pydantic-settings sources, temporalio, fastapi,
# sqlalchemy, httpx, asyncssh) load inside the commands that need them, so `resurgo
# attribute` starts fast.

app = make_app("Resurgo: cluster-level recovery for training jobs on Slurm.")

# The same options as cli/operator.py's (kept here so `audit` needs no operator import).
UrlOpt = Annotated[
    str | None,
    typer.Option("--api-url", envvar="RESURGO_API_URL", help="Resurgo API base URL",
                 show_default=False),
]  # fmt: skip
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="RESURGO_API_TOKEN", help="API bearer token",
                 show_default=False),
]  # fmt: skip
# Commands that never need the operator commands registered (typer resolves every command's
# signature when it builds the CLI, so registering them costs their imports).
_STANDALONE_COMMANDS = frozenset({"attribute"})


def _wants_operator_commands(argv: list[str]) -> bool:
    command = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    return command not in _STANDALONE_COMMANDS


ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="TOML config (or $RESURGO_CONFIG)")
]


def _setup_logging() -> None:
    setup_logging(LogLevel.INFO)


def _config(path: str | None):  # type: ignore[no-untyped-def]
    from resurgo.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)


@app.command()
def worker(config: ConfigOpt = None) -> None:
    """Run workflows and audit activities (task queue `resurgo`)."""
    import asyncio  # the service commands only: 50 ms on every start

    from resurgo.worker.processes import run_worker
    from resurgo.workflows.client import connect

    _setup_logging()
    cfg = _config(config)

    async def main() -> None:
        client = await connect(cfg.temporal, wait_seconds=300)
        await run_worker(client, cfg)

    asyncio.run(main())


@app.command()
def controller(
    cluster: Annotated[str, typer.Option(help="cluster name from the config")] = "local",
    config: ConfigOpt = None,
) -> None:
    """Run scheduler activities and job discovery for one cluster (task queue `slurm.<cluster>`)."""
    import asyncio

    from resurgo.worker.processes import run_controller
    from resurgo.workflows.client import connect

    _setup_logging()
    cfg = _config(config)
    from resurgo.config import ConfigError

    try:
        cfg.cluster(cluster)
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)

    async def main() -> None:
        client = await connect(cfg.temporal, wait_seconds=300)
        await run_controller(client, cfg, cluster)

    asyncio.run(main())


@app.command()
def watchdog(
    cluster: Annotated[str, typer.Option(help="cluster name from the config")] = "local",
    act: Annotated[
        bool,
        typer.Option(
            "--act/--observe",
            help="release Resurgo holds past their deadline (default), or only report them",
        ),
    ] = True,
    interval: Annotated[float, typer.Option(help="seconds between rounds")] = 10.0,
    record: Annotated[
        Path | None,
        typer.Option(help="JSON-lines file of releases (default ~/.resurgo/watchdog.jsonl)"),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="one round, then exit")] = False,
    config: ConfigOpt = None,
) -> None:
    """Fail-open: release Resurgo holds past their deadline (by default; `--observe` only
    reports). Holds without Resurgo's tag are never touched. Needs only Slurm (no Temporal/DB)."""
    import asyncio

    from resurgo.slurm.client import SlurmClient
    from resurgo.worker.processes import make_runner
    from resurgo.worker.watchdog import run_watchdog

    _setup_logging()
    cfg = _config(config)
    from resurgo.config import ConfigError

    try:
        runner = make_runner(cfg.cluster(cluster))
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)
    code = asyncio.run(
        run_watchdog(cluster, SlurmClient(runner), act=act, interval=interval, record=record,
                     once=once, metrics=cfg.metrics)
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("dev-server")
def dev_server(
    port: int = 7233,
    ui_port: int = 8233,
    db_file: Annotated[str | None, typer.Option(help="SQLite file (default: in memory)")] = None,
) -> None:
    """Run the embedded Temporal dev server with Resurgo's search attributes registered."""
    from resurgo.devstack.devserver import dev_server_command

    cmd = dev_server_command(port=port, ui_port=ui_port, db_file=db_file)
    os.execv(cmd[0], cmd)


@app.command()
def audit(
    job: Annotated[int | None, typer.Argument(help="Slurm job id (omit to list jobs)")] = None,
    cluster: Annotated[str | None, typer.Option(help="cluster name")] = None,
    attempt: Annotated[int | None, typer.Option(help="only this attempt (needs JOB)")] = None,
    type_: Annotated[
        list[str] | None, typer.Option("--type", help="only these event types (needs JOB)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
    limit: Annotated[
        int, typer.Option(min=1, max=9_999, help="most jobs to list (without JOB)")
    ] = 1000,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events until monitoring ends")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="--follow: seconds between reads")] = 2.0,
    url: Annotated[
        str | None, typer.Option(help="audit store URL (default from config/env)")
    ] = None,
    config: ConfigOpt = None,
    use_api: Annotated[bool, typer.Option("--api", help="read through `resurgo api`")] = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a job's audit timeline (or the list of audited jobs). Never creates a store."""
    if use_api:
        from resurgo.cli.audit_api import audit_via_api

        audit_via_api(
            job, cluster=cluster, attempt=attempt, types=type_, as_json=as_json,
            api_url=api_url, token=token, config=config, follow=follow, interval=interval,
            limit=limit,
        )  # fmt: skip
        return
    from resurgo.audit.store import store_url_from_env
    from resurgo.cli.audit import audit_command

    audit_command(
        job, url=url or _config(config).audit.url or store_url_from_env(), cluster=cluster,
        attempt=attempt, types=type_ or [], as_json=as_json, limit=limit, follow=follow,
        interval=interval,
    )  # fmt: skip


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="bind address (default [api] host)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default [api] port, 8000)")] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="NO authentication: local demos only (loopback)")
    ] = False,
    tokens_file: Annotated[
        str | None, typer.Option(help="TOML file of [tokens.NAME] role/sha256 entries")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the HTTP API: jobs, advice, approvals, modes, audit (OpenAPI at /openapi.json)."""
    from resurgo.api.server import serve

    _setup_logging()
    cfg = _config(config)
    from resurgo.config import ConfigError

    try:
        serve(cfg, host=host, port=port, insecure=insecure, tokens_file=tokens_file)
    except ConfigError as exc:
        fail(f"config error: {exc}", ExitCode.USAGE)


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="where logs, checkpoints and stores go")] = Path(
        "/var/tmp/resurgo-demo"
    ),
    fault: Annotated[Fault, typer.Option(help="fault to inject (see infra/demo)")] = Fault.ECC,
    fault_node: Annotated[str, typer.Option(help="node that fails")] = "",
    mode: Annotated[Mode, typer.Option(help="directive mode")] = Mode.ACTION,
    keep_ui: Annotated[
        bool, typer.Option(help="leave the Temporal dev server (and its UI) running at the end")
    ] = True,
) -> None:
    """Run the end-to-end demo on the local Slurm cluster (embedded Temporal + SQLite)."""
    from resurgo.devstack.demo import run_demo

    _setup_logging()
    code = run_demo(workdir=workdir, fault=fault.value, fault_node=fault_node, mode=mode.value,
                    keep_ui=keep_ui)  # fmt: skip
    raise typer.Exit(code)


if _wants_operator_commands(sys.argv):
    from resurgo.cli import operator as operator_cli

    operator_cli.register(app)
    from resurgo.cli import arrays as arrays_cli

    arrays_cli.register(app)

signals_app = subcommands(
    "Signal sources: job logs (file, Loki, VictoriaLogs) and GPU metrics (Prometheus)."
)
app.add_typer(signals_app, name="signals")


@signals_app.command("check")
def signals_check(
    logs: Annotated[
        str,
        typer.Option(
            help="file:///path/slurm-%j.out | loki+http://host:3100 | victorialogs+http://host:9428"
        ),
    ],
    prometheus: Annotated[
        str | None, typer.Option(help="Prometheus URL, e.g. http://host:9090")
    ] = None,
    job_id: Annotated[str | None, typer.Option(help="only this Slurm job id")] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(help="label mapping ROLE=NAME (roles: job_id, host, stream); repeatable"),
    ] = None,
    metrics_host_label: Annotated[
        str, typer.Option(help="hostname label of the GPU metrics (Hostname, instance, ...)")
    ] = "Hostname",
    metric: Annotated[
        list[str] | None, typer.Option(help="another required metric name; repeatable")
    ] = None,
    window: Annotated[str, typer.Option(help="how far back to look: 15m, 1h30m, 2d, PT1H")] = "15m",
    selector: Annotated[str, typer.Option(help="extra LogQL matchers / LogsQL filter")] = "",
    cluster: Annotated[str, typer.Option(help="cluster name used in the config snippet")] = "local",
    max_lines: Annotated[int, typer.Option(help="most log lines to scan")] = 200_000,
    timeout: Annotated[float, typer.Option(help="HTTP timeout per request (s)")] = 10.0,
    registry: Annotated[str | None, typer.Option(help="pattern registry JSON file")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables")] = False,
) -> None:
    """Verify the log and metrics contract, propose label mappings, print the config snippet."""
    from resurgo.cli.signals_check import check_command

    raise typer.Exit(
        check_command(
            logs=logs,
            prometheus=prometheus,
            job_id=job_id,
            labels=label or [],
            metrics_host_label=metrics_host_label,
            required_metrics=metric or [],
            window=window,
            selector=selector,
            cluster=cluster,
            max_lines=max_lines,
            timeout=timeout,
            registry=registry,
            as_json=as_json,
        )
    )


@app.command()
def attribute(
    bundle: Annotated[Path, typer.Argument(help="bundle directory (job.log, scheduler.txt, ...)")],
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plugin_url: Annotated[
        str | None, typer.Option(help="external attribution plugin to consult (HTTP POST)")
    ] = None,
) -> None:
    """Attribute a failure offline from an evidence bundle, and show what the policy would do."""
    from resurgo.cli.attribute import attribute_command

    raise typer.Exit(
        attribute_command(bundle, as_json=as_json, plugin_url=plugin_url, console=console, err=err)
    )


policy_app = subcommands("Recovery policy tools.")
app.add_typer(policy_app, name="policy")
app.add_typer(nodes_app, name="nodes")


@policy_app.command("replay")
def policy_replay(
    policy: Annotated[Path, typer.Option("--policy", help="candidate policy (TOML)")],
    name: Annotated[str | None, typer.Option(help="which [policies.NAME] in the file")] = None,
    since: Annotated[
        str | None, typer.Option(help="jobs advised since: 7d, 1h30m, PT12H, 2026-11-01")
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="audit store URL (default from config/env)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
    config: ConfigOpt = None,
) -> None:
    """What-if: re-decide every recorded decision with a candidate policy; print the changes."""
    from resurgo.audit.store import store_url_from_env
    from resurgo.cli.policy_replay import replay_command

    store_url = url or _config(config).audit.url or store_url_from_env()
    if not policy.is_file():
        fail(f"no policy file {policy}", ExitCode.NOT_FOUND)
    code = replay_command(
        policy, name=name, since=since, url=store_url, as_json=as_json, console=console, err=err
    )
    raise typer.Exit(code)


if __name__ == "__main__":
    app()
