"""`resurgo policy replay`: the command and its output (a summary line and a table of the
decisions the candidate policy would change, or JSON). The replay itself is
`resurgo.policy.replay`.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from resurgo.cli.exits import ExitCode
from resurgo.cli.output import show
from resurgo.durations import parse_since
from resurgo.policy.decide import describe_advice
from resurgo.policy.replay import (
    PolicyFileError,
    ReplayResult,
    fetch_events,
    load_policy,
    replay,
)


def render(result: ReplayResult, console: Console) -> None:
    p = result.policy
    console.print(
        Text(f"policy {p.name}: ", style="bold"),
        f"max_attempts={p.max_attempts} "
        f"budget_per_fingerprint={p.budget_per_fingerprint} "
        f"application_retries={p.application_retries} "
        f"no_progress_attempts={p.no_progress_attempts} allow_drain={p.allow_drain}",
        sep="",
    )
    changed = result.changed
    console.print(
        f"{len(result.decisions)} recorded decision(s) in {result.jobs} job(s); "
        f"{len(changed)} would change"
        + (f"; {result.skipped} unreadable event(s) skipped" if result.skipped else "")
    )
    if not changed:
        return
    table = Table(title="changes", title_justify="left")
    table.add_column("job", no_wrap=True)
    table.add_column("attempt", justify="right")
    table.add_column("category")
    table.add_column("recorded")
    table.add_column("candidate")
    table.add_column("why", overflow="fold", ratio=1)
    for d in changed:
        table.add_row(
            f"{d.cluster}/{d.job_id}",
            str(d.attempt),
            d.attribution.category.value
            + (
                f" ({', '.join(d.attribution.culprit_nodes)})"
                if d.attribution.culprit_nodes
                else ""
            ),
            describe_advice(d.recorded),
            describe_advice(d.replayed) if d.replayed is not None else "(not reached)",
            Text(d.why),
        )
    show(table, console)


def replay_command(
    policy_file: Path,
    *,
    name: str | None,
    since: str | None,
    url: str,
    as_json: bool,
    console: Console,
    err: Console,
) -> int:
    import json

    from sqlalchemy.exc import DatabaseError

    from resurgo.audit.store import AuditStoreUnavailable
    from resurgo.cli.audit import open_for_reading, unusable

    try:
        policy = load_policy(policy_file, name)
        start = parse_since(since) if since else None
    except (PolicyFileError, ValueError) as exc:
        err.print(Text(f"error: {exc}", style="red"))
        return ExitCode.USAGE
    store = open_for_reading(url)
    try:
        events = fetch_events(store, start)
    except AuditStoreUnavailable as exc:
        err.print(Text(f"error: {exc}", style="red"))
        return ExitCode.UNAVAILABLE
    except DatabaseError as exc:
        err.print(Text(f"error: {unusable(exc)}", style="red"))
        return ExitCode.UNAVAILABLE
    finally:
        store.close()
    result = replay(events, policy)
    if as_json:
        print(json.dumps(result.as_json()))
    else:
        render(result, console)
    return ExitCode.OK
