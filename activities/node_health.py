"""Controller activities of the node health workflow: drain a lemon node (through the cluster's
gates and circuit breaker), look at a node, run the health check on it, and end a validation.

Every step is idempotent: it observes first and skips what is already true, so a retry after a
controller died mid-step never acts twice. The check itself is found again by its job name
(one per validation round), never submitted a second time.

How a check runs on a drained node: Slurm never starts a job on a DRAIN node, reservation or
not. So the node is first put in a maintenance reservation that admits only the controller's
user (`Flags=MAINT,IGNORE_JOBS`, no end), then set to RESUME: it accepts no job but the check.
A pass deletes the reservation (the node is back in service); a failure drains the node again
with the failed check in its Reason, then deletes the reservation. A controller that dies in
between leaves the node inside the reservation: out of service, never resumed unvalidated.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from datetime import UTC, datetime

from temporalio import activity

from resurgo.activities.errors import permanent_failures
from resurgo.contracts import ClusterGates, NodeObservation
from resurgo.errors import TransientError
from resurgo.nodes import health_check as hc
from resurgo.nodes.models import (
    HealthCheckRequest,
    HealthCheckResult,
    NodeDrainRequest,
    NodeLook,
    NodeStepResult,
    ReturnRequest,
)
from resurgo.slurm import breaker
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.breaker import BreakerSettings
from resurgo.slurm.client import SlurmClient, check_node_name
from resurgo.slurm.errors import (
    ActionsNotAllowed,
    CommandFailed,
    PreconditionFailed,
    SchedulerError,
)
from resurgo.slurm.runner import CommandResult, CommandRunner

log = logging.getLogger("resurgo.node_health")

POLL_SECONDS = 2.0
# Output beyond this is not read (the report lines come first or last; the tail is kept).
MAX_OUTPUT_BYTES = 256 * 1024
# No breaker job owns a lemon drain: its remediation is counted as a drain of its own.
NODE_JOB_ID = -1


class StillDraining(SchedulerError, TransientError):
    """Jobs still run on the drained node: the check waits for them (retried)."""


class NodeActivities:
    def __init__(
        self,
        cluster: str,
        runner: CommandRunner,
        gates: ClusterGates,
        breaker_settings: BreakerSettings | None,
        actions: SlurmActions,
    ) -> None:
        self.cluster = cluster
        self.runner = runner
        # The controller's client: node reads share its one decision on --json (client.py).
        self.slurm: SlurmClient = actions.slurm
        self.gates = gates
        self.breaker = breaker_settings
        self.actions = actions
        self._user: str | None = None
        self._draining = asyncio.Lock()

    def all(self) -> list[object]:
        return [self.node_drain, self.node_look, self.node_health_check, self.node_return]

    async def _run(self, argv: list[str], timeout: float = 30.0) -> CommandResult:
        result = await self.runner.run(argv, timeout=timeout)
        if result.returncode != 0:
            text = (result.stderr or result.stdout).strip()
            raise CommandFailed(f"{shlex.join(argv)} exited {result.returncode}: {text[:500]}")
        return result

    async def _node(self, node: str) -> NodeObservation | None:
        found = await self.slurm.show_nodes([check_node_name(node)])
        return next((n for n in found if n.name == node), None)

    async def _look(self, node: str) -> NodeLook:
        match = await self._node(node)
        if match is None:
            return NodeLook(node=node, exists=False)
        return NodeLook(node=node, state=match.state, reason=match.reason)

    @activity.defn(name="node_look")
    async def node_look(self, node: str) -> NodeLook:
        with permanent_failures():
            return await self._look(node)

    # ---- drain --------------------------------------------------------------------------------
    @activity.defn(name="node_drain")
    async def node_drain(self, req: NodeDrainRequest) -> NodeStepResult:
        with permanent_failures():
            if not self.gates.acknowledge_scheduler_actions:
                raise ActionsNotAllowed(
                    f"cluster {self.cluster} has not set acknowledge_scheduler_actions"
                )
            if self.breaker is None or not self.breaker.allow_drain:
                raise ActionsNotAllowed(f"cluster {self.cluster} does not allow draining "
                                        "(allow_drain is off)")  # fmt: skip
            look = await self._look(req.node)
            if not look.exists:
                raise PreconditionFailed(f"node {req.node} is unknown to slurmctld")
            await self._check_partitions(req.node)
            if "DRAIN" in look.state and hc.ours(look.reason, req.key):
                return NodeStepResult(outcome="already_satisfied", detail="drained", look=look)
            if req.adopt:
                return await self._adopt(req, look)
            if any(bad in look.state for bad in ("DRAIN", "DOWN", "FAIL")):
                # Someone else's drain or a down node: their Reason is not ours to overwrite.
                raise PreconditionFailed(
                    f"node {req.node} is already out of service ({look.state}: "
                    f"{look.reason[:200]!r}); left as it is"
                )
            async with self._draining:
                await self._check_breaker(req.node)
                await self.slurm.drain_node(req.node, req.reason[: hc.MAX_REASON])
            after = await self._look(req.node)
            return NodeStepResult(outcome="applied", detail=f"drained {req.node}", look=after)

    async def _adopt(self, req: NodeDrainRequest, look: NodeLook) -> NodeStepResult:
        """Retag a drain Resurgo made for a job; anything else is not ours to validate."""
        if "DRAIN" not in look.state or not look.reason.startswith("resurgo"):
            raise PreconditionFailed(
                f"node {req.node} is not drained by Resurgo ({look.state}: "
                f"{look.reason[:200]!r}); not adopting it"
            )
        await self.slurm.drain_node(req.node, req.reason[: hc.MAX_REASON])
        return NodeStepResult(outcome="applied", detail=f"adopted the drain of {req.node}",
                              look=await self._look(req.node))  # fmt: skip

    async def _check_partitions(self, node: str) -> None:
        """The partition allowlist: a node outside every allowed partition is not ours."""
        if not self.gates.partitions:
            return
        found = await self._node(node)
        partitions = found.partitions if found is not None else []
        if not set(partitions) & set(self.gates.partitions):
            raise ActionsNotAllowed(
                f"node {node} is in partitions {partitions}, none of {self.gates.partitions}"
            )

    async def _check_breaker(self, node: str) -> None:
        if self.breaker is None:
            return
        facts, all_nodes = await self.actions.remediations()
        why = breaker.refusal(
            facts, cluster=self.cluster, job_id=NODE_JOB_ID, requested={node},
            total_nodes=len(all_nodes), settings=self.breaker, now=datetime.now(UTC),
        )  # fmt: skip
        if why:
            raise PreconditionFailed(f"drain of {node} refused by {why}")

    # ---- health check -------------------------------------------------------------------------
    async def _whoami(self) -> str:
        if self._user is None:
            self._user = (await self._run(["id", "-un"])).stdout.strip() or "root"
        return self._user

    async def _reservation_exists(self, name: str) -> bool:
        shown = await self.runner.run(["scontrol", "show", "-o", "reservation", name])
        return shown.returncode == 0 and f"ReservationName={name} " in shown.stdout

    async def _admit_only_the_check(self, req: HealthCheckRequest) -> str:
        """Reserve the node for the check, then resume it inside the reservation."""
        name = hc.reservation_name(req.node)
        look = await self._look(req.node)
        reserved = await self._reservation_exists(name)
        drained_by_us = "DRAIN" in look.state and hc.ours(look.reason, req.key)
        if not reserved and not drained_by_us:
            raise PreconditionFailed(
                f"node {req.node} is not drained by Resurgo ({look.state}: "
                f"{look.reason[:200]!r}); not validating it"
            )
        if not reserved:
            if any(s in look.state for s in ("ALLOC", "MIX", "COMPLETING")):
                raise StillDraining(f"node {req.node} still runs jobs ({look.state})")
            await self._run([
                "scontrol", "create", "reservation", f"ReservationName={name}",
                f"Nodes={req.node}", f"Users={await self._whoami()}", "StartTime=now",
                "Duration=UNLIMITED", "Flags=MAINT,IGNORE_JOBS",
            ])  # fmt: skip
        if drained_by_us:
            await self._run(["scontrol", "update", f"NodeName={req.node}", "State=RESUME"])
        return name

    async def _find_check_job(self, job_name: str) -> int | None:
        shown = await self._run(["squeue", "-h", "-t", "all", "-u", await self._whoami(),
                                 "-n", job_name, "-o", "%i"])  # fmt: skip
        ids = [int(x) for x in shown.stdout.split() if x.isdigit()]
        return max(ids) if ids else None

    async def _submit(self, req: HealthCheckRequest, reservation: str, job_name: str) -> int:
        spec = req.spec
        minutes = max(1, int(spec.timeout_seconds // 60) + (spec.timeout_seconds % 60 > 0))
        argv = [
            "sbatch", "--parsable", f"--job-name={job_name}", f"--reservation={reservation}",
            f"--nodelist={req.node}", "--nodes=1", "--ntasks=1", f"--time={minutes}",
            "--no-requeue", f"--output={spec.output_dir.rstrip('/')}/{job_name}-%j.out",
            f"--comment=resurgo node-health check of {req.node} ({req.key} round {req.round})",
            "--wrap", shlex.join(spec.command),
        ]  # fmt: skip
        done = await self._run(argv, timeout=60.0)
        return int(done.stdout.strip().split(";")[0])

    @activity.defn(name="node_health_check")
    async def node_health_check(self, req: HealthCheckRequest) -> HealthCheckResult:
        with permanent_failures():
            check_node_name(req.node)
            if not self.gates.acknowledge_scheduler_actions:
                raise ActionsNotAllowed(
                    f"cluster {self.cluster} has not set acknowledge_scheduler_actions"
                )
            if not req.spec.command:
                raise PreconditionFailed("no health check is configured")
            reservation = await self._admit_only_the_check(req)
            job_name = hc.check_job_name(req.key, req.round)
            job_id = await self._find_check_job(job_name)
            if job_id is None:
                job_id = await self._submit(req, reservation, job_name)
                log.info("%s: health check of %s submitted as job %s", self.cluster, req.node,
                         job_id)  # fmt: skip
            activity.heartbeat(job_id)
            return await self._wait_for(job_id, req)

    async def _wait_for(self, job_id: int, req: HealthCheckRequest) -> HealthCheckResult:
        loop = asyncio.get_running_loop()
        # Slurm's own --time ends it; this bounds a check that never starts (node down).
        deadline = loop.time() + req.spec.timeout_seconds + 120.0
        while True:
            obs = await self.slurm.show_job(job_id)
            if obs is None:
                return hc.check_verdict(job_id=job_id, state="GONE", exit_code=-1,
                                        exit_signal=0, output="")  # fmt: skip
            if obs.terminal:
                output = await self._output(obs.std_out)
                return hc.check_verdict(
                    job_id=job_id, state=obs.state, exit_code=obs.exit_code,
                    exit_signal=obs.exit_signal, output=output, path=obs.std_out,
                )  # fmt: skip
            if loop.time() > deadline:
                await self.slurm.cancel(job_id)
                return hc.check_verdict(
                    job_id=job_id, state=f"{obs.state} past the timeout (cancelled)",
                    exit_code=-1, exit_signal=0, output="",
                )  # fmt: skip
            activity.heartbeat(job_id)
            await asyncio.sleep(POLL_SECONDS)

    async def _output(self, path: str) -> str:
        if not path:
            return ""
        try:
            data, size, _ = await self.runner.read_file(path, 0, MAX_OUTPUT_BYTES)
            if size > MAX_OUTPUT_BYTES:
                tail, _, _ = await self.runner.read_file(path, size - 16384, 16384)
                data += b"\n" + tail
        except (OSError, SchedulerError) as exc:
            return f"{hc.REPORT_PREFIX}output not readable: {exc}"
        return data.decode("utf-8", errors="replace")

    # ---- end of a validation --------------------------------------------------------------
    @activity.defn(name="node_return")
    async def node_return(self, req: ReturnRequest) -> NodeStepResult:
        """Passed: the reservation goes, the node is in service. Failed: drained again with the
        failed check in its Reason first, then the reservation goes."""
        with permanent_failures():
            name = hc.reservation_name(req.node)
            look = await self._look(req.node)
            detail = []
            if not req.passed and not ("DRAIN" in look.state and hc.ours(look.reason, req.key)):
                if "DRAIN" in look.state:
                    detail.append(f"already drained by someone else ({look.reason[:100]!r})")
                else:
                    await self.slurm.drain_node(req.node, req.reason[: hc.MAX_REASON])
                    detail.append("drained again")
            if req.passed and "DRAIN" in look.state and hc.ours(look.reason, req.key):
                await self._run(["scontrol", "update", f"NodeName={req.node}", "State=RESUME"])
                detail.append("resumed")
            if await self._reservation_exists(name):
                await self._run(["scontrol", "delete", f"ReservationName={name}"])
                detail.append(f"reservation {name} deleted")
            after = await self._look(req.node)
            outcome = "applied" if detail else "already_satisfied"
            return NodeStepResult(outcome=outcome, detail="; ".join(detail), look=after)
