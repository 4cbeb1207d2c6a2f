"""AuditStore against real databases: embedded SQLite and MariaDB (no mocks)."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from resurgo.activities.audit import AuditActivities
from resurgo.audit.schema import MAX_DATA_BYTES, MAX_SUMMARY_BYTES
from resurgo.audit.store import (
    MAX_LIMIT,
    AuditStore,
    AuditStoreUnavailable,
    StoredAuditEvent,
    store_url_from_env,
)
from resurgo.contracts import AuditEvent, AuditEventType

try:
    from tests.mariadb import ensure_mariadb, fresh_database
except ModuleNotFoundError:  # bare `pytest` without the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.mariadb import ensure_mariadb, fresh_database

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
WF = "resurgo:c1:100:1740830400"


def ev(n: int, **kw: Any) -> AuditEvent:
    fields: dict[str, Any] = {
        "event_id": f"{WF}:e{n}",
        "cluster": "c1",
        "job_id": 100,
        "workflow_id": WF,
        "attempt": 0,
        "type": "anomaly",
        "producer": "workflow",
        "at": T0 + timedelta(seconds=n),
        "summary": f"event {n}",
        "data": {"n": n},
    }
    fields.update(kw)
    return AuditEvent(**fields)


@pytest.fixture(scope="module")
def mariadb_base() -> str:
    return ensure_mariadb()


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/nested/dir/audit.db"
        return
    url, drop = fresh_database(request.getfixturevalue("mariadb_base"))
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def store(store_url: str) -> Iterator[AuditStore]:
    s = AuditStore(store_url)
    s.create_schema()
    try:
        yield s
    finally:
        s.close()


def all_events(store: AuditStore, **filters: Any) -> list[StoredAuditEvent]:
    return list(store.iter_all(**filters))


# ---------------------------------------------------------------- round trip


def test_round_trip_preserves_time_json_and_unicode(store: AuditStore) -> None:
    plus2 = timezone(timedelta(hours=2))
    data = {
        "nodes": ["gpu-01", "gpu-02"],
        "nested": {"confidence": 0.93, "ok": True, "none": None, "ranks": [0, 7]},
        "text": "NCCL 超时 — ranks ✓ 🔥",
        "big": 2**62,
    }
    events = [
        ev(1, at=datetime(2025, 3, 1, 14, 0, 0, 987654, tzinfo=plus2), data=data),
        ev(2, at=datetime(2025, 3, 1, 12, 30), summary="naive is UTC: ünïcödé 🚀", attempt=None),
    ]
    assert store.append(events) == 2

    got = store.query(cluster="c1", job_id=100)
    assert [e.event_id for e in got] == [events[0].event_id, events[1].event_id]
    first, second = got
    assert first.at == datetime(2025, 3, 1, 12, 0, 0, 987654, tzinfo=UTC)
    assert first.at.utcoffset() == timedelta(0)
    assert first.data == data
    assert second.at == datetime(2025, 3, 1, 12, 30, tzinfo=UTC)
    assert second.at.tzinfo is not None
    assert second.summary == "naive is UTC: ünïcödé 🚀"
    assert second.attempt is None
    assert first.id < second.id
    # Everything but the id is the event as appended (compared as UTC).
    assert first.model_dump(exclude={"id", "at"}) == events[0].model_dump(exclude={"at"})


def test_schema_is_idempotent_and_persistent(store_url: str) -> None:
    with AuditStore(store_url) as s:
        s.create_schema()
        s.create_schema()
        assert s.append([ev(1)]) == 1
        inspector = inspect(s.engine)
        indexes = {ix["name"]: ix for ix in inspector.get_indexes("audit_events")}
        assert indexes["ix_audit_events_cluster_job_id_id"]["column_names"] == [
            "cluster",
            "job_id",
            "id",
        ]
    with AuditStore(store_url) as s:  # a new store (new process, say) sees the same rows
        s.create_schema()
        assert [e.event_id for e in s.query()] == [ev(1).event_id]
        assert s.append([ev(1)]) == 0


def test_schema_created_on_first_use(store_url: str) -> None:
    with AuditStore(store_url) as s:
        assert s.query() == []
        assert s.append([ev(1)]) == 1


# ---------------------------------------------------------------- idempotency


def test_duplicates_by_event_id_are_skipped_and_counted(store: AuditStore) -> None:
    batch = [ev(n) for n in range(5)]
    assert store.append(batch) == 5
    before = all_events(store)
    assert store.append(batch) == 0
    assert all_events(store) == before

    # Partly new batch, with a duplicate inside the batch itself.
    assert store.append([ev(3), ev(5), ev(6), ev(5)]) == 2
    assert len(all_events(store)) == 7
    # An event_id that exists wins: a later different payload does not overwrite it.
    assert store.append([ev(0, summary="rewritten")]) == 0
    assert store.query(limit=1)[0].summary == "event 0"
    assert store.append([]) == 0


def test_event_ids_compare_exactly(store: AuditStore) -> None:
    # MySQL's default collations would treat these as equal and silently drop events.
    ids = ["evt-a", "EVT-A", "evt-a ", "évt-a", "evt-a\t"]
    assert store.append([ev(i, event_id=eid) for i, eid in enumerate(ids)]) == len(ids)
    assert sorted(e.event_id for e in all_events(store)) == sorted(ids)
    assert store.append([ev(9, event_id="EVT-A")]) == 0
    assert [e.cluster for e in store.query(cluster="C1")] == []


# ---------------------------------------------------------------- filters


def test_filters(store: AuditStore) -> None:
    other_wf = "resurgo:c1:100:1750000000"  # same Slurm id reused: a different job
    events = [
        ev(0, attempt=0, type="monitoring_started", producer="discovery"),
        ev(1, attempt=0, type="anomaly", producer="workflow"),
        ev(2, attempt=0, type="advice", producer="workflow"),
        ev(3, attempt=1, type="action", producer="controller"),
        ev(4, attempt=1, type="reconciliation", producer="controller"),
        ev(5, attempt=None, type="directive_invalid", producer="discovery"),
        ev(6, cluster="c2", job_id=7, workflow_id="resurgo:c2:7:1", type="anomaly"),
        ev(7, job_id=101, workflow_id="resurgo:c1:101:1", type="anomaly"),
        ev(8, workflow_id=other_wf, type="anomaly"),
    ]
    assert store.append(events) == len(events)

    def ids(got: list[StoredAuditEvent]) -> list[int]:
        return [int(e.event_id.rsplit(":e", 1)[1]) for e in got]

    assert ids(store.query(cluster="c1", job_id=100)) == [0, 1, 2, 3, 4, 5, 8]
    assert ids(store.query(workflow_id=WF)) == [0, 1, 2, 3, 4, 5]
    assert ids(store.query(cluster="c2")) == [6]
    assert ids(store.query(job_id=101)) == [7]
    assert ids(store.query(workflow_id=WF, attempt=1)) == [3, 4]
    assert ids(store.query(workflow_id=WF, attempt=0)) == [0, 1, 2]
    assert ids(store.query(types=["anomaly", "advice"])) == [1, 2, 6, 7, 8]
    assert ids(store.query(types=("anomaly",), cluster="c1", job_id=100)) == [1, 8]
    assert store.query(types=[]) == []
    assert ids(store.query(producer="controller")) == [3, 4]
    assert ids(store.query(producer="discovery", workflow_id=WF)) == [0, 5]
    # since inclusive, until exclusive; any timezone, naive = UTC.
    assert ids(store.query(since=T0 + timedelta(seconds=2), until=T0 + timedelta(seconds=5))) == [
        2,
        3,
        4,
    ]
    tokyo = timezone(timedelta(hours=9))
    assert ids(store.query(since=(T0 + timedelta(seconds=7)).astimezone(tokyo))) == [7, 8]
    naive_until = (T0 + timedelta(seconds=1)).replace(tzinfo=None)
    assert ids(store.query(until=naive_until)) == [0]
    assert ids(store.query(order="desc", limit=3)) == [8, 7, 6]
    assert store.query(cluster="nope") == []
    with pytest.raises(ValueError):
        store.query(limit=0)


# ---------------------------------------------------------------- pagination


def test_cursor_pagination_walks_every_row_once(store: AuditStore) -> None:
    events = [ev(n, attempt=n % 3) for n in range(53)]
    random.Random(7).shuffle(events)
    assert store.append(events) == 53

    for order in ("asc", "desc"):
        seen: list[StoredAuditEvent] = []
        after: int | None = None
        while True:
            page = store.query(after_id=after, limit=7, order=order)
            if not page:
                break
            assert len(page) <= 7
            seen.extend(page)
            after = page[-1].id
        row_ids = [e.id for e in seen]
        assert len(seen) == 53
        assert len(set(row_ids)) == 53
        assert row_ids == sorted(row_ids, reverse=order == "desc")
        assert {e.event_id for e in seen} == {e.event_id for e in events}

    # Pagination combined with a filter.
    attempt1 = [e.event_id for e in all_events(store, attempt=1)]
    walked: list[str] = []
    after = None
    while page := store.query(attempt=1, after_id=after, limit=4):
        walked.extend(e.event_id for e in page)
        after = page[-1].id
    assert walked == attempt1
    assert len(walked) == 18


def test_limit_is_capped(store: AuditStore) -> None:
    assert store.append([ev(n, summary="", data={}) for n in range(MAX_LIMIT + 50)]) == 1050
    assert len(store.query(limit=5000)) == MAX_LIMIT
    assert len(all_events(store)) == MAX_LIMIT + 50


# ---------------------------------------------------------------- jobs


def test_jobs_summary(store: AuditStore) -> None:
    wf2 = "resurgo:c1:200:1740830400"
    store.append(
        [
            ev(0, type="monitoring_started"),
            ev(5, type="advice"),
            ev(3, type="anomaly"),  # appended last but not the latest in time
            ev(1, job_id=200, workflow_id=wf2, type="monitoring_started"),
            ev(20, cluster="c2", job_id=100, workflow_id="resurgo:c2:100:1", type="completed"),
        ]
    )
    jobs = store.jobs()
    assert [(j.cluster, j.job_id) for j in jobs] == [("c2", 100), ("c1", 100), ("c1", 200)]
    c1_100 = jobs[1]
    assert c1_100.workflow_id == WF
    assert c1_100.events == 3
    assert c1_100.first_at == T0
    assert c1_100.last_at == T0 + timedelta(seconds=5)
    assert c1_100.last_at.tzinfo is not None
    assert c1_100.last_type == "advice"
    assert jobs[2].events == 1
    assert jobs[2].first_at == jobs[2].last_at == T0 + timedelta(seconds=1)

    only_c1 = store.jobs("c1")
    assert [(j.job_id, j.workflow_id) for j in only_c1] == [(100, WF), (200, wf2)]
    assert store.jobs("nope") == []


# ---------------------------------------------------------------- failures


def test_unreachable_mysql_raises_clearly_and_quickly() -> None:
    store = AuditStore("mysql+pymysql://resurgo:s3cret-pw@127.0.0.1:1/audit")
    started = time.monotonic()
    with pytest.raises(AuditStoreUnavailable) as info:
        store.append([ev(1)])
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert "127.0.0.1:1" in message
    assert "s3cret-pw" not in message
    assert "Can't connect" in message or "refused" in message.lower()
    with pytest.raises(AuditStoreUnavailable):
        store.query()
    with pytest.raises(AuditStoreUnavailable):
        store.create_schema()
    store.close()


def test_unusable_sqlite_path_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(AuditStoreUnavailable, match="audit store"):
        AuditStore(f"sqlite:///{blocker}/audit.db")


def test_unsupported_url() -> None:
    with pytest.raises(ValueError, match="unsupported audit store URL"):
        AuditStore("postgresql://u:pw@h/db")


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"event_id": "x" * 256}, "event_id is 256 characters"),
        ({"event_id": ""}, "empty event_id"),
        ({"cluster": "c" * 129}, "cluster is 129 characters"),
        ({"workflow_id": "w" * 256}, "workflow_id"),
        ({"producer": "p" * 65}, "producer"),
        ({"summary": "é" * (MAX_SUMMARY_BYTES // 2 + 1)}, "summary is .* bytes"),
        ({"data": {"blob": "x" * MAX_DATA_BYTES}}, "data is .* bytes"),
        ({"data": {"bad": object()}}, "not JSON-serializable"),
        ({"job_id": 2**63}, "job_id"),
        ({"attempt": 2**31}, "attempt"),
        ({"at": datetime(999, 12, 31, tzinfo=UTC)}, "before year 1000"),
        ({"summary": "lone \ud800 surrogate"}, "not valid Unicode"),
    ],
)
def test_invalid_event_rejects_whole_batch(
    store: AuditStore, overrides: dict[str, Any], match: str
) -> None:
    store.append([ev(0)])
    with pytest.raises(ValueError, match=match):
        store.append([ev(1), ev(2, **overrides), ev(3)])
    assert [e.event_id for e in all_events(store)] == [ev(0).event_id]


def test_fields_at_their_limits_fit(store: AuditStore) -> None:
    edge = ev(
        1,
        event_id="i" * 255,
        cluster="🔥" * 128,
        workflow_id="w" * 255,
        type=max(AuditEventType, key=len),
        producer="p" * 64,
        summary="é" * (MAX_SUMMARY_BYTES // 2),
        data={"blob": "x" * (MAX_DATA_BYTES - 20)},
        job_id=2**63 - 1,
        attempt=2**31 - 1,
    )
    assert store.append([edge]) == 1
    (got,) = store.query()
    assert got.model_dump(exclude={"id"}) == edge.model_dump()


@pytest.mark.mysql
def test_mysql_warning_guard_refuses_truncation(mariadb_base: str) -> None:
    # Bypasses validation on purpose: INSERT IGNORE must still never truncate silently.
    url, drop = fresh_database(mariadb_base)
    try:
        with AuditStore(url) as s:
            s.create_schema()
            row = {
                "event_id": "e1",
                "cluster": "c" * 300,
                "job_id": 1,
                "workflow_id": "w",
                "attempt": None,
                "type": "t",
                "producer": "p",
                "at": datetime(2025, 1, 1),
                "summary": "",
                "data": "{}",
            }
            with pytest.raises(ValueError, match="rejected by the database"), s.engine.begin() as c:
                s._insert_ignore(c, [row])
            assert s.query() == []
    finally:
        drop()


# ---------------------------------------------------------------- concurrency


def test_concurrent_overlapping_appends_land_exactly_once(store_url: str) -> None:
    stores = [AuditStore(store_url) for _ in range(2)]  # two pools, like two workers
    stores[0].create_schema()
    inserted: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def worker(k: int) -> None:
        try:
            s = stores[k % 2]
            numbers = list(range(k * 40, k * 40 + 120))  # overlaps the next two threads
            random.Random(k).shuffle(numbers)
            barrier.wait()
            for i in range(0, len(numbers), 10):
                n = s.append([ev(m) for m in numbers[i : i + 10]])
                with lock:
                    inserted.append(n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    unique = {m for k in range(4) for m in range(k * 40, k * 40 + 120)}
    got = all_events(stores[0])
    assert sum(inserted) == len(unique) == len(got)
    assert sorted(e.event_id for e in got) == sorted(ev(m).event_id for m in unique)
    for s in stores:
        s.close()


# ---------------------------------------------------------------- Temporal activity


async def test_record_audit_activity(store: AuditStore) -> None:
    activities = AuditActivities(store)
    env = ActivityEnvironment()
    batch = [ev(n) for n in range(3)]
    assert await env.run(activities.record_audit, batch) == 3
    assert await env.run(activities.record_audit, batch) == 0
    assert len(all_events(store)) == 3

    with pytest.raises(ApplicationError) as info:
        await env.run(activities.record_audit, [ev(9), ev(10, cluster="c" * 500)])
    assert info.value.type == "BadAuditEvent"
    assert info.value.non_retryable
    assert "cluster" in info.value.message
    assert len(all_events(store)) == 3


async def test_record_audit_unavailable_is_retryable() -> None:
    store = AuditStore("mysql+pymysql://root@127.0.0.1:1/audit")
    activities = AuditActivities(store)
    with pytest.raises(AuditStoreUnavailable):
        # Not an ApplicationError, so Temporal retries it under the activity's retry policy.
        await ActivityEnvironment().run(activities.record_audit, [ev(1)])
    store.close()


# ---------------------------------------------------------------- configuration


def test_store_url_from_env(tmp_path: Path) -> None:
    assert store_url_from_env({"RESURGO_AUDIT_URL": "mysql+pymysql://u@h/db"}) == (
        "mysql+pymysql://u@h/db"
    )
    assert store_url_from_env({"RESURGO_HOME": str(tmp_path)}) == (
        f"sqlite:///{tmp_path.resolve()}/audit.db"
    )
    default = store_url_from_env({"HOME": str(tmp_path)})
    assert default.startswith("sqlite:////") and default.endswith("/.resurgo/audit.db")
    # The default store works end to end under RESURGO_HOME.
    with AuditStore(store_url_from_env({"RESURGO_HOME": str(tmp_path / "home")})) as s:
        assert s.append([ev(1)]) == 1
    assert (tmp_path / "home" / "audit.db").exists()


def test_lock_conflicts_are_retried_and_other_errors_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    store = AuditStore(f"sqlite:///{tmp_path / 'retry.db'}")
    real = store._insert_ignore
    calls: list[str] = []

    def flaky(conn: Any, rows: list[dict[str, Any]]) -> int:
        calls.append("try")
        if len(calls) <= 2:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return real(conn, rows)

    monkeypatch.setattr(store, "_insert_ignore", flaky)
    assert store.append([ev(1), ev(2)]) == 2 and len(calls) == 3
    assert [e.event_id for e in store.query()] == [ev(1).event_id, ev(2).event_id]

    def broken(conn: Any, rows: list[dict[str, Any]]) -> int:
        calls.append("broken")
        raise OperationalError("INSERT", {}, Exception("disk I/O error"))

    monkeypatch.setattr(store, "_insert_ignore", broken)
    calls.clear()
    with pytest.raises(AuditStoreUnavailable, match="disk I/O error"):
        store.append([ev(3)])
    assert calls == ["broken"]
    store.close()
