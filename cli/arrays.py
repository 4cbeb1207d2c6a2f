"""`resurgo array CLUSTER ARRAY_ID`: one job array as a whole (tasks by state, failures by
fingerprint, nodes implicated, the coordinator's findings, its tasks), and `resurgo array-mode
CLUSTER ARRAY_ID observe|action`: switch the array's coordinator (operator).

Both talk to `resurgo api` like the operator commands (same URL, token, exit codes: see
`resurgo.cli.operator`); each task is a job of its own: `resurgo job CLUSTER <array>_<task>`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.text import Text

from resurgo.cli.exits import ExitCode
from resurgo.cli.operator import (
    ClusterArg,
    ConfigOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    api_call,
    emit_json,
    make_client,
)
from resurgo.cli.output import console, fail, show, warn
from resurgo.kinds import Mode

__all__ = ["COMMANDS", "register"]

ArrayArg = Annotated[str, typer.Argument(help="the array's Slurm job id (the part before `_`)")]


def _array_id(text: str) -> str:
    # Checked here as well as by the API: the id goes into a URL path.
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        fail(f"an array id is digits only, got {text!r}", ExitCode.USAGE)
    return text


def _counts(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(values.items())) or "-"


def _tasks(tasks: list[int], limit: int = 12) -> str:
    shown = ",".join(str(t) for t in tasks[:limit])
    return shown + (f",… ({len(tasks)})" if len(tasks) > limit else "")


def array(
    cluster: ClusterArg,
    array_id: ArrayArg,
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show a job array: tasks by state, failures by fingerprint, nodes implicated, findings."""
    from rich.table import Table  # only this command draws these tables

    array_id = _array_id(array_id)
    client = make_client(api_url, token, config)
    with api_call(client, f"reading array {cluster}/{array_id}…"):
        d = client.get(f"/v1/arrays/{cluster}/{array_id}")
    if as_json:
        emit_json(d)
        return
    for w in d.get("warnings") or []:
        warn(w)
    head = Table("array", "coordinator", "mode", "tasks by state", "held", "excluded nodes",
                 title="array", title_justify="left")  # fmt: skip
    head.add_row(
        Text(f"{d['cluster']}/{d['array_job_id']}_*"),
        Text("live" if d["live"] else "ended", style="bold" if d["live"] else "dim"),
        Text(str(d["mode"] or "-")), Text(_counts(d["tasks_by_state"])),
        Text("yes", style="yellow bold") if d["held"] else Text("no"),
        Text(",".join(d["excluded_nodes"]) or "-"),
    )  # fmt: skip
    show(head)
    failures = Table("fingerprint", "tasks", title="failures by fingerprint", title_justify="left")
    for fp, tasks in d["failures_by_fingerprint"].items():
        failures.add_row(Text(fp), Text(_tasks(tasks)))
    show(failures if d["failures_by_fingerprint"] else Text("no task failures reported"))
    if d["nodes_implicated"]:
        nodes = Table("node", "tasks", title="nodes implicated", title_justify="left")
        for node, tasks in d["nodes_implicated"].items():
            nodes.add_row(Text(node), Text(_tasks(tasks)))
        show(nodes)
    if d["findings"]:
        findings = Table("finding", "summary", title="findings", title_justify="left")
        for f in d["findings"]:
            findings.add_row(Text(f["finding"]), Text(f["summary"]))
        show(findings)
    tasks = Table("task", "slurm job", "state", title="tasks", title_justify="left")
    for t in d["tasks"]:
        state = Text(str(t["state"] or "-"), style="bold" if t["live"] else "dim")
        tasks.add_row(Text(t["name"]), str(t["job_id"]), state)
    show(tasks if d["tasks"] else Text("no task has started"))
    if d.get("tasks_truncated"):
        warn(f"only the first {len(d['tasks'])} tasks are listed")


def array_mode(
    cluster: ClusterArg,
    array_id: ArrayArg,
    new_mode: Annotated[Mode, typer.Argument(help="the new mode")],
    reason: Annotated[str, typer.Option(help="kept in the audit trail")] = "",
    as_json: JsonOpt = False,
    api_url: UrlOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Switch an array's coordinator between observe and action (its advice so far, holding
    pending tasks or excluding a node for them, is then carried out). Tasks keep their mode."""
    array_id = _array_id(array_id)
    client = make_client(api_url, token, config)
    with api_call(client, f"switching array {cluster}/{array_id} to {new_mode}…"):
        result = client.post(
            f"/v1/arrays/{cluster}/{array_id}/mode", {"mode": new_mode.value, "reason": reason}
        )
    if as_json:
        emit_json(result)
        return
    console.print(
        Text(f"array {cluster}/{array_id}_* is now in {result['array']['mode']} mode "
             f"(by {result['change']['actor']})")
    )  # fmt: skip


COMMANDS: dict[str, Callable[..., None]] = {"array": array, "array-mode": array_mode}


def register(app: typer.Typer) -> None:
    """Add the array commands to the `resurgo` CLI."""
    for name, fn in COMMANDS.items():
        app.command(name)(fn)
