"""Connecting to Temporal with the one data converter every client and worker must share."""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from resurgo.config import TemporalSettings
from resurgo.errors import TransientError

log = logging.getLogger("resurgo.temporal")


class TemporalUnavailable(TransientError):
    """Temporal did not answer within the allowed time."""


async def connect(settings: TemporalSettings, *, wait_seconds: float = 0.0) -> Client:
    """Connect, retrying for up to `wait_seconds` (long-running processes wait for Temporal).

    The client carries OpenTelemetry's `TracingInterceptor` (workers built from it inherit it;
    never add it to a worker too). Until `resurgo.worker.telemetry` installs a tracer provider its
    spans
    are the API's no-ops and it adds no headers."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    delay = 0.5
    while True:
        try:
            return await Client.connect(
                settings.address,
                namespace=settings.namespace,
                data_converter=pydantic_data_converter,
                interceptors=[TracingInterceptor()],
            )
        except (RuntimeError, RPCError) as exc:
            if loop.time() >= deadline:
                raise TemporalUnavailable(
                    f"cannot reach Temporal at {settings.address}: {exc}"
                ) from exc
            log.warning("Temporal at %s not reachable yet (%s); retrying", settings.address, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
