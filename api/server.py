"""`resurgo api`: the gateway under uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import socket

import uvicorn

from resurgo.api.app import create_app
from resurgo.api.auth import TokenRegistry
from resurgo.config import ConfigError, ResurgoConfig

log = logging.getLogger("resurgo.api")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build(
    config: ResurgoConfig, *, host: str, insecure: bool, tokens_file: str | None
) -> uvicorn.Config:
    """Check the auth setup and build the uvicorn config (raises ConfigError when unsafe)."""
    tokens = TokenRegistry.from_settings(config.api, tokens_file)
    if insecure:
        if not is_loopback(host):
            raise ConfigError(
                f"--insecure serves without authentication and only binds to loopback, not {host!r}"
            )
    elif len(tokens) == 0:
        raise ConfigError(
            "no API tokens configured: add [api.tokens.NAME] entries (see `resurgo api-token`) "
            "or a tokens_file, or pass --insecure for a local demo"
        )
    # The address actually bound (--host) decides whether the console's cookie is Secure.
    config = config.model_copy(update={"api": config.api.model_copy(update={"host": host})})
    app = create_app(config, tokens=tokens, insecure=insecure)
    # uvicorn logs at the level `resurgo --log-level` set (info by default for a service).
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    return uvicorn.Config(app, host=host, port=config.api.port, log_level=level, lifespan="on")


def serve(
    config: ResurgoConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    insecure: bool = False,
    tokens_file: str | None = None,
) -> None:
    if port is not None:
        config = config.model_copy(update={"api": config.api.model_copy(update={"port": port})})
    bind = host or config.api.host
    server = uvicorn.Server(build(config, host=bind, insecure=insecure, tokens_file=tokens_file))
    log.info(
        "Resurgo API on http://%s:%s (Temporal %s)", bind, config.api.port, config.temporal.address
    )
    server.run()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
