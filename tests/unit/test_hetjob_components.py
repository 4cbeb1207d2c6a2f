"""A heterogeneous job's components by their own job ids (issue 16): the leader's observation
carries them, the `attempt_started` event records them with each component's nodes, and a
component's own job id finds its hetjob in the audit store (never leader + offset guessed).

`squeue_json_hetjob.json`: `squeue --json` on this repo's cluster (Slurm 22.05.8) while the
hetjob `#SBATCH --nodes=1 / #SBATCH hetjob / #SBATCH --nodes=1`, `srun --het-group=0,1 sleep 40`
ran, kept to that job's two records (33+0 on node1 is job 33, 33+1 on node2 is job 34).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from resurgo.audit.components import recorded_component
from resurgo.audit.store import AuditStore
from resurgo.contracts import AuditEvent, AuditEventType, JobObservation, RecoveryInput
from resurgo.slurm.hetjobs import (
    Component,
    component_in,
    listed_components,
    named_components,
    recorded_components,
    where_components_ran,
)
from resurgo.slurm.json_records import Listing
from tests.unit.test_arrays_discovery import OPTED, make

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "squeue_json_hetjob.json"
WID = "resurgo:c1:33:1796000000"


def listed() -> Listing:
    return Listing(FIXTURE.read_text())


def test_the_leaders_observation_carries_each_components_own_job_id() -> None:
    whole = listed().observation(33)
    assert whole is not None
    assert whole.het_job_ids == [33, 34] and whole.het_nodes == [["node1"], ["node2"]]
    # The component's record is a job of its own to Slurm, not the whole job.
    part = listed().observation(34)
    assert part is not None and part.het_job_ids == [] and part.node_list == ["node2"]


def test_attempt_started_records_each_component_with_its_job_id_and_nodes() -> None:
    whole = listed().observation(33)
    assert whole is not None
    assert recorded_components(whole) == [
        {"component": "33+0", "job_id": 33, "nodes": ["node1"]},
        {"component": "33+1", "job_id": 34, "nodes": ["node2"]},
    ]
    assert where_components_ran(whole) == "33+0: node1; 33+1: node2"
    # Not a hetjob (or one read before this change, without the ids): nothing recorded.
    plain = JobObservation(job_id=7, state="RUNNING", node_list=["node1"])
    assert recorded_components(plain) == []
    assert recorded_components(whole.model_copy(update={"het_job_ids": []})) == []


def test_a_component_is_found_in_recorded_data_only() -> None:
    whole = listed().observation(33)
    assert whole is not None
    data = {"nodes": whole.node_list, "components": recorded_components(whole)}
    found = component_in(data, 34)
    assert found == Component(job_id=34, leader=33, offset=1)
    assert found.sentence() == "34 is component 33+1 of heterogeneous job 33"
    assert component_in(data, 35) is None  # leader + 2 is not guessed
    assert component_in({"nodes": ["node1"]}, 34) is None
    assert component_in({"components": [{"component": "x", "job_id": 34}]}, 34) is None


def started(job_id: int, wid: str, data: dict[str, object], attempt: int = 0) -> AuditEvent:
    return AuditEvent(
        event_id=f"{wid}:attempt_started:a{attempt}", cluster="c1", job_id=job_id,
        workflow_id=wid, attempt=attempt, type=AuditEventType.ATTEMPT_STARTED,
        producer="workflow", at=datetime(2026, 12, 5, tzinfo=UTC), summary="started", data=data,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    return AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")


def test_the_store_finds_the_hetjob_a_component_id_belongs_to(store: AuditStore) -> None:
    whole = listed().observation(33)
    assert whole is not None
    store.append([started(33, WID, {"nodes": ["node1", "node2"],
                                    "components": recorded_components(whole)})])  # fmt: skip
    found = recorded_component(store, 34, "c1")
    assert found is not None and found.workflow_id == WID and found.cluster == "c1"
    assert found.component.ref == "33+1"
    assert recorded_component(store, 34) is not None  # any cluster
    assert recorded_component(store, 34, "c2") is None
    assert recorded_component(store, 3, "c1") is None  # `"job_id":34,` is not `"job_id":3`
    assert recorded_component(store, 4, "c1") is None
    # The leader's own id is the job itself (its events), never "a component".
    assert recorded_component(store, 33, "c1") is None


def test_a_reused_id_with_a_trail_of_its_own_names_its_own_job(store: AuditStore) -> None:
    whole = listed().observation(33)
    assert whole is not None
    store.append([started(33, WID, {"components": recorded_components(whole)})])
    store.append([started(34, "resurgo:c1:34:1797000000", {"nodes": ["node3"]})])
    assert recorded_component(store, 34, "c1") is None


def test_an_event_claiming_another_jobs_component_is_not_believed(store: AuditStore) -> None:
    # Job 40's event lists a component "33+1" with id 34: not 40's own component.
    forged = [{"component": "33+1", "job_id": 34, "nodes": []}]
    store.append([started(40, "resurgo:c1:40:1", {"components": forged})])
    assert recorded_component(store, 34, "c1") is None


# ---- before the job runs: discovery lists the components, monitoring_started records them --


def test_discovery_lists_each_hetjobs_components_by_offset() -> None:
    rows = listed().discovered()
    assert sorted((r.job_id, r.het_job_id, r.het_job_offset) for r in rows) == [
        (33, 33, 0),
        (34, 33, 1),
    ]
    assert listed_components(rows) == {33: [33, 34]}
    assert listed_components(list(reversed(rows))) == {33: [33, 34]}
    # A component missing from the listing: not numbered from what is left.
    assert listed_components([r for r in rows if r.job_id == 34]) == {}
    assert named_components(33, [33, 34]) == [
        {"component": "33+0", "job_id": 33},
        {"component": "33+1", "job_id": 34},
    ]
    assert named_components(33, [33]) == []


async def test_discovery_gives_the_leaders_workflow_its_components() -> None:
    rows = [r.model_copy(update={"comment": OPTED}) for r in listed().discovered()]
    discovery, temporal = make(rows)
    await discovery.poll_once()
    ((_, inp, _),) = temporal.started
    assert isinstance(inp, RecoveryInput) and inp.job.job_id == 33
    assert inp.het_job_ids == [33, 34]


def test_the_store_finds_a_component_recorded_when_monitoring_started(store: AuditStore) -> None:
    event = started(33, WID, {"components": named_components(33, [33, 34])})
    store.append([event.model_copy(update={"type": AuditEventType.MONITORING_STARTED,
                                          "event_id": f"{WID}:monitoring_started"})])  # fmt: skip
    found = recorded_component(store, 34, "c1")
    assert found is not None and found.sentence() == "34 is component 33+1 of heterogeneous job 33"
    assert recorded_component(store, 3, "c1") is None
