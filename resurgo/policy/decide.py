"""The recovery policy: pure functions of recorded inputs (no I/O, no clocks, no randomness).

The workflow calls `decide` with the state it carries and the attribution an activity returned,
then `apply_advice` to fold the decision into that state. Both are deterministic, so a replayed
workflow reaches the same advice.
"""

from __future__ import annotations

import hashlib

from resurgo.contracts import (
    HARDWARE_CATEGORIES,
    Advice,
    AdviceKind,
    AnomalyKind,
    AttemptRecord,
    Attribution,
    Category,
    Directive,
    PolicyConfig,
    RecoveryState,
)

# Scheduler outcomes that are nobody's fault: requeue without spending the failure budget.
FREE_REQUEUE_OUTCOMES = frozenset(
    {"preempted", "node_fail", "admin_cancelled", "timeout_progress", "requeued"}
)
NO_ACTION_OUTCOMES = frozenset({"owner_cancelled"})


def _fingerprint_of(category: Category, key: str) -> str:
    # The attribution's fingerprint scheme (resurgo.attribute.analysis.fingerprint; a unit test
    # holds the two equal), spelt out so the workflow sandbox imports no attribution code.
    return f"{category.value}:{hashlib.sha256(f'{category.value}|{key}'.encode()).hexdigest()[:12]}"


# Verdict keys the attribution engine gives two causes whose action the labels fix
# (attribution-labels.md, "action" and tie-breaker 6). A node whose launcher never started
# while the others waited for it: named although the cause is unknown, and excluded.
AGENT_NEVER_STARTED_KEY = "launch|agent_never_started"
AGENT_NEVER_STARTED = _fingerprint_of(Category.UNKNOWN, AGENT_NEVER_STARTED_KEY)
# The site's software broken on every node of the job, or a disk quota exhausted: nothing to
# exclude, and a retry meets the same fault until a human changes something.
NO_RETRY_HELPS_KEY = "site|no_retry_helps"
NO_RETRY_HELPS = _fingerprint_of(Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY)


def effective_policy(policy: PolicyConfig, directive: Directive) -> PolicyConfig:
    """The directive may tighten the operator's policy, never loosen it."""
    updates: dict[str, object] = {}
    if directive.max_attempts is not None and directive.max_attempts < policy.max_attempts:
        updates["max_attempts"] = directive.max_attempts
    if policy.allow_drain and not directive.drain:
        updates["allow_drain"] = False
    return policy.model_copy(update=updates) if updates else policy


def attempt_made_progress(record: AttemptRecord, previous: AttemptRecord | None) -> bool:
    """An attempt progressed if it got further than where the previous one ended."""
    if record.max_iteration is None:
        return False
    if previous is None or previous.max_iteration is None:
        baseline = record.resumed_from if record.resumed_from is not None else -1
        return record.max_iteration > baseline
    return record.max_iteration > previous.max_iteration


def consecutive_attempts_without_progress(attempts: list[AttemptRecord]) -> int:
    count = 0
    for index in range(len(attempts) - 1, -1, -1):
        previous = attempts[index - 1] if index > 0 else None
        if attempt_made_progress(attempts[index], previous):
            break
        count += 1
    return count


def consecutive_checkpoint_failures(attempts: list[AttemptRecord]) -> int:
    count = 0
    for record in reversed(attempts):
        if not record.checkpoint_failure:
            break
        count += 1
    return count


def limit_exclusions(
    culprits: list[str], already_excluded: list[str], cap: int
) -> tuple[list[str], list[str]]:
    """Split culprits into (kept, dropped) so that the job's exclusions, old and new, never
    exceed `cap`. Culprits the job already excludes cost nothing; new ones are taken in the
    attribution's order (the most implicated first) while room remains."""
    ordered = list(dict.fromkeys(n for n in culprits if n))
    already = set(already_excluded)
    room = cap - len(already)
    kept: list[str] = []
    dropped: list[str] = []
    for node in ordered:
        if node in already:
            kept.append(node)
        elif room > 0:
            kept.append(node)
            room -= 1
        else:
            dropped.append(node)
    return kept, dropped


def _excluding(
    state: RecoveryState,
    attribution: Attribution,
    policy: PolicyConfig,
    culprits: list[str],
    rule: str,
    reason: str,
    *,
    drain: bool = False,
    counts: bool = True,
) -> Advice:
    """Requeue excluding the culprits, within the per-job exclusion cap."""
    kept, dropped = limit_exclusions(
        culprits, state.excluded_nodes, policy.max_nodes_excluded_per_job
    )
    if dropped:
        reason += (
            f"; per-job exclusion cap {policy.max_nodes_excluded_per_job} "
            f"(already excluded: {','.join(sorted(state.excluded_nodes)) or 'none'}): "
            f"not excluding {','.join(dropped)}"
        )
    if not kept:
        return _advice(
            state, attribution, AdviceKind.REQUEUE, "exclusion_cap_reached", reason, counts=counts
        )
    return _advice(
        state, attribution, AdviceKind.REQUEUE_EXCLUDING, rule, reason,
        nodes=kept, drain=kept if drain else None, counts=counts,
    )  # fmt: skip


def _advice(
    state: RecoveryState,
    attribution: Attribution,
    kind: AdviceKind,
    rule: str,
    reason: str,
    *,
    nodes: list[str] | None = None,
    drain: list[str] | None = None,
    counts: bool = True,
) -> Advice:
    return Advice(
        generation=state.generation + 1,
        attempt=state.attempt,
        kind=kind,
        nodes=sorted(set(nodes or [])),
        drain_nodes=sorted(set(drain or [])),
        reason=reason,
        rule=rule,
        fingerprint=attribution.fingerprint,
        category=attribution.category,
        counts_against_budget=counts,
    )


def decide(
    state: RecoveryState,
    attribution: Attribution,
    policy: PolicyConfig,
    directive: Directive,
    *,
    calibrated: bool = True,
) -> Advice:
    """Decide what to do about the failure of the current attempt.

    `calibrated=False` gives the decisions from before the action calibration of issue 13 (a
    straggler with no node to exclude was retried; no time-limit-without-checkpoint stop):
    the workflow passes it for histories recorded before that change.

    `state.attempts[-1]` must describe the current attempt, with its progress and whether it
    failed to save a checkpoint already filled in.
    """
    policy = effective_policy(policy, directive)
    what = f"{attribution.category.value}: {attribution.summary}"

    if attribution.kind == "none" or attribution.category == Category.NONE:
        return _advice(state, attribution, AdviceKind.NONE, "healthy", "no failure", counts=False)
    if attribution.scheduler_outcome in NO_ACTION_OUTCOMES:
        return _advice(
            state, attribution, AdviceKind.NONE, "owner_cancelled",
            "the job was cancelled by its owner; nothing to recover", counts=False,
        )  # fmt: skip
    culprits = [n for n in attribution.culprit_nodes if n]
    if (
        calibrated
        and attribution.kind == AnomalyKind.STRAGGLER
        and (attribution.category == Category.APPLICATION or not culprits)
    ):
        # The job still runs, only slower: killing or requeueing it cannot make the code (or
        # an unexplained job-wide slowdown) faster, and there is no node to exclude.
        return _advice(
            state, attribution, AdviceKind.NONE, "straggler_no_node_to_exclude",
            f"{what}; the job keeps running, no node to exclude", counts=False,
        )  # fmt: skip
    outcome = attribution.scheduler_outcome
    if calibrated and outcome == "timeout_no_checkpoint":
        # Resubmitting unchanged repeats the same run from scratch into the same time limit.
        return _advice(
            state, attribution, AdviceKind.STOP, "timeout_without_checkpoint",
            "the job reached its time limit without ever writing a checkpoint; a resubmission "
            "would start over and time out again (raise the limit or checkpoint more often)",
        )  # fmt: skip
    if outcome == "timeout" and state.attempts:
        previous = state.attempts[-2] if len(state.attempts) > 1 else None
        if attempt_made_progress(state.attempts[-1], previous):
            outcome = "timeout_progress"
    if outcome in FREE_REQUEUE_OUTCOMES:
        culprits = attribution.culprit_nodes if outcome == "node_fail" else []
        rule = f"scheduler_{outcome}"
        free = f"scheduler outcome {outcome}: requeue without spending the failure budget"
        if culprits:
            return _excluding(state, attribution, policy, culprits, rule, free, counts=False)
        return _advice(state, attribution, AdviceKind.REQUEUE, rule, free, counts=False)

    if state.failures_counted >= policy.max_attempts:
        return _advice(
            state, attribution, AdviceKind.STOP, "attempt_budget_exhausted",
            f"{state.failures_counted} failed attempts reached the cap of {policy.max_attempts}; "
            f"last failure {what}",
        )  # fmt: skip
    if consecutive_checkpoint_failures(state.attempts) >= policy.checkpoint_failure_attempts:
        return _advice(
            state, attribution, AdviceKind.STOP, "checkpoint_save_failing",
            f"checkpoint saving failed in {policy.checkpoint_failure_attempts} consecutive "
            f"attempts; last failure {what}",
        )  # fmt: skip
    if consecutive_attempts_without_progress(state.attempts) >= policy.no_progress_attempts:
        return _advice(
            state, attribution, AdviceKind.STOP, "crash_loop",
            f"no training progress across {policy.no_progress_attempts} consecutive attempts; "
            f"last failure {what}",
        )  # fmt: skip

    if calibrated and attribution.fingerprint == NO_RETRY_HELPS:
        return _advice(
            state, attribution, AdviceKind.STOP, "site_fault_recurs",
            f"{what}; no node to exclude and a retry meets the same fault: a human must fix "
            "the site's software or the quota",
        )  # fmt: skip
    spent = state.budgets.get(attribution.fingerprint, 0)
    if (
        attribution.category == Category.APPLICATION
        and attribution.confidence >= policy.application_stop_confidence
        and spent >= policy.application_retries
    ):
        return _advice(
            state, attribution, AdviceKind.STOP, "application_error",
            f"the application failed ({attribution.summary}); a retry cannot change the outcome",
        )  # fmt: skip
    if spent >= policy.budget_per_fingerprint:
        return _advice(
            state, attribution, AdviceKind.STOP, "fingerprint_budget_exhausted",
            f"the same root cause ({attribution.fingerprint}) already caused {spent} restarts",
        )  # fmt: skip

    if culprits and attribution.kind == AnomalyKind.STRAGGLER:
        return _excluding(
            state, attribution, policy, culprits, "straggler_excluded",
            f"{', '.join(sorted(set(culprits)))} slows the whole job: {attribution.summary}",
        )  # fmt: skip
    if culprits and (
        attribution.category in HARDWARE_CATEGORIES
        or attribution.category == Category.SYSTEM_SOFTWARE
    ):
        return _excluding(
            state, attribution, policy, culprits, "node_fault_excluded", what,
            drain=policy.allow_drain,
        )  # fmt: skip
    if culprits and calibrated and attribution.fingerprint == AGENT_NEVER_STARTED:
        # Excluded but not drained: nothing says what is wrong with the node.
        return _excluding(state, attribution, policy, culprits, "agent_never_started", what)
    return _advice(
        state, attribution, AdviceKind.REQUEUE, "retry_within_budget",
        f"{what}; retry ({spent + 1} of {policy.budget_per_fingerprint} for this cause)",
    )  # fmt: skip


def apply_advice(state: RecoveryState, advice: Advice) -> RecoveryState:
    """Fold a decision into the state: generation, budgets, advice log.

    Exclusions are not recorded here: they count once the scheduler step applied them."""
    new = state.model_copy(deep=True)
    new.generation = advice.generation
    new.advice_log = [*new.advice_log, advice][-20:]
    if advice.category != Category.NONE:
        new.last_category = advice.category.value
    requeues = advice.kind in (AdviceKind.REQUEUE, AdviceKind.REQUEUE_EXCLUDING)
    if requeues and advice.counts_against_budget:
        new.budgets[advice.fingerprint] = new.budgets.get(advice.fingerprint, 0) + 1
        new.failures_counted += 1
    return new


def advice_steps(advice: Advice) -> list[str]:
    """The scheduler steps that carry out one advice, in order (names of ActionStep)."""
    if advice.kind == AdviceKind.REQUEUE:
        return ["requeue_hold", "release"]
    if advice.kind == AdviceKind.REQUEUE_EXCLUDING:
        drains = ["drain_node"] if advice.drain_nodes else []
        return ["requeue_hold", "exclude_nodes", *drains, "release"]
    if advice.kind == AdviceKind.STOP:
        return ["cancel"]
    return []


def describe_advice(advice: Advice) -> str:
    """One line for summaries and the UI."""
    if advice.kind == AdviceKind.REQUEUE_EXCLUDING:
        return f"requeue excluding {','.join(advice.nodes)}"
    if advice.kind == AdviceKind.STOP:
        return f"stop ({advice.rule})"
    if advice.kind == AdviceKind.REQUEUE:
        return "requeue"
    return "no action"
