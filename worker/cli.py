"""The `resurgo` command line."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from worker.config import ConfigError, load_config

app = typer.Typer(
    help="Resurgo: cluster-level recovery for training jobs on Slurm.", no_args_is_help=True
)
console = Console()
err = Console(stderr=True)

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="TOML config (or $RESURGO_CONFIG)")
]


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _config(path: str | None):  # type: ignore[no-untyped-def]
    try:
        return load_config(path)
    except ConfigError as exc:
        err.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def worker(config: ConfigOpt = None) -> None:
    """Run workflows and audit activities (task queue `resurgo`)."""
    from worker.processes import run_worker
    from worker.temporal_client import connect

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
    from worker.processes import run_controller
    from worker.temporal_client import connect

    _setup_logging()
    cfg = _config(config)
    try:
        cfg.cluster(cluster)
    except ConfigError as exc:
        err.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc

    async def main() -> None:
        client = await connect(cfg.temporal, wait_seconds=300)
        await run_controller(client, cfg, cluster)

    asyncio.run(main())


@app.command("dev-server")
def dev_server(
    port: int = 7233,
    ui_port: int = 8233,
    db_file: Annotated[str | None, typer.Option(help="SQLite file (default: in memory)")] = None,
) -> None:
    """Run the embedded Temporal dev server with Resurgo's search attributes registered."""
    from worker.devserver import dev_server_command

    cmd = dev_server_command(port=port, ui_port=ui_port, db_file=db_file)
    os.execv(cmd[0], cmd)


@app.command()
def audit(
    job: Annotated[int | None, typer.Argument(help="Slurm job id (omit to list jobs)")] = None,
    cluster: Annotated[str | None, typer.Option(help="cluster name")] = None,
    attempt: Annotated[int | None, typer.Option(help="only this attempt")] = None,
    type_: Annotated[list[str] | None, typer.Option("--type", help="event type(s)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
    url: Annotated[
        str | None, typer.Option(help="audit store URL (default from config/env)")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Print a job's audit timeline (or the list of audited jobs)."""
    from activities.audit.store import AuditStore, AuditStoreUnavailable, store_url_from_env
    from activities.audit.timeline import render_timeline, timeline_json

    cfg = _config(config)
    store = AuditStore(url or cfg.audit.url or store_url_from_env())
    try:
        if job is None:
            jobs = store.jobs(cluster)
            if as_json:
                console.print_json(data=[j.model_dump(mode="json") for j in jobs])
                return
            from rich.table import Table

            table = Table("cluster", "job", "events", "first", "last", "last event")
            for j in jobs:
                table.add_row(j.cluster, str(j.job_id), str(j.events), j.first_at.isoformat(),
                              j.last_at.isoformat(), j.last_type)  # fmt: skip
            console.print(table)
            return
        events = list(store.iter_all(cluster=cluster, job_id=job, attempt=attempt, types=type_))
    except AuditStoreUnavailable as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    if not events:
        err.print(f"no audit events for job {job}" + (f" on {cluster}" if cluster else ""))
        raise typer.Exit(1)
    if as_json:
        print(timeline_json(events))
    else:
        render_timeline(events, console)


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="where logs, checkpoints and stores go")] = Path(
        "/var/tmp/resurgo-demo"
    ),
    fault: Annotated[str, typer.Option(help="fault to inject (see infra/demo)")] = "ecc",
    fault_node: Annotated[str, typer.Option(help="node that fails")] = "",
    mode: Annotated[str, typer.Option(help="directive mode: action or observe")] = "action",
) -> None:
    """Run the end-to-end demo on the local Slurm cluster (embedded Temporal + SQLite)."""
    from worker.demo import run_demo

    _setup_logging()
    raise typer.Exit(run_demo(workdir=workdir, fault=fault, fault_node=fault_node, mode=mode))


if __name__ == "__main__":
    app()
