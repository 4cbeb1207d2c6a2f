"""Resurgo configuration: one TOML file (or none: embedded defaults for a single local cluster),
and every key settable from the environment (`RESURGO_<SECTION>__<KEY>`, `*_FILE` for secrets:
`resurgo.config_env`), which wins over the file.

```toml
[temporal]
address = "localhost:7233"
namespace = "default"

[audit]
url = "sqlite:////var/lib/resurgo/audit.db"   # or mysql+pymysql://user:pass@host/db

[clusters.local]
mode = "local"                       # or "ssh"
slurm_conf = "/var/lib/resurgo-slurm/local/etc/slurm.conf"
acknowledge_scheduler_actions = false   # observe-only until an operator flips this
partitions = []                      # allowlist; empty = all
max_excluded_share = 0.1             # circuit breaker: share of nodes remediated per window
max_remediations_per_node = 3        # per-node cap per window (breaker_window_seconds = 3600)
drain_after_jobs = 3                 # cross-job memory: drain advice after K jobs
allow_drain = false                  # ... and the controller drains only when this is true

[policies.default]
max_attempts = 5

[telemetry]                          # OpenTelemetry (see worker/telemetry.py); off by default
otlp_endpoint = "http://collector:4318"   # OTLP/HTTP; or $OTEL_EXPORTER_OTLP_ENDPOINT
service_name = "resurgo"

[metrics]                            # Prometheus /metrics per process (0: off, the default);
worker_port = 9464                   # $RESURGO_METRICS_PORT, set per process, wins
controller_port = 9465
watchdog_port = 9466
```
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from resurgo.contracts import ClusterGates, PolicyConfig
from resurgo.errors import PermanentError
from resurgo.slurm.breaker import BreakerSettings
from resurgo.sources.config import SignalsSettings


class ConfigError(PermanentError):
    """The configuration file is missing, unreadable or invalid; the message says where."""


class SecretFileError(ConfigError):
    """A `*_FILE` variable names a file that cannot be read (`resurgo.config_env`).

    Defined here, next to `ConfigError`, so that `resurgo.errors.permanent_error_types()` (which
    imports this module, not the environment reader) finds it for the non-retryable list."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TemporalSettings(Strict):
    address: str = "localhost:7233"
    namespace: str = "default"
    # Base of the console's links to a job's workflow in the Temporal Web UI, e.g.
    # "https://temporal.example.org" (the legacy $RESURGO_TEMPORAL_UI_URL still wins); unset:
    # the dev server's UI, port 8233 of the frontend's host.
    ui_url: str | None = Field(default=None, pattern=r"^https?://[^\s<>\"']+$")
    # TLS to the frontend (Temporal Cloud, a production cluster). Files are PEM, read at connect
    # time: tls_ca_file trusts a private CA (unset: the system roots), tls_cert_file + tls_key_file
    # are the client certificate of mTLS, tls_server_name overrides the name checked against the
    # server's certificate (when the address is an IP or a load balancer).
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_server_name: str | None = None
    # Sent as "Authorization: Bearer ..." (Temporal Cloud API keys); a secret, so give it as
    # $RESURGO_TEMPORAL__API_KEY_FILE. Needs tls = true: the key never travels in clear.
    # (Each key is settable on its own; workflows/client.py tls_config() refuses, at connection,
    # TLS keys with tls = false and a certificate without its key.)
    api_key: str | None = Field(default=None, min_length=1, repr=False)


class AuditSettings(Strict):
    url: str | None = None


class SshSettings(Strict):
    host: str
    port: int = 22
    username: str = "root"
    client_keys: list[str] = Field(default_factory=list)
    known_hosts: str | None = None
    command_timeout: float = 30.0
    connect_timeout: float = Field(default=10.0, gt=0)
    # Concurrent channels on the one connection; keep below the server's MaxSessions (10).
    max_sessions: int = Field(default=8, ge=1)


class ClusterSettings(Strict):
    mode: Literal["local", "ssh"] = "local"
    slurm_conf: str | None = None
    ssh: SshSettings | None = None
    acknowledge_scheduler_actions: bool = False
    partitions: list[str] = Field(default_factory=list)
    # When set, only jobs whose directive names this environment are monitored here, so that
    # e.g. a staging deployment never touches production jobs on the same cluster.
    environment: str | None = None
    discovery_interval: float = Field(default=2.0, gt=0)
    # Terminal jobs that ended longer ago than this are history, not something to recover.
    discovery_lookback: float = Field(default=600.0, ge=0)
    hold_timeout: float = Field(default=600.0, gt=0)
    # Watches share one cluster-wide job listing at most this old (one squeue --json per refresh,
    # however many jobs are watched) instead of asking slurmctld per job; older when listings
    # are slow (snapshot.LISTING_COST_FACTOR x the last one's time).
    job_listing_max_age: float = Field(default=1.0, gt=0)
    # Every monitored job holds one long-running watch activity on its controller: size this
    # above the number of jobs the controller watches at once.
    max_concurrent_activities: int = Field(default=2000, ge=10)
    # External log/metric sources (Loki, VictoriaLogs, Prometheus), validated with
    # `resurgo signals check`; without it the controller tails the job's output file.
    signals: SignalsSettings | None = None
    # Circuit breaker and per-node caps (checked by the controller before excluding/draining):
    # at most max_excluded_share of the nodes (at least 1) excluded/drained by Resurgo per
    # window, each node remediated for at most max_remediations_per_node jobs per window.
    breaker_window_seconds: float = Field(default=3600.0, gt=0)
    max_excluded_share: float = Field(default=0.1, ge=0.0, le=1.0)
    max_remediations_per_node: int = Field(default=3, ge=1)
    # Cross-job memory: a node excluded for this many distinct jobs in the window gets a drain
    # advice; the controller drains it only when allow_drain is true.
    drain_after_jobs: int = Field(default=3, ge=1)
    allow_drain: bool = False

    def breaker(self) -> BreakerSettings:
        return BreakerSettings(
            window_seconds=self.breaker_window_seconds,
            max_excluded_share=self.max_excluded_share,
            max_remediations_per_node=self.max_remediations_per_node,
            drain_after_jobs=self.drain_after_jobs,
            allow_drain=self.allow_drain,
        )

    def gates(self) -> ClusterGates:
        return ClusterGates(
            acknowledge_scheduler_actions=self.acknowledge_scheduler_actions,
            partitions=self.partitions,
        )


class TelemetrySettings(Strict):
    """OpenTelemetry export; off unless `otlp_endpoint` or $OTEL_EXPORTER_OTLP_ENDPOINT is set."""

    otlp_endpoint: str | None = None  # OTLP/HTTP base URL, e.g. "http://collector:4318"
    service_name: str = "resurgo"
    export_interval: float = Field(default=60.0, gt=0)  # seconds between metric pushes


class ApiToken(Strict):
    """One bearer token of the HTTP API: its role and the SHA-256 (hex) of the token itself."""

    role: Literal["viewer", "operator", "admin"]
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # Viewers read the output lines (evidence) only of these Slurm users' jobs; "*" = all.
    # Operators and admins read every job's evidence. See resurgo/api/visibility.py.
    users: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=10_000
    )


# The API's one port: the code default, docker-compose.yml and the Helm chart (tests check).
API_PORT = 8000


class ApiSettings(Strict):
    """`resurgo api` (server side) and the operator commands (client side).

    ```toml
    [api]
    host = "127.0.0.1"
    port = 8000
    tokens_file = "/etc/resurgo/api-tokens.toml"   # optional: more [tokens.NAME] entries
    [api.tokens.alice]                             # the principal recorded as the actor
    role = "operator"                              # viewer | operator | admin
    sha256 = "<hex digest of the token>"           # `resurgo api-token alice --role operator`
    ```
    """

    host: str = "127.0.0.1"
    port: int = Field(default=API_PORT, ge=1, le=65535)
    tokens: dict[str, ApiToken] = Field(default_factory=dict)
    tokens_file: str | None = None
    # Client side: where the operator commands find the API and their token.
    url: str | None = None
    token_file: str | None = None
    # Browser origins allowed to call the API (CORS); empty: no CORS headers at all.
    cors_origins: list[str] = Field(default_factory=list)
    # The console's session cookie carries the Secure flag (sent over HTTPS only). Unset: Secure
    # unless the API listens on loopback only (or runs --insecure), where plain http is normal.
    # Set false only for plain-http access from other hosts, which exposes the session.
    session_cookie_secure: bool | None = None

    def client_url(self) -> str:
        return self.url or f"http://{self.host}:{self.port}"


class WorkerSettings(Strict):
    """`resurgo worker` sizing: every monitored job is one long-lived workflow."""

    # Workflows kept in memory between tasks. A job evicted from the cache is replayed from its
    # history on its next task, so keep this above the number of jobs monitored at once.
    max_cached_workflows: int = Field(default=4000, ge=0)


class MetricsSettings(Strict):
    """Prometheus `/metrics` of the worker, controller and watchdog, each on its own port (the
    API serves its own next to the console). 0: off. $RESURGO_METRICS_PORT, set per process (one
    container each), wins over these; the compose file and the Helm chart use 9464/9465/9466.
    """

    host: str = "0.0.0.0"
    worker_port: int = Field(default=0, ge=0, le=65535)
    controller_port: int = Field(default=0, ge=0, le=65535)
    watchdog_port: int = Field(default=0, ge=0, le=65535)


class ResurgoConfig(Strict):
    temporal: TemporalSettings = TemporalSettings()
    worker: WorkerSettings = WorkerSettings()
    audit: AuditSettings = AuditSettings()
    api: ApiSettings = ApiSettings()
    clusters: dict[str, ClusterSettings] = Field(
        default_factory=lambda: {"local": ClusterSettings()}
    )
    policies: dict[str, PolicyConfig] = Field(default_factory=dict)
    telemetry: TelemetrySettings = TelemetrySettings()
    metrics: MetricsSettings = MetricsSettings()

    def cluster(self, name: str) -> ClusterSettings:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise ConfigError(f"cluster {name!r} is not configured (known: {known})") from None

    def policy(self, name: str | None) -> PolicyConfig:
        name = name or "default"
        if name in self.policies:
            return self.policies[name].model_copy(update={"name": name})
        if name == "default":
            return PolicyConfig()
        raise ConfigError(f"unknown policy {name!r}")


def load_config(path: str | os.PathLike[str] | None = None) -> ResurgoConfig:
    """Load the file named by `path` or $RESURGO_CONFIG (defaults when neither is set), with
    every key the environment sets on top (`RESURGO_<SECTION>__<KEY>`, `*_FILE` secrets: see
    `resurgo.config_env`)."""
    from resurgo.config_env import environment_overrides, merge

    chosen = path or os.environ.get("RESURGO_CONFIG")
    raw: dict[str, object] = {}
    where = "the environment"
    if chosen:
        file = Path(chosen)
        where = f"{file} (with the environment)"
        try:
            raw = tomllib.loads(file.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config {file}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {file} is not valid TOML: {exc}") from exc
    try:
        raw = merge(raw, environment_overrides(ResurgoConfig))
    except SecretFileError as exc:
        raise ConfigError(f"config from the environment: {exc}") from exc
    try:
        return ResurgoConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"config {where} is invalid: {problems}") from exc
