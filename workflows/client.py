"""Connecting to Temporal with the one data converter every client and worker must share, over
TLS / mTLS with an API key when `[temporal]` says so."""

from __future__ import annotations

import logging
from pathlib import Path

import stamina
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, TLSConfig

from resurgo.config import ConfigError, TemporalSettings
from resurgo.errors import TransientError

log = logging.getLogger("resurgo.temporal")


class TemporalUnavailable(TransientError):
    """Temporal did not answer within the allowed time."""


def _pem(settings: TemporalSettings, key: str) -> bytes | None:
    path = getattr(settings, key)
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"temporal.{key}: cannot read {path}: {exc.strerror}") from exc


def _check_tls_keys(settings: TemporalSettings) -> None:
    if not settings.tls:
        given = [
            name
            for name in (
                "tls_ca_file",
                "tls_cert_file",
                "tls_key_file",
                "tls_server_name",
                "api_key",
            )
            if getattr(settings, name) is not None
        ]
        if given:
            # Never fall back to plain gRPC when TLS was clearly meant (nor send a key in clear).
            raise ConfigError(f"temporal: {', '.join(given)} set but tls is false; set tls = true")
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        raise ConfigError("temporal: tls_cert_file and tls_key_file go together (mTLS needs both)")


def tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    """What `Client.connect(tls=...)` gets: False for plain gRPC, else the CA, client certificate
    and key (read now, so a rotated certificate is picked up at the next connection) and the
    server name to verify."""
    _check_tls_keys(settings)
    if not settings.tls:
        return False
    return TLSConfig(
        server_root_ca_cert=_pem(settings, "tls_ca_file"),
        client_cert=_pem(settings, "tls_cert_file"),
        client_private_key=_pem(settings, "tls_key_file"),
        domain=settings.tls_server_name,
    )


def _one_line(exc: BaseException) -> str:
    """The SDK's transport errors span lines (a Rust error chain); a log line and an exit
    message must not."""
    return " ".join(str(exc).split())


async def connect(settings: TemporalSettings, *, wait_seconds: float = 0.0) -> Client:
    """Connect, retrying for up to `wait_seconds` (long-running processes wait for Temporal),
    with exponential backoff and jitter (stamina) so restarted replicas do not reconnect in step.

    The client carries OpenTelemetry's `TracingInterceptor` (workers built from it inherit it;
    never add it to a worker too). Until `resurgo.worker.telemetry` installs a tracer provider its
    spans are the API's no-ops and it adds no headers."""
    tls = tls_config(settings)
    try:
        async for attempt in stamina.retry_context(
            on=(RuntimeError, RPCError),
            attempts=None if wait_seconds > 0 else 1,
            timeout=wait_seconds if wait_seconds > 0 else None,
            wait_initial=0.5,
            wait_max=10.0,
        ):
            with attempt:
                if attempt.num > 1:
                    log.warning("Temporal at %s not reachable yet; retrying", settings.address)
                return await Client.connect(
                    settings.address,
                    namespace=settings.namespace,
                    data_converter=pydantic_data_converter,
                    interceptors=[TracingInterceptor()],
                    tls=tls,
                    api_key=settings.api_key,
                )
    except (RuntimeError, RPCError) as exc:
        raise TemporalUnavailable(
            f"cannot reach Temporal at {settings.address}"
            f"{' over TLS' if tls else ''}: {_one_line(exc)}"
        ) from exc
    raise AssertionError("unreachable: stamina either returns or raises")  # pragma: no cover
