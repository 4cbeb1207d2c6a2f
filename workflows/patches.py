"""`workflow.patched` ids of JobRecoveryWorkflow, in one place: never rename or reuse one (they
are recorded in running workflows' histories). Add a new id for every change of the commands a
workflow issues, and a recorded history that replays with it (`tests/replay`)."""

ANOMALY_FIRST = "2026-11-anomaly-audited-before-attribution"
FAIL_OPEN_RELEASE = "2026-11-fail-open-release-after-failed-step"
NO_REASK = "2026-11-declined-cause-not-asked-again"
ENDED_EVENT = "2026-11-monitoring-ended-event"
EXCLUSION_CAP = "2026-11-per-job-exclusion-cap"
ONE_REPORT_PER_FAILURE = "2026-11-one-report-per-failure"
PROGRESS_WITH_ANOMALY = "2026-11-progress-read-with-the-anomaly"
FAIL_OPEN_HOLD_STARTED = "2026-12-fail-open-when-requeue-hold-failed"
BOUNDED_AUDIT_DURING_HOLD = "2026-12-bounded-audit-while-a-hold-is-outstanding"
LONG_WAIT_ROLLS_OVER = "2026-12-long-controller-wait-rolls-over"
CALIBRATED_ACTIONS = "2026-12-calibrated-actions-stragglers-left-running"
EVIDENCE_LIMITED_EVENT = "2026-12-evidence-limited-event"
# Array tasks report each failure to their array coordinator and wait for its verdict (issue 16).
ARRAY_COORDINATION = "2026-12-array-task-reports-to-coordinator"
# A hetjob's attempt_started records each component's name, own job id and nodes (issue 16).
HETJOB_COMPONENTS_RECORDED = "2026-12-hetjob-attempt-records-components"
# ... and its monitoring_started each component's own job id, as discovery listed them.
HETJOB_COMPONENTS_AT_START = "2026-12-hetjob-monitoring-records-components"
