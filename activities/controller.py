"""Activities served by a cluster's controller on `slurm.<cluster>`: everything that needs the
cluster itself (Slurm commands and the job output files).

This module is the Temporal boundary: permanent errors leave it as non-retryable
`ApplicationError`s (`activities.errors`), transient ones are retried; and it enforces the
cluster's gates once more before acting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from opentelemetry import metrics
from temporalio import activity
from temporalio.exceptions import ApplicationError

from resurgo.activities.errors import permanent_failures
from resurgo.attribute.live_evidence import gather_evidence
from resurgo.attribute.plugin import enrich_live
from resurgo.attribute.rules import attribute
from resurgo.contracts import (
    ActionRequest,
    ActionResult,
    ActionStep,
    AdviceKind,
    Anomaly,
    AttributeRequest,
    Attribution,
    Category,
    ClusterGates,
    JobObservation,
    LogCursor,
    LogLine,
    Reconciliation,
    VerifyRequest,
    WatchRequest,
    WatchResult,
)
from resurgo.detect.file_changes import FileChanges
from resurgo.detect.logtail import end_of_output, read_until_eof
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import Registry
from resurgo.detect.remote_tail import remote_logs
from resurgo.detect.watch_loop import WatchCheckpoint, watch_attempt
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.breaker import BreakerSettings
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import (
    ActionsNotAllowed,
)
from resurgo.slurm.output_files import OutputRefused
from resurgo.slurm.runner import CommandRunner
from resurgo.slurm.snapshot import JobSnapshot
from resurgo.sources import MetricsSettings, SignalsSettings, build_prometheus

log = logging.getLogger("resurgo.controller")

MAX_ATTRIBUTION_LINES = 50_000
# Watch heartbeats (the resume checkpoint) at most this often; the heartbeat timeout is 15 s.
HEARTBEAT_EVERY = 2.0
# Output may trail the job's end by a moment (buffers, shared file systems).
SETTLE_DRAIN_SECONDS = 0.5
# How long requeue_hold may spend finding the end of the held attempt's output (a step has
# 30 s in all); past it the next watch falls back to skipping what it reads while PENDING.
OUTPUT_END_SECONDS = 10.0

# OpenTelemetry API only: no-ops until resurgo.worker.telemetry installs a meter provider.
_meter = metrics.get_meter("resurgo.activities")
WATCH_RESULTS = _meter.create_counter(
    "resurgo.watch.results", unit="{result}", description="watch_attempt results, by outcome"
)
ATTRIBUTION_DURATION = _meter.create_histogram(
    "resurgo.attribution.duration", unit="s", description="attribute_anomaly, by kind/category"
)
ACTION_DURATION = _meter.create_histogram(
    "resurgo.action.duration", unit="s",
    description="One scheduler step, activity start to end, by step and outcome (or error type)",
)  # fmt: skip
VERIFY_DURATION = _meter.create_histogram(
    "resurgo.verify.duration", unit="s", description="verify_advice, by status and reason"
)


@asynccontextmanager
async def measured(histogram: metrics.Histogram, labels: dict[str, str]) -> AsyncIterator[None]:
    """Record the block's wall time; a failure is labelled `outcome=<error type>`."""
    start = time.monotonic()
    try:
        yield
    except BaseException as exc:
        typed = exc.type if isinstance(exc, ApplicationError) else None
        labels["outcome"] = typed or type(exc).__name__
        raise
    finally:
        histogram.record(time.monotonic() - start, labels)


def kept_training(anomaly: Anomaly, lines: list[LogLine]) -> bool:
    """Progress lines after the line that looked fatal: whatever it was, the job survived it.

    Positions compare within one kind of source only: line numbers of the output file,
    timestamps of a remote source (`loki:node1` and `loki:node2` share a clock).
    """
    after: dict[str, int] = {}
    for signal in anomaly.signals:
        kind = position_kind(signal.source)
        after[kind] = max(after.get(kind, signal.line_no), signal.line_no)
    parser = ProgressParser(None)
    later = (ln for ln in lines if ln.line_no > after.get(position_kind(ln.source), ln.line_no))
    return sum(1 for ln in later if parser.parse(ln.text) is not None) >= 2


def position_kind(source: str) -> str:
    """`loki:node2` → `loki`: sources whose line positions are comparable."""
    return source.split(":", 1)[0]


class ControllerActivities:
    def __init__(
        self,
        cluster: str,
        runner: CommandRunner,
        gates: ClusterGates,
        registry: Registry | None = None,
        breaker: BreakerSettings | None = None,
        job_listing_max_age: float = 1.0,
        signals: SignalsSettings | None = None,
    ) -> None:
        self.cluster = cluster
        self.runner = runner
        self.slurm = SlurmClient(runner)
        # Watches read job state from one shared listing; everything that acts reads it fresh.
        self.snapshot = JobSnapshot(self.slurm, max_age=job_listing_max_age)
        # Watches sleep until their output file changes: one batched stat per tick for all.
        self.changes = FileChanges(runner)
        # The circuit breaker and per-node caps are enforced inside the exclude/drain steps.
        self.actions = SlurmActions(self.slurm, breaker, cluster)
        self.gates = gates
        self.registry = registry or Registry.load()
        # Optional sources beyond the output file and Slurm (`[clusters.<name>.signals]`),
        # built once: their HTTP clients are shared by every watch and attribution.
        self.remote_logs = remote_logs(signals)
        self.prometheus = build_prometheus(signals) if signals is not None else None
        self.metric_names = signals.metrics if signals is not None else MetricsSettings()

    async def aclose(self) -> None:
        """Stop the file-change ticker and close the signal sources' HTTP clients."""
        await self.changes.close()
        if self.remote_logs is not None:
            await self.remote_logs.source.aclose()
        if self.prometheus is not None:
            await self.prometheus.aclose()

    def all(self) -> list[object]:
        return [
            self.watch_attempt,
            self.attribute_anomaly,
            self.scheduler_action,
            self.verify_advice,
            self.observe_job,
        ]

    @activity.defn(name="observe_job")
    async def observe_job(self, job_id: int) -> JobObservation | None:
        with permanent_failures():
            return await self.slurm.show_job(job_id)

    @activity.defn(name="watch_attempt")
    async def watch_attempt(self, req: WatchRequest) -> WatchResult:
        info = activity.info()
        resume = None
        if info.heartbeat_details:
            try:
                resume = WatchCheckpoint.model_validate(info.heartbeat_details[0])
            except (ValueError, TypeError):
                resume = None  # an older checkpoint shape: start from the request's cursor

        loop = asyncio.get_running_loop()
        last_beat = -HEARTBEAT_EVERY

        def beat(checkpoint: WatchCheckpoint) -> None:
            # Serialising the checkpoint for every look would dominate an idle watch; a retry
            # resumes from at most HEARTBEAT_EVERY seconds back (state and cursor together).
            nonlocal last_beat
            if loop.time() - last_beat >= HEARTBEAT_EVERY:
                last_beat = loop.time()
                activity.heartbeat(checkpoint.model_dump(mode="json"))

        async def pause(cursor: LogCursor | None) -> None:
            # Wake on new output at once; otherwise look at Slurm state and hang bounds anyway.
            await self.changes.wait(cursor.path if cursor else None, req.slurm_poll_seconds)

        with permanent_failures():
            result = await watch_attempt(
                req, self.snapshot, self.runner, self.registry, beat, resume,
                remote=self.remote_logs, pause=pause,
            )  # fmt: skip
        WATCH_RESULTS.add(1, {"outcome": result.outcome})
        return result

    @activity.defn(name="attribute_anomaly")
    async def attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        labels = {"kind": req.anomaly.kind.value}
        async with measured(ATTRIBUTION_DURATION, labels):
            verdict = await self._attribute_anomaly(req)
            labels["category"] = verdict.category.value
        return verdict

    async def _attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        with permanent_failures():
            obs = await self._settle(req)
            nodes = await self.slurm.show_nodes(req.node_list) if req.node_list else []
        activity.heartbeat()
        # The job's own user must own the file (an unknown user: nothing is read).
        lines, unread = await self._attempt_lines(
            req.log_path, req.attempt_start_line, obs.user if obs else ""
        )
        activity.heartbeat()
        node_list = req.node_list or (obs.node_list if obs else [])
        extra = await gather_evidence(
            remote=self.remote_logs, prometheus=self.prometheus, metric_names=self.metric_names,
            job_id=str(req.job.job_id), nodes=node_list, file_lines=lines,
            attempt_start=obs.start_time if obs else None, now=datetime.now(UTC),
            max_lines=MAX_ATTRIBUTION_LINES,
        )  # fmt: skip
        activity.heartbeat()
        lines += extra.lines
        verdict = await asyncio.to_thread(
            attribute, self.registry, req.anomaly, lines, obs, nodes, node_list,
            metrics=extra.metrics,
        )  # fmt: skip
        verdict = await enrich_live(
            verdict, anomaly=req.anomaly, lines=lines, obs=obs, nodes=nodes, node_list=node_list,
            cluster=self.cluster, job_id=req.job.job_id,
        )  # fmt: skip
        if extra.notes or unread:
            # Say what the verdict had to do without (an unreachable Prometheus, say).
            summary = "; ".join([verdict.summary, *extra.notes, *unread])
            verdict = verdict.model_copy(update={"summary": summary})
        if obs is not None and obs.running and kept_training(req.anomaly, lines):
            verdict = Attribution(
                kind="none",
                category=Category.NONE,
                confidence=0.6,
                fingerprint="none",
                summary="the job kept training after the error line; not a failure",
                evidence=req.anomaly.signals[:5],
            )
        return verdict.model_copy(update={"observation": obs})

    async def _settle(self, req: AttributeRequest) -> JobObservation | None:
        """Let a crash play out: the watch reports the first fatal line at once, while srun is
        still killing the other ranks and writing the lines that tell root cause from cascade."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.settle_seconds
        while True:
            obs = await self.slurm.show_job(req.job.job_id)
            if obs is None or not req.anomaly.signals or not obs.running:
                if obs is not None and obs.terminal:
                    await asyncio.sleep(SETTLE_DRAIN_SECONDS)
                return obs
            if loop.time() >= deadline:
                return obs
            activity.heartbeat()
            await asyncio.sleep(0.25)

    async def _attempt_lines(
        self, path: str | None, start_line: int, owner: str
    ) -> tuple[list[LogLine], list[str]]:
        """The attempt's lines of the output file, and why it was not read, if it was not."""
        if not path:
            return [], []
        lines: list[LogLine] = []
        try:
            async for got in read_until_eof(self.runner, LogCursor(path=path), owner=owner):
                lines.extend(
                    LogLine(source="job.log", line_no=n, text=t)
                    for n, t in got.lines
                    if n > start_line
                )
                if len(lines) > MAX_ATTRIBUTION_LINES:
                    # Keep the head (the first errors) and the tail (the end of the failure).
                    half = MAX_ATTRIBUTION_LINES // 2
                    lines = lines[:half] + lines[-half:]
        except OutputRefused as exc:
            log.error("attribution: %s", exc)
            return [], [f"output file not read: {exc}"]
        return lines, []

    @activity.defn(name="scheduler_action")
    async def scheduler_action(self, req: ActionRequest) -> ActionResult:
        labels = {"step": req.step.value}
        async with measured(ACTION_DURATION, labels):
            result = await self._scheduler_action(req)
            labels["outcome"] = result.outcome
        await chaos_pause(req.step.value)
        return result

    async def _scheduler_action(self, req: ActionRequest) -> ActionResult:
        with permanent_failures():
            if not self.gates.acknowledge_scheduler_actions:
                raise ActionsNotAllowed(
                    f"cluster {self.cluster} has not set acknowledge_scheduler_actions"
                )
            if self.gates.partitions:
                obs = await self.actions.observe(req.job.job_id)
                if obs.partition not in self.gates.partitions:
                    raise ActionsNotAllowed(
                        f"partition {obs.partition!r} is not in {self.gates.partitions}"
                    )
            result = await self.actions.run(req)
        if req.step == ActionStep.REQUEUE_HOLD and result.observation is not None:
            end = await self._output_end(req, result.observation)
            result = result.model_copy(update={"output_end": end})
        return result

    async def _output_end(self, req: ActionRequest, obs: JobObservation) -> LogCursor | None:
        """Where the held job's next attempt's output will begin: the old attempt's step has
        ended and the job is held, so everything in the file now is the old attempt's (its
        teardown lines included). None when that is not known: the job is no longer held, the
        file is refused or slow."""
        if not (obs.held and obs.state == "PENDING" and obs.std_out):
            return None
        start = req.cursor if req.cursor and req.cursor.path == obs.std_out else None
        try:
            return await asyncio.wait_for(
                end_of_output(self.runner, start or LogCursor(path=obs.std_out), owner=obs.user),
                OUTPUT_END_SECONDS,
            )
        except (OutputRefused, TimeoutError) as exc:
            log.warning("job %s: end of the held attempt's output not found: %s",
                        req.job.job_id, exc)  # fmt: skip
            return None
        except Exception:
            # Best effort: the hold itself succeeded and must be reported as done (a failed
            # read, e.g. over a lost SSH connection, leaves the watch's own PENDING skip).
            log.warning("job %s: end of the held attempt's output not read", req.job.job_id,
                        exc_info=True)  # fmt: skip
            return None

    @activity.defn(name="verify_advice")
    async def verify_advice(self, req: VerifyRequest) -> Reconciliation:
        """Judge from fresh observations whether Slurm reached the advised state."""
        labels: dict[str, str] = {}
        async with measured(VERIFY_DURATION, labels):
            rec = await self._verify_advice(req)
            labels.update(status=rec.status, reason=rec.reason)
        return rec

    async def _verify_advice(self, req: VerifyRequest) -> Reconciliation:
        deadline = asyncio.get_running_loop().time() + req.timeout_seconds
        last: JobObservation | None = None
        with permanent_failures():
            while True:
                obs = await self.slurm.show_job(req.job.job_id)
                if obs is None:
                    return Reconciliation(status="abandoned", reason="job_gone", observation=last)
                last = obs
                if converged(req, obs):
                    return Reconciliation(
                        status="converged", reason="desired_state_observed", observation=obs
                    )
                if asyncio.get_running_loop().time() > deadline:
                    return Reconciliation(
                        status="abandoned", reason="not_converged_in_time", observation=obs
                    )
                activity.heartbeat()
                await asyncio.sleep(req.poll_seconds)


async def chaos_pause(step: str) -> None:
    """Chaos testing hook: after carrying out `step`, announce it and stall until killed.

    Set RESURGO_CHAOS_PAUSE_AFTER=<step> and RESURGO_CHAOS_MARKER=<file> on a controller to
    freeze it between a scheduler step and its completion report, so a test can SIGKILL it at
    exactly the worst moment. Unset (always, in production) it does nothing.
    """
    if os.environ.get("RESURGO_CHAOS_PAUSE_AFTER") != step:
        return
    marker = os.environ.get("RESURGO_CHAOS_MARKER")
    if marker:
        Path(marker).write_text(step)
    while True:
        await asyncio.sleep(3600)


def converged(req: VerifyRequest, obs: JobObservation) -> bool:
    advice = req.advice
    if advice.kind == AdviceKind.STOP:
        return obs.terminal
    if advice.kind in (AdviceKind.REQUEUE, AdviceKind.REQUEUE_EXCLUDING):
        if obs.restarts <= advice.attempt or obs.held:
            return False
        if not set(advice.nodes) <= set(obs.exc_node_list):
            return False
        # A fast next attempt may already have run (even finished): its nodes must be clean.
        started = obs.state != "PENDING"
        return not (started and set(advice.nodes) & set(obs.node_list))
    return True
