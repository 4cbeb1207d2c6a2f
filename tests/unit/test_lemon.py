"""Lemon detection: K distinct jobs within the window, and nothing else, gets drain advice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.contracts import PolicyConfig
from resurgo.nodes.ledger import LedgerEntry
from resurgo.nodes.lemon import MAX_REASON, lemon_advice, lemon_reason
from resurgo.nodes.policy import NodeHealthPolicy

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = PolicyConfig(nodes=NodeHealthPolicy(lemon_failures=3, lemon_window_seconds=3600))


def failure(job: int, minutes: float, category: str = "hardware_gpu") -> LedgerEntry:
    return LedgerEntry(
        kind="failure", at=T0 + timedelta(minutes=minutes), event_id=f"{job}-{minutes}",
        job_id=job, category=category, summary=f"xid on job {job}",
    )  # fmt: skip


def mark(kind: str, minutes: float) -> LedgerEntry:
    return LedgerEntry(kind=kind, at=T0 + timedelta(minutes=minutes), event_id=f"{kind}{minutes}")


NOW = T0 + timedelta(minutes=30)


def test_three_different_jobs_get_advice_naming_the_jobs_and_resurgo() -> None:
    history = [failure(101, 0), failure(102, 5, "hardware_network"), failure(103, 10)]
    advice = lemon_advice("c1", "node3", history, POLICY, now=NOW)
    assert advice is not None
    assert advice.jobs == [101, 102, 103] and advice.failures == 3
    assert advice.reason.startswith("resurgo lemon: node3")
    assert "101,102,103" in advice.reason and "hardware_gpu,hardware_network" in advice.reason
    assert advice.first_at == T0 and advice.last_at == T0 + timedelta(minutes=10)
    assert len(advice.evidence) == 3 and "job 102" in advice.evidence[1]


def test_the_same_job_failing_three_times_is_not_a_lemon() -> None:
    history = [failure(7, 0), failure(7, 1), failure(7, 2), failure(8, 3)]
    assert lemon_advice("c1", "n", history, POLICY, now=NOW) is None


def test_failures_outside_the_window_or_in_the_future_do_not_count() -> None:
    history = [failure(1, -61), failure(2, 0), failure(3, 5), failure(4, 45)]
    assert lemon_advice("c1", "n", history, POLICY, now=NOW) is None
    assert lemon_advice("c1", "n", history, POLICY, now=T0 + timedelta(minutes=50)) is not None


def test_application_failures_are_not_the_nodes_fault() -> None:
    history = [failure(1, 0), failure(2, 1), failure(3, 2, "application")]
    assert lemon_advice("c1", "n", history, POLICY, now=NOW) is None


def test_one_advice_per_set_of_failures_and_none_while_drained() -> None:
    history = [failure(1, 0), failure(2, 1), failure(3, 2), mark("drain_advised", 3)]
    assert lemon_advice("c1", "n", history, POLICY, now=NOW) is None
    history += [failure(4, 4), failure(5, 5), failure(6, 6)]
    assert lemon_advice("c1", "n", history, POLICY, now=NOW) is not None
    assert lemon_advice("c1", "n", [*history, mark("drain", 7)], POLICY, now=NOW) is None
    resumed = [*history, mark("drain", 7), mark("resumed", 8)]
    assert lemon_advice("c1", "n", resumed, POLICY, now=NOW) is None


def test_the_reason_fits_slurm_with_many_jobs() -> None:
    jobs = list(range(10_000_000, 10_000_200))
    reason = lemon_reason("node-with-a-long-name", jobs, ["hardware_gpu", "unknown"],
                          timedelta(days=1))  # fmt: skip
    assert len(reason) <= MAX_REASON and reason.startswith("resurgo lemon:")
    assert "10000000" in reason and ",..." in reason and reason.endswith("unknown)")


entries = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=6),  # job
        st.floats(min_value=-120, max_value=60, allow_nan=False),  # minutes from T0
        st.sampled_from(["hardware_gpu", "application", "unknown", "scheduler"]),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(entries, st.integers(min_value=1, max_value=5), st.integers(min_value=1, max_value=180))
def test_advice_exactly_when_enough_distinct_jobs_failed_recently(
    raw: list[tuple[int, float, str]], k: int, window_minutes: int
) -> None:
    history = [failure(job, minutes, cat) for job, minutes, cat in raw]
    nodes = NodeHealthPolicy(lemon_failures=k, lemon_window_seconds=window_minutes * 60)
    policy = PolicyConfig(nodes=nodes)
    advice = lemon_advice("c1", "n", history, policy, now=NOW)
    start = NOW - timedelta(minutes=window_minutes)
    expected = sorted({
        e.job_id for e in history
        if e.category != "application" and start < e.at <= NOW and e.job_id is not None
    })  # fmt: skip
    if len(expected) >= k:
        assert advice is not None and advice.jobs == expected
        assert len(advice.reason) <= MAX_REASON
        assert all(start < t <= NOW for t in (advice.first_at, advice.last_at))
    else:
        assert advice is None


def test_distinct_users_can_be_required_so_one_user_cannot_drain_a_node() -> None:
    def by(user: str | None, job: int) -> LedgerEntry:
        return failure(job, job).model_copy(update={"user": user})

    policy = PolicyConfig(nodes=NodeHealthPolicy(lemon_failures=3, lemon_min_users=2))
    one_user = [by("mallory", 1), by("mallory", 2), by("mallory", 3)]
    assert lemon_advice("c1", "n", one_user, POLICY, now=NOW) is not None
    assert lemon_advice("c1", "n", one_user, policy, now=NOW) is None
    unknown = [by("mallory", 1), by(None, 2), by(None, 3)]
    assert lemon_advice("c1", "n", unknown, policy, now=NOW) is None
    two = [by("mallory", 1), by("mallory", 2), by("ann", 3)]
    assert lemon_advice("c1", "n", two, policy, now=NOW) is not None
