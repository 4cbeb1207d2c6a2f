"""Append-only audit store: embedded SQLite by default, MySQL/MariaDB in production.

Appending never loses and never duplicates an event: `event_id` is unique in the table, a batch is
written in one transaction with a dialect-specific insert-or-ignore, and `append` returns how many
events were new. Every field is validated against the column limits *before* anything is written,
so MySQL's `INSERT IGNORE` can never silently truncate a value (and a warning check after each
statement turns any downgraded error into a rollback).

Datetimes are stored as naive UTC and returned as aware UTC. Rows get an autoincrement `id`, which
is the pagination cursor of `query(after_id=...)`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import stamina
from pydantic import BaseModel, ConfigDict
from sqlalchemy import event, func, insert, or_, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine, RowMapping, create_engine, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool
from sqlalchemy.sql.elements import ColumnElement

from resurgo.audit.rows import batches, from_naive_utc, row_from_event, to_naive_utc
from resurgo.audit.schema import audit_events, metadata
from resurgo.contracts import AuditEvent

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "AuditStore",
    "AuditStoreUnavailable",
    "JobSummary",
    "StoredAuditEvent",
    "store_url_from_env",
]

ENV_URL = "RESURGO_AUDIT_URL"
ENV_HOME = "RESURGO_HOME"

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_JOBS_LIMIT = 10_000

# Transient lock conflicts are retried inside append(); anything else surfaces at once.
_LOCK_RETRIES = 5
_MYSQL_LOCK_ERRORS = frozenset({1205, 1213})  # lock wait timeout, deadlock


class AuditStoreUnavailable(Exception):
    """The audit database cannot be reached or used right now; retrying later may succeed."""


class StoredAuditEvent(AuditEvent):
    """An audit event as stored: the event plus its row id (the pagination cursor)."""

    id: int


class JobSummary(BaseModel):
    """One job (cluster, Slurm job id, workflow id) as seen through its audit events."""

    model_config = ConfigDict(frozen=True)

    cluster: str
    job_id: int
    workflow_id: str
    first_at: datetime
    last_at: datetime
    last_type: str
    events: int


def store_url_from_env(environ: Mapping[str, str] | None = None) -> str:
    """`RESURGO_AUDIT_URL`, else `sqlite:///<RESURGO_HOME or ~/.resurgo>/audit.db`."""
    env = os.environ if environ is None else environ
    url = env.get(ENV_URL, "").strip()
    if url:
        return url
    home = env.get(ENV_HOME, "").strip() or "~/.resurgo"
    path = Path(home).expanduser().resolve() / "audit.db"
    return f"sqlite:///{path}"


class AuditStore:
    """Audit events in SQLite (`sqlite:///path.db`) or MySQL (`mysql+pymysql://u:p@h:3306/db`).

    Thread-safe; all methods block (call them from a thread in async code). The schema is created
    on first use, or explicitly with `create_schema()`.
    """

    def __init__(self, url: str) -> None:
        self._url = make_url(url)
        self._safe_url = self._url.render_as_string(hide_password=True)
        backend = self._url.get_backend_name()
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        if backend == "sqlite":
            self._dialect: Literal["sqlite", "mysql"] = "sqlite"
            self._engine = self._sqlite_engine()
        elif backend in ("mysql", "mariadb"):
            self._dialect = "mysql"
            self._engine = create_engine(
                self._url,
                pool_pre_ping=True,
                pool_recycle=3600,
                pool_timeout=10,
                connect_args={
                    "charset": "utf8mb4",
                    "connect_timeout": 5,
                    "read_timeout": 60,
                    "write_timeout": 60,
                },
            )
        else:
            raise ValueError(
                f"unsupported audit store URL {self._safe_url!r}: "
                "use sqlite:///path.db or mysql+pymysql://user:pass@host:3306/db"
            )

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The store URL with the password masked."""
        return self._safe_url

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_schema(self) -> None:
        """Create the table and its indexes if missing; safe to call any number of times."""
        with self._unavailable_on_error():
            try:
                metadata.create_all(self._engine, checkfirst=True)
            except (OperationalError, DBAPIError):
                # Another process may have created it between the check and the CREATE.
                metadata.create_all(self._engine, checkfirst=True)
        with self._schema_lock:
            self._schema_ready = True

    # ------------------------------------------------------------------ writes

    def append(self, events: Sequence[AuditEvent]) -> int:
        """Store events whose `event_id` is new; return how many were new.

        Raises `ValueError` (nothing from the batch stored) if any event does not fit the columns,
        and `AuditStoreUnavailable` if the database cannot be used.
        """
        rows = [row_from_event(e) for e in events]
        if not rows:
            return 0
        self._ensure_schema()
        chunks = list(batches(rows))
        # A lock conflict (deadlock, lock wait, "database is locked") is retried at once, with
        # jittered backoff so that writers that collided do not collide again; the rest of
        # the outage handling is the caller's (the audit activity's Temporal retry policy).
        for attempt in stamina.retry_context(
            on=_lock_conflict, attempts=_LOCK_RETRIES, timeout=None,
            wait_initial=0.05, wait_max=1.0, wait_jitter=0.05,
        ):  # fmt: skip
            with attempt, self._unavailable_on_error(), self._engine.begin() as conn:
                return sum(self._insert_ignore(conn, chunk) for chunk in chunks)
        raise AssertionError("unreachable")  # pragma: no cover

    def _insert_ignore(self, conn: Connection, rows: list[dict[str, Any]]) -> int:
        if self._dialect == "sqlite":
            stmt = (
                sqlite_insert(audit_events)
                .values(rows)
                .on_conflict_do_nothing(index_elements=["event_id"])
            )
            return max(conn.execute(stmt).rowcount, 0)
        mysql_stmt = insert(audit_events).values(rows).prefix_with("IGNORE")
        inserted = max(conn.execute(mysql_stmt).rowcount, 0)
        # Each skipped duplicate leaves exactly one warning (1062). Anything beyond that means
        # IGNORE downgraded a real error (truncation, bad value): refuse the whole batch.
        warnings = conn.exec_driver_sql("SHOW COUNT(*) WARNINGS").scalar_one()
        if int(warnings) > len(rows) - inserted:
            details = conn.exec_driver_sql("SHOW WARNINGS").fetchall()
            unexpected = [tuple(w) for w in details if int(w[1]) != 1062]
            raise ValueError(f"audit batch rejected by the database: {unexpected[:5]}")
        return inserted

    # ------------------------------------------------------------------ reads

    def query(
        self,
        *,
        cluster: str | None = None,
        job_id: int | None = None,
        workflow_id: str | None = None,
        attempt: int | None = None,
        types: Sequence[str] | None = None,
        producer: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after_id: int | None = None,
        limit: int = DEFAULT_LIMIT,
        order: Literal["asc", "desc"] = "asc",
    ) -> list[StoredAuditEvent]:
        """Events matching every given filter, ordered by `id`.

        `since` is inclusive and `until` exclusive (naive datetimes are taken as UTC). `after_id`
        is the cursor: pass the last `id` of the previous page; "after" follows `order` (ids
        greater for "asc", smaller for "desc"). `limit` is capped at 1000.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if order not in ("asc", "desc"):
            raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")
        if isinstance(types, str):
            types = [types]
        t = audit_events.c
        where: list[ColumnElement[bool]] = []
        if cluster is not None:
            where.append(t.cluster == cluster)
        if job_id is not None:
            where.append(t.job_id == job_id)
        if workflow_id is not None:
            where.append(t.workflow_id == workflow_id)
        if attempt is not None:
            where.append(t.attempt == attempt)
        if types is not None:
            where.append(t.type.in_(list(types)))
        if producer is not None:
            where.append(t.producer == producer)
        if since is not None:
            where.append(t.at >= to_naive_utc(since))
        if until is not None:
            where.append(t.at < to_naive_utc(until))
        if after_id is not None:
            where.append(t.id > after_id if order == "asc" else t.id < after_id)
        stmt = (
            select(audit_events)
            .where(*where)
            .order_by(t.id.asc() if order == "asc" else t.id.desc())
            .limit(min(limit, MAX_LIMIT))
        )
        self._ensure_schema()
        with self._unavailable_on_error(), self._engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [_event_from_row(r) for r in rows]

    def iter_all(self, **filters: Any) -> Iterator[StoredAuditEvent]:
        """Walk every matching event in `id` order, a page at a time (same filters as `query`)."""
        after_id: int | None = filters.pop("after_id", None)
        while True:
            page = self.query(**filters, after_id=after_id, limit=MAX_LIMIT)
            yield from page
            if len(page) < MAX_LIMIT:
                return
            after_id = page[-1].id

    def component_events(
        self, job_id: int, cluster: str | None = None, *, limit: int = 20
    ) -> list[StoredAuditEvent]:
        """`monitoring_started` and `attempt_started` events of heterogeneous jobs that recorded
        a component whose own job id is `job_id` (resurgo/slurm/hetjobs.named_components),
        newest first. The JSON text narrows the rows (`"job_id":86` only in a recorded
        component); the caller reads each event's data to be sure."""
        t = audit_events.c
        number = int(job_id)
        where: list[ColumnElement[bool]] = [
            t.type.in_(["monitoring_started", "attempt_started"]),
            t.data.like('%"components":[%'),
            or_(t.data.like(f'%"job_id":{number},%'), t.data.like(f'%"job_id":{number}}}%')),
        ]
        if cluster is not None:
            where.append(t.cluster == cluster)
        stmt = select(audit_events).where(*where).order_by(t.id.desc()).limit(min(limit, MAX_LIMIT))
        self._ensure_schema()
        with self._unavailable_on_error(), self._engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [_event_from_row(r) for r in rows]

    def jobs(self, cluster: str | None = None, *, limit: int = MAX_LIMIT) -> list[JobSummary]:
        """One summary per (cluster, job id, workflow id), most recently active first."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        t = audit_events.c
        key = (t.cluster, t.job_id, t.workflow_id)
        ranked = select(
            t.cluster,
            t.job_id,
            t.workflow_id,
            t.type,
            func.min(t.at).over(partition_by=key).label("first_at"),
            func.max(t.at).over(partition_by=key).label("last_at"),
            func.count().over(partition_by=key).label("events"),
            func.row_number()
            .over(partition_by=key, order_by=(t.at.desc(), t.id.desc()))
            .label("rn"),
        )
        if cluster is not None:
            ranked = ranked.where(t.cluster == cluster)
        sub = ranked.subquery()
        stmt = (
            select(sub)
            .where(sub.c.rn == 1)
            .order_by(sub.c.last_at.desc(), sub.c.cluster, sub.c.job_id, sub.c.workflow_id)
            .limit(min(limit, MAX_JOBS_LIMIT))
        )
        self._ensure_schema()
        with self._unavailable_on_error(), self._engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [
            JobSummary(
                cluster=r["cluster"],
                job_id=int(r["job_id"]),
                workflow_id=r["workflow_id"],
                first_at=from_naive_utc(r["first_at"]),
                last_at=from_naive_utc(r["last_at"]),
                last_type=r["type"],
                events=int(r["events"]),
            )
            for r in rows
        ]

    # ------------------------------------------------------------------ internals

    def _ensure_schema(self) -> None:
        if not self._schema_ready:
            self.create_schema()

    def _sqlite_engine(self) -> Engine:
        database = self._url.database
        in_memory = not database or database == ":memory:" or database.startswith("file::memory:")
        if in_memory:
            engine = create_engine(
                self._url,
                poolclass=StaticPool,
                connect_args={"check_same_thread": False},
            )
        else:
            assert database is not None
            try:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise AuditStoreUnavailable(
                    f"audit store {self._safe_url} unavailable: cannot create its directory: {exc}"
                ) from exc
            engine = create_engine(
                self._url,
                connect_args={"timeout": 30, "check_same_thread": False},
            )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            cursor = dbapi_conn.cursor()
            try:
                if not in_memory:
                    cursor.execute("PRAGMA journal_mode=WAL")
                    cursor.execute("PRAGMA synchronous=NORMAL")
                cursor.execute("PRAGMA busy_timeout=30000")
            finally:
                cursor.close()

        return engine

    def _unavailable_on_error(self) -> AbstractContextManager[None]:
        return _translate_errors(self._safe_url)


@contextmanager
def _translate_errors(safe_url: str) -> Iterator[None]:
    """Turn connection-level database errors into `AuditStoreUnavailable` (no password shown)."""
    try:
        yield
    except (OperationalError, InterfaceError, PoolTimeoutError) as exc:
        orig = exc.orig if isinstance(exc, DBAPIError) else None
        reason = (str(orig) if orig is not None else str(exc)).strip() or type(exc).__name__
        raise AuditStoreUnavailable(
            f"audit store {safe_url} unavailable: {reason.splitlines()[0]}"
        ) from exc


def _lock_conflict(exc: BaseException) -> bool:
    return isinstance(exc, AuditStoreUnavailable) and _is_lock_conflict(exc.__cause__)


def _is_lock_conflict(exc: BaseException | None) -> bool:
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_LOCK_ERRORS:
        return True
    return "database is locked" in str(orig)


def _event_from_row(r: RowMapping) -> StoredAuditEvent:
    data = json.loads(r["data"]) if r["data"] else {}
    return StoredAuditEvent(
        id=int(r["id"]),
        event_id=r["event_id"],
        cluster=r["cluster"],
        job_id=int(r["job_id"]),
        workflow_id=r["workflow_id"],
        attempt=r["attempt"],
        type=r["type"],
        producer=r["producer"],
        at=from_naive_utc(r["at"]),
        summary=r["summary"],
        data=data,
    )
