"""How the workflow calls each activity: one place for every activity's timeouts and retry
policy. The workflow passes the activity's own method (`ControllerActivities.watch_attempt`),
so a reader (or a tool) follows the loop from the workflow straight to the code that runs.

Names on the wire are the `@activity.defn(name=...)` names, which equal the method names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy

from resurgo.activities.audit import AuditActivities
from resurgo.activities.controller import ControllerActivities
from resurgo.errors import permanent_error_types

# Failure types Temporal must not retry: every PermanentError, derived once from the class tree.
NON_RETRYABLE = list(permanent_error_types())


@dataclass(frozen=True)
class ActivityOptions:
    start_to_close: timedelta
    retry: RetryPolicy
    schedule_to_close: timedelta | None = None
    heartbeat: timedelta | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "start_to_close_timeout": self.start_to_close,
            "retry_policy": self.retry,
        }
        if self.schedule_to_close is not None:
            out["schedule_to_close_timeout"] = self.schedule_to_close
        if self.heartbeat is not None:
            out["heartbeat_timeout"] = self.heartbeat
        return out


# A dead watcher or controller is noticed within the heartbeat timeout, not after start-to-close.
HEARTBEAT = timedelta(seconds=15)


def watch_attempt(window_seconds: float) -> ActivityOptions:
    """The long-running watch: bounded by its window; retried while the job is watched."""
    return ActivityOptions(
        start_to_close=timedelta(seconds=window_seconds + 300),
        heartbeat=HEARTBEAT,
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
        ),
    )


ATTRIBUTE_ANOMALY = ActivityOptions(
    start_to_close=timedelta(seconds=120),
    schedule_to_close=timedelta(minutes=5),
    heartbeat=HEARTBEAT,
    retry=RetryPolicy(maximum_attempts=6),
)


def scheduler_action(hold_timeout_seconds: float) -> ActivityOptions:
    """One scheduler step: it must finish well inside the hold's fail-open deadline."""
    return ActivityOptions(
        start_to_close=timedelta(seconds=30),
        schedule_to_close=timedelta(seconds=hold_timeout_seconds / 2),
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=10),
            non_retryable_error_types=NON_RETRYABLE,
        ),
    )


VERIFY_ADVICE = ActivityOptions(
    start_to_close=timedelta(seconds=120),
    heartbeat=HEARTBEAT,
    retry=RetryPolicy(maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)

RECORD_AUDIT = ActivityOptions(
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=15)
    ),
)


def record_audit_during_hold(hold_timeout_seconds: float) -> ActivityOptions:
    """Audit writes while a hold of ours is outstanding: bounded, so a store outage delays the
    release by at most this much per write instead of holding the job until the store is back
    (the workflow keeps what was not written and sends it with the next write)."""
    bound = timedelta(seconds=max(1.0, min(60.0, hold_timeout_seconds / 10)))
    return ActivityOptions(
        start_to_close=min(bound, timedelta(seconds=30)),
        schedule_to_close=bound,
        retry=RECORD_AUDIT.retry,
    )


# The activities the workflow calls, by reference (the worker registers the same methods).
watch = ControllerActivities.watch_attempt
attribute = ControllerActivities.attribute_anomaly
act = ControllerActivities.scheduler_action
verify = ControllerActivities.verify_advice
record_audit = AuditActivities.record_audit
