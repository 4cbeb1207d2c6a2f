"""Job arrays in Slurm: the array as a whole, and the two array-level steps (hold the pending
tasks, exclude nodes for them).

Verified on Slurm 22.05 (this repo's cluster): the tasks that never started are one record,
`job_id == array_job_id` with `array_task_string` like `2-5%2`; every task that started (or was
split off) is a record of its own with `array_task_id`. `scontrol hold <array id>` also writes
Priority=0 / JobHeldAdmin onto the running tasks, and `scontrol update JobId=<array id>
ExcNodeList=..` fails (exit 1) for them while applying to the pending ones; addressed as
`<array id>_[<tasks>]`, both touch exactly the pending tasks and exit 0. So every step here names
the pending tasks explicitly.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from resurgo.array_models import ArrayActionRequest, ArrayActionResult, ArrayStep, ArrayView
from resurgo.contracts import ActionRequest, ActionStep, JobKey
from resurgo.policy.directive import parse_directive
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.client import SlurmClient, check_node_name
from resurgo.slurm.errors import ActionsNotAllowed, CommandFailed, ParseError, PreconditionFailed
from resurgo.slurm.json_records import Listing, job_state, number, observation, text

log = logging.getLogger(__name__)

# Slurm's task expression: `4-9`, `1,3,5-7`, `0-15:4`, with an optional `%throttle` suffix.
_TASKS = re.compile(
    r"^\d{1,10}(?:-\d{1,10}(?::\d{1,10})?)?(?:,\d{1,10}(?:-\d{1,10}(?::\d{1,10})?)?)*$"
)
MAX_TASK_EXPRESSION = 4096


def task_expression(raw: str) -> str:
    """The pending tasks' expression without its throttle (`2-5%2` → `2-5`); ParseError for
    anything else (it becomes an scontrol argument)."""
    tasks = raw.split("%", 1)[0].strip()
    if len(tasks) > MAX_TASK_EXPRESSION or not _TASKS.match(tasks):
        raise ParseError(f"unexpected array task expression {raw[:80]!r}")
    return tasks


def pending_target(array_job_id: int, tasks: str) -> str:
    """`12_[4-9]`: what scontrol takes to address only these tasks of array 12."""
    return f"{array_job_id}_[{task_expression(tasks)}]"


def _records(listing: Listing, array_job_id: int) -> list[dict[str, Any]]:
    return [r for r in listing.records.values() if number(r.get("array_job_id")) == array_job_id]


def array_view(listing: Listing, array_job_id: int) -> ArrayView:
    """Tasks by state (the unstarted ones counted from their expression), and the pending
    record's hold and exclusions."""
    by_state: dict[str, int] = {}
    pending_tasks = ""
    held = False
    excluded: list[str] = []
    for record in _records(listing, array_job_id):
        state = job_state(record.get("job_state"))
        string = text(record.get("array_task_string"))
        if string and number(record.get("array_task_id")) is None:
            try:
                pending_tasks = task_expression(string)
            except ParseError as exc:
                log.error("array %s: %s", array_job_id, exc)
                continue
            obs = observation(record, listing.version)
            held, excluded = obs.held, obs.exc_node_list
            by_state[state] = by_state.get(state, 0) + count_tasks(pending_tasks)
        else:
            by_state[state] = by_state.get(state, 0) + 1
    return ArrayView(
        array_job_id=array_job_id,
        tasks_by_state=dict(sorted(by_state.items())),
        pending_tasks=pending_tasks,
        pending_held=held,
        pending_excluded=excluded,
    )


def count_tasks(expression: str) -> int:
    total = 0
    for part in expression.split(","):
        bounds, _, step = part.partition(":")
        low, _, high = bounds.partition("-")
        stride = int(step) if step else 1
        total += (int(high or low) - int(low)) // max(stride, 1) + 1
    return total


class ArraySteps:
    """The array-level steps, each idempotent: observe, skip what is already true, act."""

    def __init__(self, slurm: SlurmClient, actions: SlurmActions) -> None:
        self.slurm = slurm
        # Shared with the per-job steps: the circuit breaker and capacity checks.
        self.actions = actions

    async def view(self, array_job_id: int) -> ArrayView:
        listing = await self.slurm.squeue_json()
        if listing is None:
            raise PreconditionFailed("array steps need squeue --json (Slurm 21.08 or later)")
        return array_view(listing, array_job_id)

    async def run(self, req: ArrayActionRequest) -> ArrayActionResult:
        view = await self.view(req.array.array_job_id)
        if not view.pending_tasks:
            return ArrayActionResult(
                step=req.step,
                outcome="nothing_pending",
                detail="no task of the array is still waiting to start",
            )
        await self._check_own_opt_in(req)
        target = pending_target(req.array.array_job_id, view.pending_tasks)
        if req.step == ArrayStep.HOLD_PENDING:
            return await self._hold(req, view, target)
        return await self._exclude(req, view, target)

    async def _tolerating_starts(
        self, command: Awaitable[None], array_job_id: int, done: Callable[[ArrayView], bool]
    ) -> ArrayView:
        """Run `command` on the pending tasks and return the array afterwards. A task that
        started between the look and the command makes scontrol exit 1 ("no longer pending")
        while the rest got the change: judged by what Slurm shows, not by the exit code."""
        try:
            await command
        except CommandFailed:
            after = await self.view(array_job_id)
            if after.pending_tasks and not done(after):
                raise
            return after
        return await self.view(array_job_id)

    async def _check_own_opt_in(self, req: ArrayActionRequest) -> None:
        """The pending tasks' own record, read afresh, must still opt in."""
        obs = await self.slurm.show_job(req.array.array_job_id)
        parsed = parse_directive(obs.comment if obs else "")
        if obs is None or not parsed.opted_in or parsed.directive is None:
            raise ActionsNotAllowed(
                f"array {req.array.array_job_id} does not opt in to Resurgo in its own comment;"
                f" refusing {req.step.value}"
            )

    async def _hold(
        self, req: ArrayActionRequest, view: ArrayView, target: str
    ) -> ArrayActionResult:
        if view.pending_held:
            return ArrayActionResult(
                step=req.step,
                outcome="already_satisfied",
                target=target,
                detail=f"{target} already held",
            )
        after = await self._tolerating_starts(
            self.slurm.hold_tasks(target), req.array.array_job_id, lambda v: v.pending_held
        )
        if after.pending_tasks and not after.pending_held:
            raise PreconditionFailed(f"scontrol hold {target} left the pending tasks unheld")
        return ArrayActionResult(
            step=req.step,
            outcome="applied",
            target=target,
            # Not the bare array id: that also releases a task Resurgo holds mid-requeue, which
            # would then start before its exclusions are in place.
            detail=f"held {target}; `scontrol release {target}` releases them",
        )

    async def _exclude(
        self, req: ArrayActionRequest, view: ArrayView, target: str
    ) -> ArrayActionResult:
        wanted = {check_node_name(n) for n in req.nodes}
        if wanted <= set(view.pending_excluded):
            return ArrayActionResult(
                step=req.step,
                outcome="already_satisfied",
                target=target,
                detail=f"ExcNodeList={','.join(view.pending_excluded)}",
            )
        merged = sorted(set(view.pending_excluded) | wanted)
        obs = await self.actions.observe(req.array.array_job_id)
        await self.actions._check_capacity(obs, set(merged))
        # The cluster's circuit breaker and per-node caps judge the array's exclusion as they
        # judge one job's.
        as_job = ActionRequest(
            job=JobKey(
                cluster=req.array.cluster,
                job_id=req.array.array_job_id,
                submit_time=req.array.submit_time,
            ),
            step=ActionStep.EXCLUDE_NODES,
            idempotency_key=req.idempotency_key,
            attempt=0,
            nodes=sorted(wanted),
        )
        async with self.actions._remediating:
            await self.actions._check_breaker(as_job, wanted)
            after = await self._tolerating_starts(
                self.slurm.update_tasks(target, ExcNodeList=",".join(merged)),
                req.array.array_job_id,
                lambda v: wanted <= set(v.pending_excluded),
            )
        if after.pending_tasks and not wanted <= set(after.pending_excluded):
            raise PreconditionFailed(f"ExcNodeList of {target} is {after.pending_excluded}")
        return ArrayActionResult(
            step=req.step,
            outcome="applied",
            target=target,
            detail=f"ExcNodeList={','.join(merged)} for {target}",
        )
