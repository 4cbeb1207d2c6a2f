"""Discovery of job arrays and heterogeneous jobs (worker/discovery.py, worker/array_discovery):
which rows get a workflow, under which identity, and what a skipped job leaves in the audit.
Slurm and Temporal are stand-ins that record every start."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from resurgo.array_models import ArrayInput
from resurgo.config import ClusterSettings, ResurgoConfig
from resurgo.contracts import AuditEvent, AuditEventType, RecoveryInput
from resurgo.slurm.parsers import (
    SQUEUE_END,
    SQUEUE_SEP,
    DiscoveredJob,
    parse_squeue_discovery,
)
from resurgo.worker.discovery import Discovery
from resurgo.workflows import search_attributes as sa

CLUSTER = "arr"
SUBMIT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
OPTED = json.dumps({"resurgo": {"mode": "action"}})


def row(job_id: int, state: str = "RUNNING", comment: str = OPTED, **kw: Any) -> DiscoveredJob:
    return DiscoveredJob(
        job_id=job_id, submit_time=SUBMIT, state=state, end_time=None, user="alice",
        partition="debug", name="sweep", comment=comment, **kw,
    )  # fmt: skip


class FakeSlurm:
    def __init__(self, jobs: list[DiscoveredJob]) -> None:
        self.jobs = jobs

    async def list_jobs(self) -> list[DiscoveredJob]:
        return self.jobs

    async def structured(self) -> bool:
        return True


class FakeTemporal:
    def __init__(self) -> None:
        self.started: list[tuple[str, object, dict[str, Any]]] = []

    async def _none(self) -> AsyncIterator[Any]:
        for _ in ():
            yield _

    def list_workflows(self, query: str, limit: int = 1) -> AsyncIterator[Any]:
        return self._none()

    async def start_workflow(self, fn: Any, arg: object, *, id: str, **kw: Any) -> None:
        self.started.append((id, arg, kw))

    def ids(self) -> list[str]:
        return [s[0] for s in self.started]


def make(jobs: list[DiscoveredJob]) -> tuple[Discovery, FakeTemporal]:
    temporal = FakeTemporal()
    config = ResurgoConfig(clusters={CLUSTER: ClusterSettings(discovery_interval=0.01)})
    return Discovery(temporal, FakeSlurm(jobs), CLUSTER, config), temporal  # type: ignore[arg-type]


def task(job_id: int, task_id: int, state: str = "RUNNING", **kw: Any) -> DiscoveredJob:
    return row(job_id, state, array_job_id=500, array_task_id=task_id, **kw)


async def test_a_large_array_costs_one_coordinator_and_one_workflow_per_started_task() -> None:
    jobs = [
        # 996 tasks that never started: one row, never a workflow each.
        row(500, "PENDING", array_job_id=500, array_tasks="4-999%4"),
        task(501, 0), task(502, 1), task(503, 2),
        # A task's own PENDING row (requeued, or split off unstarted): no workflow now.
        task(504, 3, "PENDING"),
    ]  # fmt: skip
    discovery, temporal = make(jobs)
    ts = int(SUBMIT.timestamp())
    await discovery.poll_once()
    assert temporal.ids() == [
        f"resurgo:{CLUSTER}:array:500",
        f"resurgo:{CLUSTER}:500_0:{ts}",
        f"resurgo:{CLUSTER}:500_1:{ts}",
        f"resurgo:{CLUSTER}:500_2:{ts}",
    ]
    coordinator = temporal.started[0][1]
    assert isinstance(coordinator, ArrayInput) and coordinator.mode.value == "action"
    first = temporal.started[1][1]
    assert isinstance(first, RecoveryInput)
    # People see `500_0`; the scheduler steps use Slurm's own task job id.
    assert first.job.label() == f"{CLUSTER}/500_0" and first.job.job_id == 501
    attrs = {p.key.name: p.value for p in temporal.started[1][2]["search_attributes"]}
    assert attrs[sa.SLURM_JOB_ID.name] == "500_0"
    # The next poll starts nothing again (the coordinator is asked again only after a while).
    await discovery.poll_once()
    assert len(temporal.started) == 4


async def test_an_array_that_did_not_opt_in_costs_nothing() -> None:
    jobs = [row(500, "PENDING", comment="", array_job_id=500, array_tasks="1-9"),
            task(501, 0, comment="")]  # fmt: skip
    discovery, temporal = make(jobs)
    await discovery.poll_once()
    assert temporal.started == []


async def test_a_heterogeneous_job_is_one_workflow_for_its_leader() -> None:
    discovery, temporal = make([row(70, het_job_id=70), row(71, het_job_id=70)])
    await discovery.poll_once()
    assert temporal.ids() == [f"resurgo:{CLUSTER}:70:{int(SUBMIT.timestamp())}"]


async def test_an_array_read_from_text_output_is_skipped_with_one_audit_event() -> None:
    def line(ref: str) -> str:
        fields = [ref, "2026-12-04T12:00:00", "RUNNING", "N/A", "alice", "debug", "sweep", OPTED]
        return SQUEUE_SEP.join(fields) + SQUEUE_END + "\n"

    rows = parse_squeue_discovery(line("88_0") + line("88_1") + line("88_[2-9%2]"))
    assert [(r.job_id, bool(r.unreadable)) for r in rows] == [(88, True)]
    discovery, temporal = make(rows)
    await discovery.poll_once()
    await discovery.poll_once()
    ((wf_id, event, _),) = temporal.started
    assert isinstance(event, AuditEvent) and event.type == AuditEventType.JOB_SKIPPED
    assert "squeue --json" in event.summary and event.job_id == 88
    assert wf_id == event.workflow_id == f"resurgo:{CLUSTER}:notice:88:{int(SUBMIT.timestamp())}"
