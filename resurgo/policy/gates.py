"""May scheduler actions be carried out at all? One rule for every workflow that acts (a job's
recovery, an array's coordinator): the subject's mode, then the cluster's acknowledgement, then
the partition allowlist. Pure, so the workflows stay deterministic."""

from __future__ import annotations

from resurgo.contracts import ClusterGates, Mode

__all__ = ["action_blocker"]


def action_blocker(mode: Mode, gates: ClusterGates, partition: str, subject: str) -> str | None:
    """Why `subject` ("job", "array") may not act now, in words for the audit trail; or None."""
    if mode != Mode.ACTION:
        return f"the {subject} is in observe mode"
    if not gates.acknowledge_scheduler_actions:
        return "the cluster has not set acknowledge_scheduler_actions"
    if gates.partitions and partition not in gates.partitions:
        return f"partition {partition!r} is not in the cluster allowlist"
    return None
