"""Operator policy for job arrays (`[policies.<name>.arrays]`): when failures of several tasks
of one array are judged together (resurgo/policy/arrays.py). 0 turns a rule off."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ArrayPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # This many distinct tasks failing with one root-cause fingerprint (application, system
    # software or unknown; not all on one node) make it systematic: not retried any more.
    systematic_failures: int = Field(default=3, ge=0, le=100_000)
    # A node implicated in failures of this many distinct tasks is excluded for the array's
    # pending tasks (within the policy's max_nodes_excluded_per_job and the circuit breaker).
    node_failures: int = Field(default=3, ge=0, le=100_000)
    # A systematic failure holds the array's pending tasks (an operator releases them with
    # `scontrol release <array id>`); false: reported only.
    hold_pending: bool = True
