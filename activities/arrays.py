"""Array-level activities served by a cluster's controller on `slurm.<cluster>`: the array as
Slurm shows it, and the two array-level steps (hold the pending tasks, exclude nodes for them).

The cluster's gates are enforced here once more, as for every scheduler step: a coordinator in
observe mode never calls `array_action`, and an unacknowledged cluster refuses it anyway.
"""

from __future__ import annotations

from temporalio import activity

from resurgo.activities.errors import permanent_failures
from resurgo.array_models import ArrayActionRequest, ArrayActionResult, ArrayView
from resurgo.contracts import ClusterGates
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.arrays import ArraySteps
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import ActionsNotAllowed


class ArrayActivities:
    def __init__(
        self, cluster: str, slurm: SlurmClient, actions: SlurmActions, gates: ClusterGates
    ) -> None:
        self.cluster = cluster
        self.gates = gates
        self.steps = ArraySteps(slurm, actions)

    def all(self) -> list[object]:
        return [self.array_view, self.array_action]

    @activity.defn(name="array_view")
    async def array_view(self, array_job_id: int) -> ArrayView:
        with permanent_failures():
            return await self.steps.view(array_job_id)

    @activity.defn(name="array_action")
    async def array_action(self, req: ArrayActionRequest) -> ArrayActionResult:
        with permanent_failures():
            if not self.gates.acknowledge_scheduler_actions:
                raise ActionsNotAllowed(
                    f"cluster {self.cluster} has not set acknowledge_scheduler_actions"
                )
            if self.gates.partitions:
                obs = await self.steps.actions.observe(req.array.array_job_id)
                if obs.partition not in self.gates.partitions:
                    raise ActionsNotAllowed(
                        f"partition {obs.partition!r} is not in {self.gates.partitions}"
                    )
            return await self.steps.run(req)
