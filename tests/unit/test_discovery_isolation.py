"""Discovery's loop: one job's data can never end a poll or the process (worker/discovery.py).

Slurm and Temporal are stand-ins here so that any failure can be injected; the real cluster
and Temporal are exercised in tests/integration/test_hostile_slurm.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from resurgo.config import ClusterSettings, ResurgoConfig
from resurgo.slurm.parsers import DiscoveredJob
from resurgo.worker import discovery as discovery_module
from resurgo.worker.discovery import BAD_JOB_RETRY, Discovery

CLUSTER = "iso"


def job(job_id: int, name: str = "train") -> DiscoveredJob:
    return DiscoveredJob(
        job_id=job_id, submit_time=datetime(2026, 11, 29, 12, 0, tzinfo=UTC), state="RUNNING",
        end_time=None, user="alice", partition="debug", name=name,
        comment=json.dumps({"resurgo": {"mode": "observe"}}),
    )  # fmt: skip


class FakeSlurm:
    def __init__(self, jobs: list[DiscoveredJob]) -> None:
        self.jobs = jobs
        self.fail_next: BaseException | None = None

    async def list_jobs(self) -> list[DiscoveredJob]:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return self.jobs

    async def structured(self) -> bool:
        return True


class FakeTemporal:
    """Starts succeed, except for jobs named after a failure."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def _none(self) -> AsyncIterator[Any]:
        for _ in ():
            yield _

    def list_workflows(self, query: str, limit: int = 1) -> AsyncIterator[Any]:
        return self._none()

    async def start_workflow(self, *args: Any, id: str, **kw: Any) -> None:
        name = args[1].job_name
        if name == "unserialisable":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        if name == "rejected":
            raise RPCError("search attribute too long", RPCStatusCode.INVALID_ARGUMENT, b"")
        if name == "temporal-down":
            raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")
        self.started.append(id)


def make(jobs: list[DiscoveredJob]) -> tuple[Discovery, FakeSlurm, FakeTemporal]:
    slurm, temporal = FakeSlurm(jobs), FakeTemporal()
    config = ResurgoConfig(clusters={CLUSTER: ClusterSettings(discovery_interval=0.01)})
    return Discovery(temporal, slurm, CLUSTER, config), slurm, temporal  # type: ignore[arg-type]


async def test_a_job_that_fails_costs_only_that_job() -> None:
    jobs = [job(1, "unserialisable"), job(2), job(3, "rejected"), job(4)]
    discovery, _, temporal = make(jobs)
    started = await discovery.poll_once()
    assert [wf.split(":")[2] for wf in started] == ["2", "4"] and temporal.started == started
    # The failed ones are looked at again later, not at every poll.
    assert await discovery.poll_once() == []
    clock = asyncio.get_running_loop().time()
    waits = [t for t in discovery.known.values() if t is not None]
    assert len(waits) == 2 and all(clock < t <= clock + BAD_JOB_RETRY for t in waits)


async def test_any_exception_from_one_jobs_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    real = discovery_module.recovery_input

    def breaks_on_job_1(*args: Any) -> Any:
        if args[3].job_id == 1:
            raise RecursionError("maximum recursion depth exceeded")
        return real(*args)

    monkeypatch.setattr(discovery_module, "recovery_input", breaks_on_job_1)
    discovery, _, _ = make([job(1), job(2)])
    assert [wf.split(":")[2] for wf in await discovery.poll_once()] == ["2"]


async def test_temporal_down_ends_the_poll_not_a_job() -> None:
    discovery, _, _ = make([job(1, "temporal-down"), job(2)])
    with pytest.raises(RPCError):
        await discovery.poll_once()
    assert not any(t is not None for t in discovery.known.values()), "no job is blamed"


async def test_nothing_ends_the_loop() -> None:
    discovery, slurm, temporal = make([job(1)])
    slurm.fail_next = ValueError("a bug in a parser")
    task = asyncio.create_task(discovery.run_forever())
    try:
        for _ in range(500):
            if temporal.started:
                break
            await asyncio.sleep(0.01)
        assert temporal.started and not task.done()
    finally:
        task.cancel()


class SlowTemporal(FakeTemporal):
    """Each start takes a while (a visibility query and a start on a busy server); records how
    many were in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.most = 0

    async def start_workflow(self, *args: Any, id: str, **kw: Any) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        await super().start_workflow(*args, id=id, **kw)


async def test_new_jobs_are_started_side_by_side_within_a_bound() -> None:
    """A thousand jobs submitted at once: started side by side (one at a time took a quarter
    of an hour at 1,000), never more than DISCOVERY_CONCURRENCY at once, each exactly once, and
    reported in the listing's order."""
    jobs = [job(n) for n in range(1, 101)]
    config = ResurgoConfig(clusters={CLUSTER: ClusterSettings(discovery_interval=0.01)})
    temporal = SlowTemporal()
    discovery = Discovery(temporal, FakeSlurm(jobs), CLUSTER, config)  # type: ignore[arg-type]
    started = await discovery.poll_once()
    assert temporal.most == discovery_module.DISCOVERY_CONCURRENCY
    assert sorted(temporal.started) == sorted(started) and len(set(started)) == 100
    assert [s.split(":")[2] for s in started] == [str(n) for n in range(1, 101)]
    assert await discovery.poll_once() == []
