"""The lemon sentinel: follows the audit trail, keeps the node ledger, and starts one
NodeHealthWorkflow per node that lemon detection advises draining.

It also starts one (with `adopt`) for a node a job's recovery drained (the `drain_node` step,
a cross-job drain) when lemon_mode is action and a health check is configured, so that node is
validated and resumed too instead of waiting for a human.

Runs in `resurgo worker` (which owns the audit store). Starting is idempotent: one workflow id
per node; a running one is left alone, and an advice already started (the same jobs) is not
started again. Whether the drain happens is the workflow's and the controller's business
(lemon_mode, approval, acknowledge_scheduler_actions, allow_drain, the circuit breaker).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from resurgo.audit.store import AuditStore, AuditStoreUnavailable
from resurgo.config import ResurgoConfig
from resurgo.contracts import CORE_TASK_QUEUE, Mode, PolicyConfig
from resurgo.nodes.ledger import Ledger, LedgerEntry, unvalidated_drain
from resurgo.nodes.lemon import LemonAdvice, lemon_advice
from resurgo.nodes.models import HealthCheckSpec, NodeHealthInput
from resurgo.nodes.read import LEDGER_EVENT_TYPES
from resurgo.workflows.node_health import NodeHealthWorkflow

log = logging.getLogger("resurgo.nodes")

SCAN_SECONDS = 5.0


def node_health_input(advice: LemonAdvice, policy: PolicyConfig) -> NodeHealthInput:
    rules = policy.nodes
    check = (
        HealthCheckSpec(
            command=rules.health_check,
            timeout_seconds=rules.health_check_timeout_seconds,
            output_dir=rules.health_check_output_dir,
        )
        if rules.health_check
        else None
    )
    return NodeHealthInput(
        cluster=advice.cluster, node=advice.node, advice=advice, mode=Mode(rules.lemon_mode),
        require_approval=policy.require_approval, check=check,
        validate_after_seconds=rules.validate_after_seconds, poll_seconds=rules.poll_seconds,
    )  # fmt: skip


def adoption(cluster: str, node: str, drain: LedgerEntry, window_seconds: float) -> LemonAdvice:
    """What a node workflow adopting a job's drain carries as its advice: the drain itself."""
    jobs = [drain.job_id] if drain.job_id is not None else []
    return LemonAdvice(
        cluster=cluster, node=node, jobs=jobs, failures=0,
        reason=drain.summary[:250] or f"drained by Resurgo for job {jobs}",
        window_seconds=window_seconds, first_at=drain.at, last_at=drain.at,
    )  # fmt: skip


class NodeSentinel:
    def __init__(
        self,
        client: Client,
        store: AuditStore,
        config: ResurgoConfig,
        *,
        interval: float = SCAN_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.store = store
        self.clusters = set(config.clusters)
        self.policy = config.policy(None)
        self.interval = interval
        self.clock = clock
        self.ledger = Ledger()
        self.after_id: int | None = None
        self.started: dict[tuple[str, str], list[int]] = {}

    def _read_new(self) -> None:
        for event in self.store.iter_all(after_id=self.after_id, types=LEDGER_EVENT_TYPES):
            self.after_id = event.id
            if event.cluster in self.clusters:
                self.ledger.add(event)

    async def tick(self) -> list[LemonAdvice]:
        """Read what is new in the audit trail; start a workflow for each new advice, and one
        for each node a job's recovery drained (validation, in action mode with a check)."""
        await asyncio.to_thread(self._read_new)
        now = self.clock()
        rules = self.policy.nodes
        adopting = rules.lemon_mode == "action" and bool(rules.health_check)
        started = []
        for cluster, node, history in self.ledger.histories():
            advice = lemon_advice(cluster, node, history, self.policy, now=now)
            inp = node_health_input(advice, self.policy) if advice else None
            drain = unvalidated_drain(history) if adopting and advice is None else None
            if drain is not None:
                advice = adoption(cluster, node, drain, rules.lemon_window_seconds)
                inp = node_health_input(advice, self.policy).model_copy(update={"adopt": True})
            if advice is None or inp is None or self.started.get((cluster, node)) == advice.jobs:
                continue
            if await self._start(inp):
                log.warning("%s/%s: %s", cluster, node, advice.reason)
                started.append(advice)
            self.started[(cluster, node)] = advice.jobs
        return started

    async def _start(self, inp: NodeHealthInput) -> bool:
        try:
            await self.client.start_workflow(
                NodeHealthWorkflow.run, inp, id=inp.workflow_id(), task_queue=CORE_TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )  # fmt: skip
        except WorkflowAlreadyStartedError:
            log.info("%s/%s: node health workflow already running", inp.cluster, inp.node)
            return False
        return True

    async def run_forever(self) -> None:
        while True:
            try:
                await self.tick()
            except (AuditStoreUnavailable, RPCError) as exc:
                log.warning("node sentinel: %s; trying again", exc)
            except Exception:
                # Never take the worker (and every job's workflow) down with the sentinel.
                log.exception("node sentinel failed; trying again")
            await asyncio.sleep(self.interval)
