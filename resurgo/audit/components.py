"""A heterogeneous job's component named by its own job id (`86` for `85+1`): the hetjob it
belongs to, as the hetjob's workflow recorded it in the audit store (resurgo/slurm/hetjobs).

Shared by the API (job detail, timeline, audit search) and `resurgo audit`: one rule for what a
component's job id names.
"""

from __future__ import annotations

from dataclasses import dataclass

from resurgo.audit.store import AuditStore
from resurgo.slurm.hetjobs import Component, component_in


@dataclass(frozen=True)
class RecordedComponent:
    """`component` of the hetjob that `workflow_id` watches on `cluster`."""

    component: Component
    cluster: str
    workflow_id: str

    def sentence(self) -> str:
        return self.component.sentence()


def recorded_component(
    store: AuditStore, job_id: int, cluster: str | None = None
) -> RecordedComponent | None:
    """The hetjob whose workflow recorded a component with the job id `job_id`, the most
    recently recorded one first; None when none did, or when `job_id` has audit events of its
    own (Slurm reused the id for a job Resurgo watches: that job is what the id names now)."""
    if store.query(cluster=cluster, job_id=job_id, limit=1):
        return None
    for event in store.component_events(job_id, cluster):
        found = component_in(event.data, job_id)
        # The event is the leader's own (its workflow's job): a component of that very job.
        if found is not None and found.leader == event.job_id:
            return RecordedComponent(found, event.cluster, event.workflow_id)
    return None


__all__ = ["RecordedComponent", "recorded_component"]
