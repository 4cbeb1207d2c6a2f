"""The long-running processes: `resurgo worker` and `resurgo controller --cluster C`."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from resurgo.activities.arrays import ArrayActivities
from resurgo.activities.audit import AuditActivities
from resurgo.activities.controller import ControllerActivities
from resurgo.activities.node_health import NodeActivities
from resurgo.audit.store import AuditStore, store_url_from_env
from resurgo.config import ClusterSettings, ConfigError, ResurgoConfig
from resurgo.contracts import CORE_TASK_QUEUE, controller_task_queue
from resurgo.metrics.exporter import start_process_metrics
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.runner import CommandRunner, LocalRunner
from resurgo.worker.discovery import Discovery
from resurgo.worker.node_sentinel import NodeSentinel
from resurgo.worker.telemetry import AuditMetrics, setup_telemetry
from resurgo.workflows.array_coordinator import ArrayCoordinatorWorkflow
from resurgo.workflows.job_notice import JobNoticeWorkflow
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from resurgo.workflows.node_health import NodeHealthWorkflow

log = logging.getLogger("resurgo")
# Job arrays (issue 16): one coordinator per array; notices for jobs discovery leaves alone.
ARRAY_WORKFLOWS = [ArrayCoordinatorWorkflow, JobNoticeWorkflow]


def audit_store(config: ResurgoConfig) -> AuditStore:
    store = AuditStore(config.audit.url or store_url_from_env())
    store.create_schema()
    return store


def core_worker(client: Client, store: AuditStore, max_cached_workflows: int = 4000) -> Worker:
    return Worker(
        client,
        task_queue=CORE_TASK_QUEUE,
        max_cached_workflows=max_cached_workflows,
        workflows=[JobRecoveryWorkflow, NodeHealthWorkflow, *ARRAY_WORKFLOWS],
        activities=[AuditActivities(store, on_recorded=AuditMetrics()).record_audit],
        identity=f"resurgo-worker@{socket.gethostname()}",
        graceful_shutdown_timeout=timedelta(seconds=5),
    )


def make_runner(settings: ClusterSettings) -> CommandRunner:
    if settings.mode == "local":
        return LocalRunner(settings.slurm_conf)
    if settings.ssh is None:
        raise ConfigError('mode = "ssh" needs an [clusters.<name>.ssh] table (host, keys, ...)')
    from resurgo.slurm.ssh import SshRunner, SshTarget

    ssh = settings.ssh
    target = SshTarget(
        host=ssh.host, port=ssh.port, username=ssh.username, client_keys=tuple(ssh.client_keys),
        known_hosts=ssh.known_hosts, command_timeout=ssh.command_timeout,
        connect_timeout=ssh.connect_timeout, max_sessions=ssh.max_sessions,
    )  # fmt: skip
    return SshRunner(target, settings.slurm_conf)


def cluster_activities(
    cluster: str, settings: ClusterSettings, runner: CommandRunner
) -> ControllerActivities:
    return ControllerActivities(
        cluster, runner, settings.gates(), breaker=settings.breaker(),
        job_listing_max_age=settings.job_listing_max_age, signals=settings.signals,
    )  # fmt: skip


def node_activities(
    cluster: str, settings: ClusterSettings, activities: ControllerActivities
) -> NodeActivities:
    return NodeActivities(
        cluster, activities.runner, settings.gates(), settings.breaker(), activities.actions
    )


def array_activities(
    cluster: str, settings: ClusterSettings, activities: ControllerActivities
) -> ArrayActivities:
    return ArrayActivities(cluster, activities.slurm, activities.actions, settings.gates())


def controller_worker(
    client: Client, cluster: str, settings: ClusterSettings, activities: ControllerActivities
) -> Worker:
    served: list[Any] = [*activities.all(), *node_activities(cluster, settings, activities).all()]
    served += array_activities(cluster, settings, activities).all()
    return Worker(
        client,
        task_queue=controller_task_queue(cluster),
        activities=served,
        max_concurrent_activities=settings.max_concurrent_activities,
        identity=f"resurgo-controller/{cluster}@{socket.gethostname()}",
        graceful_shutdown_timeout=timedelta(seconds=5),
    )


async def run_until_signalled(
    workers: Sequence[Worker], extra: Sequence[Callable[[], object]] = ()
) -> None:
    """Run workers (and background coroutines) until SIGINT/SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(w.run()) for w in workers]
    tasks += [asyncio.create_task(fn()) for fn in extra]  # type: ignore[arg-type]
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        if task is not stopper and task.exception():
            log.error("component failed: %r", task.exception())
    for w in workers:
        await w.shutdown()
    for task in tasks:
        task.cancel()


async def run_worker(client: Client, config: ResurgoConfig) -> None:
    # The client's TracingInterceptor resolves its tracer lazily: setting up here is in time.
    setup_telemetry(config.telemetry, process="worker")
    store = audit_store(config)
    log.info("worker: task queue %s, audit store %s", CORE_TASK_QUEUE, store.url)
    metrics = config.metrics  # the recovery metrics from the audit trail, on /metrics
    start_process_metrics("worker", store, port=metrics.worker_port, host=metrics.host)
    sentinel = NodeSentinel(client, store, config)  # lemon nodes: resurgo/nodes/lemon.py
    await run_until_signalled(
        [core_worker(client, store, config.worker.max_cached_workflows)], [sentinel.run_forever]
    )


async def run_controller(client: Client, config: ResurgoConfig, cluster: str) -> None:
    settings = config.cluster(cluster)
    setup_telemetry(config.telemetry, process=f"controller/{cluster}")
    metrics = config.metrics  # this process's Slurm command and source errors, the breaker
    start_process_metrics(
        f"controller/{cluster}", None, port=metrics.controller_port, host=metrics.host
    )
    runner = make_runner(settings)
    discovery = Discovery(client, SlurmClient(runner), cluster, config)
    log.info(
        "controller for %s: task queue %s, actions acknowledged: %s",
        cluster, controller_task_queue(cluster), settings.acknowledge_scheduler_actions,
    )  # fmt: skip
    activities = cluster_activities(cluster, settings, runner)
    try:
        await run_until_signalled(
            [controller_worker(client, cluster, settings, activities)], [discovery.run_forever]
        )
    finally:
        await activities.aclose()
