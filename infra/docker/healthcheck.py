#!/usr/bin/env python3
"""Container health checks for Resurgo's processes (compose HEALTHCHECKs, Kubernetes probes).

    healthcheck.py pollers TASK_QUEUE [--max-age 180]
        healthy when a process of THIS host (identity `...@<hostname>`, as `resurgo worker` and
        `resurgo controller` set it) has polled TASK_QUEUE on Temporal recently: the process is
        up, connected, and taking work. Temporal address/namespace from the Resurgo config
        ($RESURGO_CONFIG), or --address/--namespace.
    healthcheck.py http URL        healthy on a 2xx/3xx answer
    healthcheck.py tcp HOST:PORT   healthy when the port accepts a connection
    healthcheck.py process WORDS   healthy when a process's command line contains WORDS

Exit 0 healthy, 1 unhealthy (the reason on stderr), 2 usage error. Every check is bounded by
--timeout (default 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resurgo.config import TemporalSettings


class Unhealthy(Exception):
    pass


def check_tcp(target: str, timeout: float) -> str:
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"tcp: expected HOST:PORT, got {target!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return f"{target} accepts connections"
    except OSError as exc:
        raise Unhealthy(f"{target}: {exc}") from exc


def check_http(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        raise Unhealthy(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise Unhealthy(f"{url}: {exc}") from exc
    if not 200 <= status < 400:
        raise Unhealthy(f"{url}: HTTP {status}")
    return f"{url}: HTTP {status}"


def check_process(words: str, proc: Path = Path("/proc")) -> str:
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        cmdline = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        if words in cmdline and "healthcheck.py" not in cmdline:
            return f"pid {entry.name}: {cmdline}"
    raise Unhealthy(f"no process with {words!r} in its command line")


async def _pollers(settings: TemporalSettings, task_queue: str, timeout: float) -> list:  # type: ignore[type-arg]
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    from resurgo.workflows.client import tls_config

    namespace = settings.namespace
    # The same TLS / mTLS / API key as the processes it checks (the [temporal] config).
    client = await asyncio.wait_for(
        Client.connect(
            settings.address,
            namespace=namespace,
            tls=tls_config(settings),
            api_key=settings.api_key,
        ),
        timeout,
    )
    found: list[object] = []
    for kind in (
        TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    ):
        resp = await asyncio.wait_for(
            client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=namespace,
                    task_queue=TaskQueue(name=task_queue),
                    task_queue_type=kind,
                )
            ),
            timeout,
        )
        found.extend(resp.pollers)
    return found


def check_pollers(
    task_queue: str, address: str | None, namespace: str | None, max_age: float, timeout: float
) -> str:
    from resurgo.config import load_config

    settings = load_config().temporal
    settings = settings.model_copy(
        update={
            "address": address or settings.address,
            "namespace": namespace or settings.namespace,
        }
    )
    address = settings.address
    host = socket.gethostname()
    try:
        pollers = asyncio.run(_pollers(settings, task_queue, timeout))
    except Exception as exc:  # connection refused, timeout, RPC error: all unhealthy
        raise Unhealthy(f"cannot describe task queue {task_queue} on {address}: {exc!r}") from exc
    now = time.time()
    mine = [p for p in pollers if p.identity.endswith(f"@{host}")]
    fresh = [p for p in mine if now - p.last_access_time.ToSeconds() <= max_age]
    if not fresh:
        seen = sorted({p.identity for p in pollers}) or ["none"]
        raise Unhealthy(
            f"no poller from {host} on {task_queue} in the last {max_age:.0f}s "
            f"(pollers: {', '.join(seen)})"
        )
    return f"{fresh[0].identity} polls {task_queue}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--timeout", type=float, default=5.0)
    sub = p.add_subparsers(dest="check", required=True)
    pp = sub.add_parser("pollers", help="this host polls TASK_QUEUE on Temporal")
    pp.add_argument("task_queue")
    pp.add_argument("--address", help="Temporal frontend (default: from the Resurgo config)")
    pp.add_argument("--namespace", help="default: from the Resurgo config")
    pp.add_argument("--max-age", type=float, default=180.0, help="seconds since the last poll")
    sub.add_parser("http", help="URL answers 2xx/3xx").add_argument("url")
    sub.add_parser("tcp", help="HOST:PORT accepts connections").add_argument("target")
    sub.add_parser("process", help="a process runs WORDS").add_argument("words")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.check == "pollers":
            msg = check_pollers(
                args.task_queue, args.address, args.namespace, args.max_age, args.timeout
            )
        elif args.check == "http":
            msg = check_http(args.url, args.timeout)
        elif args.check == "tcp":
            msg = check_tcp(args.target, args.timeout)
        else:
            msg = check_process(args.words)
    except Unhealthy as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    print(f"healthy: {msg}")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a failed connect, the Temporal SDK's native runtime
    # sometimes aborts (SIGABRT) while Python finalizes, which would turn "unhealthy" (1) into
    # a crash code.
    os._exit(code)
