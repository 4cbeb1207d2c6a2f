"""`resurgo audit`, read straight from the audit store, and the store opening every read command
shares: a read never creates a store (a missing SQLite file is "not found", exit 3), and a bad
URL is a one-line usage error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from resurgo.cli.exits import ExitCode
from resurgo.cli.output import console, err, fail, show
from resurgo.cli.timeline import format_time, render_timeline, timeline_json

if TYPE_CHECKING:
    from resurgo.audit.store import AuditStore, StoredAuditEvent

__all__ = [
    "FINAL_TYPES",
    "audit_command",
    "check_event_types",
    "event_line",
    "open_for_reading",
    "unusable",
]

# After one of these, nothing more is recorded for the job: `--follow` stops.
FINAL_TYPES = frozenset({"completed", "job_gone", "monitoring_ended"})
URL_HINT = "use sqlite:////path/audit.db or mysql+pymysql://user:pass@host:3306/db"


def open_for_reading(url: str) -> AuditStore:
    """Open an existing store; never create one (the store itself creates what is missing)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from resurgo.audit.store import AuditStore, AuditStoreUnavailable

    try:
        parsed = make_url(url)
    except ArgumentError:
        fail(f"invalid audit store URL ({URL_HINT})", ExitCode.USAGE)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        in_memory = database in ("", ":memory:") or database.startswith("file:")
        if not in_memory and not Path(database).expanduser().is_file():
            fail(
                f"no audit store at {Path(database).expanduser()}: nothing was recorded there "
                "(check --url, [audit] url in the config or $RESURGO_AUDIT_URL)",
                ExitCode.NOT_FOUND,
            )
    try:
        return AuditStore(url)
    except (ValueError, NoSuchModuleError):
        fail(f"unsupported audit store URL ({URL_HINT})", ExitCode.USAGE)
    except AuditStoreUnavailable as exc:
        fail(str(exc), ExitCode.UNAVAILABLE)


def check_event_types(types: Sequence[str]) -> list[str]:
    """Refuse unknown `--type` values as a usage error before anything is read."""
    from resurgo.contracts import AuditEventType

    known = {t.value for t in AuditEventType}
    unknown = [t for t in types if t not in known]
    if unknown:
        raise typer.BadParameter(
            f"unknown event type(s) {', '.join(map(repr, unknown))}; known: "
            + ", ".join(sorted(known)),
            param_hint="--type",
        )
    return list(types)


def event_line(e: StoredAuditEvent) -> str:
    """One event as one tab-separated line (`--follow`): time, attempt, type, producer, summary."""
    attempt = "-" if e.attempt is None else str(e.attempt)
    summary = e.summary.replace("\t", " ").replace("\r", "\\r").replace("\n", "\\n")
    return "\t".join((format_time(e.at), attempt, e.type, e.producer, summary))


def _list_jobs(store: AuditStore, cluster: str | None, limit: int, as_json: bool) -> None:
    found = store.jobs(cluster, limit=limit + 1)
    jobs, truncated = found[:limit], len(found) > limit
    if as_json:
        typer.echo(json.dumps([j.model_dump(mode="json") for j in jobs], indent=2))
    else:
        table = Table("cluster", "job", "events", "first", "last", "last event")
        for j in jobs:
            first, last = j.first_at.isoformat(), j.last_at.isoformat()
            table.add_row(Text(j.cluster), str(j.job_id), str(j.events), first, last,
                          Text(j.last_type))  # fmt: skip
        show(table if jobs else Text("no audited jobs"))
    if truncated:
        err.print(Text(f"showing the {limit} most recently active jobs; more exist (--limit N)"))


def _follow(
    store: AuditStore, filters: dict[str, object], after: int | None, as_json: bool, every: float
) -> None:
    """Print new events as they are recorded, one a line, until monitoring of the job ends."""
    while True:
        for e in store.iter_all(**filters, after_id=after):
            after = e.id
            typer.echo(e.model_dump_json() if as_json else event_line(e))
            if e.type in FINAL_TYPES:
                return
        time.sleep(every)


def _as_component(store: AuditStore, job: int, cluster: str | None) -> dict[str, object]:
    """A hetjob component's own job id (`86` for `85+1`) reads its hetjob's trail, said so on
    stderr (JSON output stays parseable); {} for any other job id."""
    from resurgo.audit.components import recorded_component

    part = recorded_component(store, job, cluster)
    if part is None:
        return {}
    err.print(Text(f"{part.sentence()}: showing {part.component.leader}'s audit trail"))
    return {"job_id": part.component.leader, "workflow_id": part.workflow_id}


def unusable(exc: Exception) -> str:
    """A database error the store does not translate (e.g. a file that is not SQLite), briefly."""
    orig = getattr(exc, "orig", None) or exc
    first = (str(orig).strip().splitlines() or [type(exc).__name__])[0]
    return f"the audit store cannot be read: {first}"


def audit_command(
    job: int | None,
    *,
    url: str,
    cluster: str | None,
    attempt: int | None,
    types: Sequence[str],
    as_json: bool,
    limit: int,
    follow: bool,
    interval: float,
) -> None:
    from sqlalchemy.exc import DatabaseError

    from resurgo.audit.store import AuditStoreUnavailable

    if job is None and (attempt is not None or types or follow):
        fail("--attempt, --type and --follow need a JOB (e.g. `resurgo audit 42 --follow`)",
             ExitCode.USAGE)  # fmt: skip
    wanted = check_event_types(types) or None
    store = open_for_reading(url)
    try:
        if job is None:
            _list_jobs(store, cluster, limit, as_json)
            return
        filters: dict[str, object] = {"cluster": cluster, "job_id": job, "attempt": attempt,
                                      "types": wanted}  # fmt: skip
        filters.update(_as_component(store, job, cluster))
        events = list(store.iter_all(**filters))
        if follow:
            for e in events:
                typer.echo(e.model_dump_json() if as_json else event_line(e))
            if not any(e.type in FINAL_TYPES for e in events):
                _follow(store, filters, events[-1].id if events else None, as_json, interval)
            return
    except AuditStoreUnavailable as exc:
        fail(str(exc), ExitCode.UNAVAILABLE)
    except DatabaseError as exc:
        fail(unusable(exc), ExitCode.UNAVAILABLE)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        store.close()
    if as_json:
        typer.echo(timeline_json(events))
    elif events:
        render_timeline(events, console)
    if not events:
        where = f" on {cluster}" if cluster else ""
        err.print(Text(f"no audit events for job {job}{where}"))
        raise typer.Exit(int(ExitCode.NOT_FOUND))
