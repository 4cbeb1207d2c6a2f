"""Resurgo configuration: one TOML file (or none: embedded defaults for a single local cluster).

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

[policies.default]
max_attempts = 5
```
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workflows.contracts import ClusterGates, PolicyConfig


class ConfigError(Exception):
    """The configuration file is missing, unreadable or invalid; the message says where."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TemporalSettings(Strict):
    address: str = "localhost:7233"
    namespace: str = "default"


class AuditSettings(Strict):
    url: str | None = None


class SshSettings(Strict):
    host: str
    port: int = 22
    username: str = "root"
    client_keys: list[str] = Field(default_factory=list)
    known_hosts: str | None = None
    command_timeout: float = 30.0


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

    def gates(self) -> ClusterGates:
        return ClusterGates(
            acknowledge_scheduler_actions=self.acknowledge_scheduler_actions,
            partitions=self.partitions,
        )


class ResurgoConfig(Strict):
    temporal: TemporalSettings = TemporalSettings()
    audit: AuditSettings = AuditSettings()
    clusters: dict[str, ClusterSettings] = Field(
        default_factory=lambda: {"local": ClusterSettings()}
    )
    policies: dict[str, PolicyConfig] = Field(default_factory=dict)

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
    """Load the file named by `path` or $RESURGO_CONFIG; defaults when neither is set."""
    chosen = path or os.environ.get("RESURGO_CONFIG")
    if not chosen:
        return ResurgoConfig()
    file = Path(chosen)
    try:
        raw = tomllib.loads(file.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {file}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {file} is not valid TOML: {exc}") from exc
    try:
        return ResurgoConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"config {file} is invalid: {problems}") from exc
