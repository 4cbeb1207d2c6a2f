"""The array coordinator's pure decision (resurgo/policy/arrays.py): exhaustively over small
arrays against a plain restatement of the rules, and as properties with hypothesis."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.array_models import ArrayVerdict, TaskFailure
from resurgo.contracts import Advice, AdviceKind, Category, PolicyConfig
from resurgo.policy import arrays
from resurgo.policy.array_settings import ArrayPolicy

APP = Category.APPLICATION


def failure(
    task: int,
    fp: str = "application:keyerror",
    node: str | None = "n1",
    *,
    category: Category = APP,
    culprits: Sequence[str] = (),
    attempt: int = 0,
) -> TaskFailure:
    return TaskFailure(
        task_id=task, job_id=100 + task, attempt=attempt, fingerprint=fp, category=category,
        culprit_nodes=list(culprits), nodes=[node] if node else [], workflow_id=f"wf-{task}",
    )  # fmt: skip


def rules(systematic: int = 3, node: int = 3, cap: int = 2, hold: bool = True) -> PolicyConfig:
    return PolicyConfig(
        max_nodes_excluded_per_job=cap,
        arrays=ArrayPolicy(systematic_failures=systematic, node_failures=node, hold_pending=hold),
    )  # fmt: skip


# ---- the user-visible scenarios of the issue ---------------------------------------------------


def test_the_same_bug_in_three_tasks_on_different_nodes_is_systematic() -> None:
    found = [failure(0, node="n1"), failure(1, node="n2")]
    assert arrays.assess(found, rules()).systematic == []
    found.append(failure(2, node="n3"))
    result = arrays.assess(found, rules())
    assert [s.fingerprint for s in result.systematic] == ["application:keyerror"]
    assert result.systematic[0].tasks == [0, 1, 2] and result.hold_pending
    # A systematic bug blames no node.
    assert result.exclude == []
    answer = arrays.verdict(result, found[2])
    assert (
        answer.systematic and "3 tasks" in answer.reason and answer.key == "0:application:keyerror"
    )


def test_one_task_failing_again_and_again_is_not_the_arrays_problem() -> None:
    found = [failure(4, node=f"n{a}", attempt=a) for a in range(5)]
    assert arrays.assess(found, rules()).systematic == []


def test_the_same_error_only_ever_on_one_node_blames_the_node() -> None:
    found = [failure(t, "system_software:enospc", "n3", category=Category.SYSTEM_SOFTWARE)
             for t in range(3)]  # fmt: skip
    result = arrays.assess(found, rules())
    assert result.systematic == []
    assert [(f.node, f.tasks) for f in result.exclude] == [("n3", [0, 1, 2])]
    assert not result.hold_pending


def test_a_node_failing_three_different_tasks_is_excluded() -> None:
    hw = Category.HARDWARE_GPU
    found = [failure(t, f"hardware_gpu:xid79:{t}", "n2", category=hw, culprits=["n2"])
             for t in (1, 5)]  # fmt: skip
    assert arrays.assess(found, rules()).exclude == []
    found.append(failure(7, "hardware_gpu:ecc", "n2", category=hw, culprits=["n2"]))
    result = arrays.assess(found, rules())
    assert [(f.node, f.tasks) for f in result.exclude] == [("n2", [1, 5, 7])]
    assert arrays.verdict(result, found[0]).array_excluded_nodes == ["n2"]
    # Hardware faults are never "systematic": they are the node's.
    assert result.systematic == []


def test_scheduler_outcomes_and_attribution_failures_count_for_nothing() -> None:
    found = [failure(t, "scheduler:preempted", f"n{t}", category=Category.SCHEDULER)
             for t in range(5)]  # fmt: skip
    found += [failure(t, "unknown:attribution-failed", "n9", category=Category.UNKNOWN)
              for t in range(5)]  # fmt: skip
    result = arrays.assess(found, rules())
    assert result.systematic == [] and [f.node for f in result.exclude] == ["n9"]


def test_thresholds_of_zero_turn_the_rules_off() -> None:
    found = [failure(t, node=f"n{t % 2}") for t in range(10)]
    assert arrays.assess(found, rules(systematic=0, node=0)) == arrays.assess([], rules())


def test_no_hold_when_the_policy_says_so() -> None:
    found = [failure(t, node=f"n{t}") for t in range(3)]
    result = arrays.assess(found, rules(hold=False))
    assert result.systematic and not result.hold_pending


def test_exclusions_stop_at_the_cap_and_say_so() -> None:
    hw = Category.HARDWARE_HOST
    found = [failure(t, f"hw:{n}", n, category=hw, culprits=[n])
             for n in ("a", "b", "c") for t in range(3 if n != "a" else 4)]  # fmt: skip
    result = arrays.assess(found, rules(cap=2))
    assert [f.node for f in result.exclude] == ["a", "b"]  # most tasks first, then by name
    assert [f.node for f in result.over_cap] == ["c"]
    # A node the pending tasks already exclude stays, and counts against the cap.
    again = arrays.assess(found, rules(cap=2), already_excluded=["c"])
    assert [f.node for f in again.exclude] == ["a", "c"] and [f.node for f in again.over_cap] == [
        "b"
    ]


@pytest.mark.parametrize("kind", list(AdviceKind))
@pytest.mark.parametrize("systematic", [True, False])
def test_a_systematic_verdict_turns_retries_into_a_stop(kind: AdviceKind, systematic: bool) -> None:
    advice = Advice(generation=3, attempt=1, kind=kind, nodes=["n2"], reason="task's own",
                    rule="retry_within_budget", fingerprint="application:x")  # fmt: skip
    answer = ArrayVerdict(key="1:application:x", systematic=systematic, reason="array says so")
    after = arrays.apply_verdict(advice, answer)
    retries = kind in (AdviceKind.REQUEUE, AdviceKind.REQUEUE_EXCLUDING)
    if systematic and retries:
        assert (after.kind, after.rule, after.reason) == (AdviceKind.STOP, "array_systematic",
                                                          "array says so")  # fmt: skip
        assert after.nodes == [] and after.generation == 3
    else:
        assert after == advice
    assert arrays.apply_verdict(advice, None) == advice


def test_a_repeated_report_is_recorded_once() -> None:
    one = failure(2)
    once = arrays.record_failure([], one)
    assert arrays.record_failure(once, one) == once == [one]
    assert len(arrays.record_failure(once, failure(2, attempt=1))) == 2


# ---- exhaustive: every set of failures over a small array ----------------------------------------

SHAPES = [
    (task, fp, node) for task in range(3) for fp in ("app:a", "app:b") for node in ("n1", "n2")
]


def oracle_systematic(found: Sequence[tuple[int, str, str]], threshold: int) -> set[str]:
    """The rule restated: >= threshold distinct tasks, on more than one node."""
    out = set()
    for fp in {f for _, f, _ in found}:
        tasks = {t for t, f, _ in found if f == fp}
        nodes = {n for _, f, n in found if f == fp}
        if threshold > 0 and len(tasks) >= threshold and len(nodes) > 1:
            out.add(fp)
    return out


def oracle_nodes(found: Sequence[tuple[int, str, str]], threshold: int, sys: set[str]) -> set[str]:
    """Single-node tasks without a culprit implicate their node unless the cause is systematic."""
    if threshold <= 0:
        return set()
    return {
        node
        for node in {n for _, _, n in found}
        if len({t for t, f, n in found if n == node and f not in sys}) >= threshold
    }


def test_every_set_of_failures_of_a_three_task_array() -> None:
    checked = 0
    for size in range(len(SHAPES) + 1):
        for combo in itertools.combinations(SHAPES, size):
            failures = [failure(t, fp, n) for t, fp, n in combo]
            for threshold in (1, 2, 3):
                result = arrays.assess(failures, rules(systematic=threshold, node=threshold, cap=9))
                want = oracle_systematic(combo, threshold)
                assert {s.fingerprint for s in result.systematic} == want, (combo, threshold)
                assert {f.node for f in result.exclude} == oracle_nodes(combo, threshold, want)
                assert result.hold_pending == bool(want)
                for one in failures:
                    assert arrays.verdict(result, one).systematic == (one.fingerprint in want)
                checked += 1
    assert checked == 3 * 2 ** len(SHAPES)


# ---- properties ------------------------------------------------------------------------------

failures_st = st.lists(
    st.builds(
        failure,
        task=st.integers(0, 6),
        fp=st.sampled_from(["app:a", "app:b", "sys:c", "hw:d", ""]),
        node=st.sampled_from(["n1", "n2", "n3", None]),
        category=st.sampled_from(list(Category)),
        culprits=st.lists(st.sampled_from(["n1", "n2", "n4"]), max_size=2),
        attempt=st.integers(0, 2),
    ),
    max_size=25,
)
policy_st = st.builds(
    rules, systematic=st.integers(0, 4), node=st.integers(0, 4), cap=st.integers(0, 3),
    hold=st.booleans(),
)  # fmt: skip


def _shape(result: object) -> object:
    assert hasattr(result, "systematic")
    return (
        {(s.fingerprint, tuple(s.tasks), tuple(s.nodes)) for s in result.systematic},
        [f.node for f in result.exclude],  # type: ignore[attr-defined]
        result.hold_pending,  # type: ignore[attr-defined]
    )


@settings(max_examples=150, deadline=None)
@given(failures_st, policy_st, st.randoms(use_true_random=False))
def test_the_order_of_reports_does_not_matter(
    found: list[TaskFailure], policy: PolicyConfig, rnd: object
) -> None:
    shuffled = list(found)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert _shape(arrays.assess(found, policy)) == _shape(arrays.assess(shuffled, policy))


@settings(max_examples=150, deadline=None)
@given(failures_st, policy_st)
def test_findings_always_meet_the_thresholds(
    found: list[TaskFailure], policy: PolicyConfig
) -> None:
    result = arrays.assess(found, policy)
    for finding in result.systematic:
        assert policy.arrays.systematic_failures > 0
        assert len(set(finding.tasks)) >= policy.arrays.systematic_failures
        group = [f for f in found if f.fingerprint == finding.fingerprint]
        assert not arrays.on_one_node(group)
        assert finding.category in arrays.SYSTEMATIC_CATEGORIES
    assert len(result.exclude) <= max(policy.max_nodes_excluded_per_job, 0)
    for node in [*result.exclude, *result.over_cap]:
        assert policy.arrays.node_failures > 0 and len(node.tasks) >= policy.arrays.node_failures
    assert result.hold_pending == (bool(result.systematic) and policy.arrays.hold_pending)


@settings(max_examples=150, deadline=None)
@given(failures_st, policy_st)
def test_a_retried_report_changes_nothing(found: list[TaskFailure], policy: PolicyConfig) -> None:
    recorded: list[TaskFailure] = []
    for one in found:
        recorded = arrays.record_failure(recorded, one)
    # Every report delivered again (a retried signal, a replayed task): nothing changes.
    again = list(recorded)
    for one in found:
        again = arrays.record_failure(again, one)
    assert again == recorded
    assert _shape(arrays.assess(again, policy)) == _shape(arrays.assess(recorded, policy))


@settings(max_examples=150, deadline=None)
@given(failures_st, failures_st, policy_st)
def test_more_failures_never_unmake_a_systematic_finding(
    first: list[TaskFailure], more: list[TaskFailure], policy: PolicyConfig
) -> None:
    before = {s.fingerprint for s in arrays.assess(first, policy).systematic}
    after = {s.fingerprint for s in arrays.assess(first + more, policy).systematic}
    assert before <= after
