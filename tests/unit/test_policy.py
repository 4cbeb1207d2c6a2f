"""The recovery policy: table-driven cases plus properties that must hold for any history."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.contracts import (
    AdviceKind,
    AnomalyKind,
    AttemptRecord,
    Attribution,
    Category,
    Directive,
    Mode,
    PolicyConfig,
    RecoveryState,
)
from resurgo.policy.decide import (
    advice_steps,
    apply_advice,
    decide,
    effective_policy,
    limit_exclusions,
)


def attribution(
    category: Category = Category.UNKNOWN,
    nodes: tuple[str, ...] = (),
    confidence: float = 0.9,
    fingerprint: str | None = None,
    outcome: str | None = None,
) -> Attribution:
    return Attribution(
        kind=AnomalyKind.CRASH,
        category=category,
        culprit_nodes=list(nodes),
        confidence=confidence,
        fingerprint=fingerprint or f"{category.value}:{','.join(nodes)}",
        summary="test failure",
        scheduler_outcome=outcome,
    )


def next_attempt(s: RecoveryState, progress: int) -> None:
    """The job was restarted; the new attempt reached `progress` (negative: none)."""
    s.attempt += 1
    s.attempts.append(
        AttemptRecord(attempt=s.attempt, max_iteration=progress if progress >= 0 else None)
    )


def state(*records: AttemptRecord, **kw: object) -> RecoveryState:
    recs = list(records) or [AttemptRecord(attempt=0, max_iteration=10)]
    return RecoveryState(attempt=recs[-1].attempt, attempts=recs, **kw)


POLICY = PolicyConfig()
OBSERVE = Directive()


class TestDecide:
    def test_hardware_with_culprit_requeues_excluding_it(self) -> None:
        advice = decide(state(), attribution(Category.HARDWARE_GPU, ("node2",)), POLICY, OBSERVE)
        assert advice.kind == AdviceKind.REQUEUE_EXCLUDING and advice.nodes == ["node2"]
        assert advice.rule == "node_fault_excluded" and advice.drain_nodes == []
        assert advice.generation == 1 and advice.attempt == 0

    def test_drain_only_when_policy_and_directive_allow(self) -> None:
        hw = attribution(Category.HARDWARE_NETWORK, ("node3",))
        allow = PolicyConfig(allow_drain=True)
        assert decide(state(), hw, allow, Directive(drain=True)).drain_nodes == ["node3"]
        assert decide(state(), hw, allow, Directive(drain=False)).drain_nodes == []
        assert decide(state(), hw, POLICY, Directive(drain=True)).drain_nodes == []

    def test_confident_application_error_stops(self) -> None:
        advice = decide(
            state(), attribution(Category.APPLICATION, confidence=0.95), POLICY, OBSERVE
        )
        assert advice.kind == AdviceKind.STOP and advice.rule == "application_error"

    def test_unsure_application_error_is_retried(self) -> None:
        advice = decide(state(), attribution(Category.APPLICATION, confidence=0.5), POLICY, OBSERVE)
        assert advice.kind == AdviceKind.REQUEUE

    def test_named_policy_may_allow_application_retries(self) -> None:
        lenient = PolicyConfig(application_retries=1)
        app = attribution(Category.APPLICATION, confidence=0.95)
        first = decide(state(), app, lenient, OBSERVE)
        assert first.kind == AdviceKind.REQUEUE
        s = apply_advice(state(), first)
        s.attempts.append(AttemptRecord(attempt=1, max_iteration=20))
        s.attempt = 1
        assert decide(s, app, lenient, OBSERVE).kind == AdviceKind.STOP

    def test_unknown_cause_retried_then_budget_stops(self) -> None:
        s = state()
        unknown = attribution(Category.UNKNOWN)
        for attempt in range(POLICY.budget_per_fingerprint):
            advice = decide(s, unknown, POLICY, OBSERVE)
            assert advice.kind == AdviceKind.REQUEUE
            s = apply_advice(s, advice)
            s.attempt = attempt + 1
            s.attempts.append(AttemptRecord(attempt=attempt + 1, max_iteration=100 * (attempt + 2)))
        assert decide(s, unknown, POLICY, OBSERVE).rule == "fingerprint_budget_exhausted"

    def test_owner_cancel_means_nothing(self) -> None:
        advice = decide(state(), attribution(Category.SCHEDULER, outcome="owner_cancelled"),
                        POLICY, OBSERVE)  # fmt: skip
        assert advice.kind == AdviceKind.NONE and advice_steps(advice) == []

    def test_preemption_is_free(self) -> None:
        advice = decide(
            state(), attribution(Category.SCHEDULER, outcome="preempted"), POLICY, OBSERVE
        )
        assert advice.kind == AdviceKind.REQUEUE and not advice.counts_against_budget
        after = apply_advice(state(), advice)
        assert after.failures_counted == 0 and after.budgets == {}

    def test_node_failure_requeues_excluding_without_budget(self) -> None:
        advice = decide(
            state(), attribution(Category.HARDWARE_HOST, ("node4",), outcome="node_fail"),
            POLICY, OBSERVE,
        )  # fmt: skip
        assert advice.kind == AdviceKind.REQUEUE_EXCLUDING and not advice.counts_against_budget

    def test_time_limit_free_only_with_progress(self) -> None:
        timeout = attribution(Category.SCHEDULER, outcome="timeout")
        progressed = decide(
            state(AttemptRecord(attempt=0, max_iteration=50)), timeout, POLICY, OBSERVE
        )
        assert (
            progressed.rule == "scheduler_timeout_progress" and not progressed.counts_against_budget
        )
        stuck = decide(state(AttemptRecord(attempt=0)), timeout, POLICY, OBSERVE)
        assert stuck.counts_against_budget

    def test_crash_loop_stops(self) -> None:
        s = state(
            AttemptRecord(attempt=0, max_iteration=40),
            AttemptRecord(attempt=1, resumed_from=40, max_iteration=40),
            AttemptRecord(attempt=2, resumed_from=40, max_iteration=40),
        )
        assert decide(s, attribution(), POLICY, OBSERVE).rule == "crash_loop"

    def test_checkpoint_failures_stop(self) -> None:
        s = state(
            AttemptRecord(attempt=0, max_iteration=40, checkpoint_failure=True),
            AttemptRecord(attempt=1, max_iteration=80, checkpoint_failure=True),
        )
        assert decide(s, attribution(), POLICY, OBSERVE).rule == "checkpoint_save_failing"

    def test_total_cap_and_directive_tightening(self) -> None:
        s = state(failures_counted=2)
        assert decide(s, attribution(), POLICY, Directive(max_attempts=2)).rule == (
            "attempt_budget_exhausted"
        )
        assert (
            decide(s, attribution(), POLICY, Directive(max_attempts=50)).kind == AdviceKind.REQUEUE
        )

    def test_directive_cannot_loosen(self) -> None:
        assert (
            effective_policy(POLICY, Directive(max_attempts=99)).max_attempts == POLICY.max_attempts
        )

    def test_healthy_is_none(self) -> None:
        healthy = Attribution(kind="none", category=Category.NONE, confidence=1.0,
                              fingerprint="none", summary="ok")  # fmt: skip
        assert decide(state(), healthy, POLICY, OBSERVE).kind == AdviceKind.NONE


categories = st.sampled_from(list(Category))
nodes = st.lists(st.sampled_from(["node1", "node2", "node3", "node4"]), max_size=3, unique=True)
outcomes = st.sampled_from([None, None, "preempted", "timeout", "owner_cancelled", "node_fail"])
attributions = st.builds(
    attribution,
    category=categories,
    nodes=nodes.map(tuple),
    confidence=st.floats(0, 1),
    fingerprint=st.sampled_from(["a", "b", "c"]),
    outcome=outcomes,
)
policies = st.builds(
    PolicyConfig,
    max_attempts=st.integers(0, 6),
    budget_per_fingerprint=st.integers(0, 4),
    application_retries=st.integers(0, 2),
    no_progress_attempts=st.integers(1, 4),
    allow_drain=st.booleans(),
)


class TestProperties:
    @settings(max_examples=300)
    @given(
        policies,
        st.lists(st.tuples(attributions, st.integers(-1, 200)), max_size=12),
        st.sampled_from([Mode.OBSERVE, Mode.ACTION]),
    )
    def test_budgets_are_never_exceeded(self, pol: PolicyConfig, history: list, mode: Mode) -> None:  # type: ignore[type-arg]
        s = state()
        directive = Directive(mode=mode)
        for attr, progress in history:
            advice = decide(s, attr, pol, directive)
            s = apply_advice(s, advice)
            assert s.failures_counted <= pol.max_attempts
            assert all(count <= pol.budget_per_fingerprint for count in s.budgets.values())
            if advice.kind == AdviceKind.STOP:
                break
            if advice.kind == AdviceKind.NONE:
                continue
            next_attempt(s, progress)

    @given(policies, attributions)
    def test_observe_and_action_mode_give_identical_advice(
        self, pol: PolicyConfig, attr: Attribution
    ) -> None:
        s = state()
        observe = decide(s, attr, pol, Directive(mode=Mode.OBSERVE))
        action = decide(s, attr, pol, Directive(mode=Mode.ACTION))
        assert observe == action

    @given(policies, attributions)
    def test_exclusions_only_name_culprits_and_drain_needs_permission(
        self, pol: PolicyConfig, attr: Attribution
    ) -> None:
        advice = decide(state(), attr, pol, Directive(drain=True))
        assert set(advice.nodes) <= set(attr.culprit_nodes)
        if not pol.allow_drain:
            assert advice.drain_nodes == []

    @given(policies, attributions)
    def test_decide_is_deterministic(self, pol: PolicyConfig, attr: Attribution) -> None:
        assert decide(state(), attr, pol, OBSERVE) == decide(state(), attr, pol, OBSERVE)


class TestExclusionCap:
    def test_more_culprits_than_the_cap_excludes_the_first_ones(self) -> None:
        hw = attribution(Category.HARDWARE_GPU, ("node3", "node1", "node2"))
        advice = decide(state(), hw, POLICY, OBSERVE)
        assert advice.kind == AdviceKind.REQUEUE_EXCLUDING and advice.nodes == ["node1", "node3"]
        assert "per-job exclusion cap 2" in advice.reason and "not excluding node2" in advice.reason

    def test_cap_counts_what_the_job_already_excluded(self) -> None:
        hw = attribution(Category.HARDWARE_HOST, ("node4", "node2"))
        advice = decide(state(excluded_nodes=["node1"]), hw, POLICY, OBSERVE)
        assert advice.nodes == ["node4"] and "not excluding node2" in advice.reason

    def test_cap_reached_requeues_without_excluding(self) -> None:
        hw = attribution(Category.HARDWARE_NETWORK, ("node3",))
        full = state(excluded_nodes=["node1", "node2"])
        advice = decide(full, hw, PolicyConfig(allow_drain=True), Directive(drain=True))
        assert advice.kind == AdviceKind.REQUEUE and advice.rule == "exclusion_cap_reached"
        assert (
            advice.nodes == []
            and advice.drain_nodes == []
            and advice_steps(advice)
            == [
                "requeue_hold",
                "release",
            ]
        )

    def test_already_excluded_culprit_costs_nothing(self) -> None:
        hw = attribution(Category.HARDWARE_GPU, ("node1",))
        advice = decide(state(excluded_nodes=["node1", "node2"]), hw, POLICY, OBSERVE)
        assert advice.kind == AdviceKind.REQUEUE_EXCLUDING and advice.nodes == ["node1"]

    def test_limit_exclusions_is_ordered_and_deduplicated(self) -> None:
        assert limit_exclusions(["b", "a", "b", "", "c"], ["x"], 3) == (["b", "a"], ["c"])
        assert limit_exclusions(["a"], [], 0) == ([], ["a"])


class TestExclusionProperties:
    @settings(max_examples=300)
    @given(
        st.builds(
            PolicyConfig,
            max_attempts=st.integers(0, 8),
            budget_per_fingerprint=st.integers(0, 6),
            no_progress_attempts=st.integers(1, 4),
            allow_drain=st.booleans(),
            max_nodes_excluded_per_job=st.integers(0, 4),
        ),
        st.lists(st.tuples(attributions, st.integers(-1, 200)), max_size=12),
        st.booleans(),
    )
    def test_never_exceeds_the_per_job_cap_nor_excludes_non_culprits(
        self,
        pol: PolicyConfig,
        history: list[tuple[Attribution, int]],
        drain: bool,
    ) -> None:
        """Whatever happens, the nodes a job ends up excluding (as the workflow accumulates
        them: previous exclusions plus the advice's nodes) stay within the cap, and every node
        ever excluded or drained was named a culprit of the failure that led to it."""
        s = state()
        directive = Directive(mode=Mode.ACTION, drain=drain)
        for attr, progress in history:
            advice = decide(s, attr, pol, directive)
            s = apply_advice(s, advice)
            assert set(advice.nodes) <= set(attr.culprit_nodes)
            assert set(advice.drain_nodes) <= set(advice.nodes)
            if advice.kind == AdviceKind.REQUEUE_EXCLUDING:
                assert advice.nodes
                # What the workflow's exclude_nodes step asks for and then records.
                s.excluded_nodes = sorted(set(s.excluded_nodes) | set(advice.nodes))
            else:
                assert advice.nodes == [] and advice.drain_nodes == []
            assert len(s.excluded_nodes) <= pol.max_nodes_excluded_per_job
            if advice.kind == AdviceKind.STOP:
                break
            if advice.kind == AdviceKind.NONE:
                continue
            next_attempt(s, progress)


def straggler(category: Category, nodes: tuple[str, ...] = ()) -> Attribution:
    return Attribution(
        kind=AnomalyKind.STRAGGLER, category=category, culprit_nodes=list(nodes),
        confidence=0.6, fingerprint=f"{category.value}:straggler", summary="slow",
    )  # fmt: skip


HEALTHY = Attribution(
    kind="none", category=Category.NONE, confidence=1.0, fingerprint="none", summary="ok"
)


CALIBRATION = [
    # (attribution, first-time action)
    (attribution(Category.APPLICATION, confidence=0.95), AdviceKind.STOP),
    (attribution(Category.HARDWARE_GPU, ("node2",)), AdviceKind.REQUEUE_EXCLUDING),
    (attribution(Category.HARDWARE_HOST, ("node1",)), AdviceKind.REQUEUE_EXCLUDING),
    (attribution(Category.SYSTEM_SOFTWARE, ("node3",)), AdviceKind.REQUEUE_EXCLUDING),
    (attribution(Category.SYSTEM_SOFTWARE), AdviceKind.REQUEUE),  # a shared service
    (attribution(Category.UNKNOWN), AdviceKind.REQUEUE),
    (attribution(Category.SCHEDULER, outcome="preempted"), AdviceKind.REQUEUE),
    (attribution(Category.SCHEDULER, outcome="owner_cancelled"), AdviceKind.NONE),
    (HEALTHY, AdviceKind.NONE),
    (straggler(Category.APPLICATION), AdviceKind.NONE),
    (straggler(Category.UNKNOWN), AdviceKind.NONE),  # a job-wide slowdown, no culprit
    (straggler(Category.HARDWARE_GPU, ("node2",)), AdviceKind.REQUEUE_EXCLUDING),
    (attribution(Category.SCHEDULER, outcome="timeout_no_checkpoint"), AdviceKind.STOP),
]


class TestCalibration:
    """attribution-labels.md, "action": what the default policy does on a first failure."""

    def test_first_failure_actions_follow_the_labels(self) -> None:
        # Fails on HEAD for the two stragglers with no node to exclude (requeued there) and for
        # the time limit without a checkpoint (requeued into the same time limit).
        got = [decide(state(), a, POLICY, OBSERVE).kind for a, _ in CALIBRATION]
        assert got == [want for _, want in CALIBRATION]

    def test_histories_from_before_the_calibration_keep_their_decisions(self) -> None:
        # The workflow passes calibrated=False for histories without the CALIBRATED_ACTIONS
        # marker: their recorded requeue of a culprit-less straggler must replay unchanged.
        old = decide(state(), straggler(Category.UNKNOWN), POLICY, OBSERVE, calibrated=False)
        assert old.kind == AdviceKind.REQUEUE

    def test_a_straggler_left_running_spends_no_budget(self) -> None:
        advice = decide(state(), straggler(Category.UNKNOWN), POLICY, OBSERVE)
        after = apply_advice(state(), advice)
        assert advice_steps(advice) == [] and after.failures_counted == 0 and after.budgets == {}

    @settings(max_examples=200)
    @given(
        policies,
        st.sampled_from([Category.APPLICATION, Category.UNKNOWN, Category.SYSTEM_SOFTWARE]),
        st.lists(st.tuples(attributions, st.integers(-1, 200)), max_size=6),
    )
    def test_a_straggler_with_no_node_to_exclude_is_never_killed_nor_requeued(
        self,
        pol: PolicyConfig,
        category: Category,
        history: list,  # type: ignore[type-arg]
    ) -> None:
        # Whatever came before, a job that is still running, only slower, with nothing to
        # exclude (or slowed by its own code) is left running: no stop, no requeue.
        s = state()
        for attr, progress in history:
            advice = decide(s, attr, pol, OBSERVE)
            if advice.kind == AdviceKind.STOP:
                break
            s = apply_advice(s, advice)
            if advice.kind != AdviceKind.NONE:
                next_attempt(s, progress)
        nodes = ("node2",) if category == Category.APPLICATION else ()
        assert decide(s, straggler(category, nodes), pol, OBSERVE).kind == AdviceKind.NONE


def never_started(nodes: tuple[str, ...]) -> Attribution:
    # The fingerprint the attribution engine gives a launcher that never started on a node.
    from resurgo.attribute.analysis import fingerprint

    return Attribution(
        kind=AnomalyKind.HANG,
        category=Category.UNKNOWN,
        culprit_nodes=list(nodes),
        confidence=0.6,
        fingerprint=fingerprint(Category.UNKNOWN, "launch|agent_never_started"),
        summary="the launcher on a node never printed a line nor joined",
    )


class TestAgentNeverStarted:
    """attribution-labels.md: a node whose agent never started is named (category unknown)
    and, being a specific node at fault, excluded."""

    def test_the_silent_node_is_excluded_but_not_drained(self) -> None:
        drain = PolicyConfig(allow_drain=True)
        advice = decide(state(), never_started(("gx-d04",)), drain, Directive(drain=True))
        assert advice.kind == AdviceKind.REQUEUE_EXCLUDING and advice.nodes == ["gx-d04"]
        assert advice.drain_nodes == [] and advice.rule == "agent_never_started"

    def test_other_unknown_causes_with_a_node_are_retried_as_before(self) -> None:
        advice = decide(state(), attribution(Category.UNKNOWN, ("node2",)), POLICY, OBSERVE)
        assert advice.kind == AdviceKind.REQUEUE and advice.nodes == []

    def test_histories_from_before_the_calibration_keep_their_requeue(self) -> None:
        old = decide(state(), never_started(("gx-d04",)), POLICY, OBSERVE, calibrated=False)
        assert old.kind == AdviceKind.REQUEUE

    @settings(max_examples=100)
    @given(st.lists(st.tuples(attributions, st.integers(-1, 200)), max_size=6))
    def test_budgets_still_bound_the_exclusions(self, history: list) -> None:  # type: ignore[type-arg]
        # Whatever came before, a repeated never-started node spends the failure budget like
        # any retried cause: it cannot requeue for ever.
        s = state()
        for attr, progress in history:
            advice = decide(s, attr, POLICY, OBSERVE)
            if advice.kind == AdviceKind.STOP:
                return
            s = apply_advice(s, advice)
            if advice.kind != AdviceKind.NONE:
                next_attempt(s, progress)
        for _ in range(POLICY.max_attempts + 1):
            advice = decide(s, never_started(("gx-d04",)), POLICY, OBSERVE)
            if advice.kind == AdviceKind.STOP:
                return
            s = apply_advice(s, advice)
            next_attempt(s, -1)
        raise AssertionError("a never-started node was requeued past every budget")


def no_retry_helps(nodes: tuple[str, ...] = ()) -> Attribution:
    from resurgo.attribute.analysis import fingerprint
    from resurgo.policy.decide import NO_RETRY_HELPS_KEY

    return Attribution(
        kind=AnomalyKind.CRASH,
        category=Category.SYSTEM_SOFTWARE,
        culprit_nodes=list(nodes),
        confidence=0.85,
        fingerprint=fingerprint(Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY),
        summary="CUDA driver version is insufficient for CUDA runtime version (every rank)",
    )


class TestSiteFaultThatRecurs:
    """attribution-labels.md tie-breaker 6: site software broken on every node of the job
    leaves nothing to exclude and no retry can help: stop (and so does a full quota)."""

    def test_stops_on_its_first_occurrence_even_with_every_node_named(self) -> None:
        for nodes in [(), ("g041", "g042", "g043")]:
            advice = decide(state(), no_retry_helps(nodes), POLICY, OBSERVE)
            assert advice.kind == AdviceKind.STOP and advice.rule == "site_fault_recurs"
            assert advice_steps(advice) == ["cancel"]

    def test_other_system_software_faults_are_still_retried_or_excluded(self) -> None:
        shared = decide(state(), attribution(Category.SYSTEM_SOFTWARE), POLICY, OBSERVE)
        node = decide(state(), attribution(Category.SYSTEM_SOFTWARE, ("g041",)), POLICY, OBSERVE)
        assert (shared.kind, node.kind) == (AdviceKind.REQUEUE, AdviceKind.REQUEUE_EXCLUDING)

    def test_histories_from_before_the_calibration_keep_their_decisions(self) -> None:
        old = decide(state(), no_retry_helps(("g041", "g042")), POLICY, OBSERVE, calibrated=False)
        assert old.kind == AdviceKind.REQUEUE_EXCLUDING
