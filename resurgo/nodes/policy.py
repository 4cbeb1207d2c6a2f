"""Operator policy for nodes (`[policies.default.nodes]`): lemon detection and validated return
to service. Read from the default policy: nodes belong to the cluster, not to one job."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class NodeHealthPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # A node blamed for failures of `lemon_failures` distinct jobs within `lemon_window_seconds`
    # gets drain advice (resurgo/nodes/lemon.py); carried out (through the controller's gates
    # and circuit breaker, and approval when the policy requires it) only in action mode.
    lemon_failures: int = Field(default=3, ge=1, le=1000)
    lemon_window_seconds: float = Field(default=86400.0, gt=0, le=365 * 86400)
    lemon_mode: Literal["observe", "action"] = "observe"
    # Distinct Slurm users among those jobs: failures are read from job output, which its user
    # writes; raise this so one user's jobs alone cannot get a node drained (1: any jobs).
    lemon_min_users: int = Field(default=1, ge=1, le=1000)
    # The check's argv, run on the drained node alone (resurgo/nodes/health_check.py has the
    # contract). Empty: no validation, the node waits drained for a human.
    health_check: list[str] = Field(default_factory=list, max_length=100)
    health_check_timeout_seconds: float = Field(default=300.0, gt=0, le=86400)
    # Where the check's output is written: a directory the job and the controller both see.
    health_check_output_dir: str = "/tmp"
    # Validate this long after the drain even without a repair mark (0: only when marked).
    validate_after_seconds: float = Field(default=0.0, ge=0, le=365 * 86400)
    # How often the node's Slurm state is looked at while waiting for a repair mark.
    poll_seconds: float = Field(default=60.0, ge=1, le=86400)
