"""The health-check contract and the pure decisions of validated return to service."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from resurgo.nodes.health_check import (
    MAX_REASON,
    check_job_name,
    check_verdict,
    drain_reason,
    failed_reason,
    ours,
    repaired_in_slurm,
    reservation_name,
)

KEY = "resurgo-node:c1:node3"


def test_exit_zero_of_a_completed_job_passes_and_keeps_the_report() -> None:
    out = "warming up\nRESURGO-CHECK ok node3: all-reduce in 2.1s\ndone\n"
    result = check_verdict(job_id=9, state="COMPLETED", exit_code=0, exit_signal=0, output=out)
    assert result.passed and result.report == ["ok node3: all-reduce in 2.1s"]
    assert result.tail == ["warming up", "RESURGO-CHECK ok node3: all-reduce in 2.1s", "done"]
    assert "passed" in result.summary and "job 9" in result.summary


def test_every_other_end_fails_with_the_reason_the_check_gave() -> None:
    fail_line = "RESURGO-CHECK FAIL dcgmi diag: GPU 2 memory test failed\n"
    cases = [
        ("FAILED", 1, 0, fail_line, "GPU 2 memory test failed"),
        ("COMPLETED", 0, 0, fail_line, "GPU 2 memory test failed"),  # said FAIL: fails
        ("TIMEOUT", 0, 15, "", "TIMEOUT exit 0:15"),
        ("NODE_FAIL", 0, 0, "", "NODE_FAIL"),
        ("COMPLETED", 0, 9, "", "COMPLETED exit 0:9"),
        ("FAILED", 3, 0, "RESURGO-CHECK ib port 1 down\n", "ib port 1 down"),
    ]
    for state, code, sig, out, why in cases:
        result = check_verdict(job_id=4, state=state, exit_code=code, exit_signal=sig, output=out)
        assert not result.passed, (state, code, sig, out)
        assert why in result.summary, (why, result.summary)


def test_reasons_name_resurgo_and_the_key_and_fit_slurm() -> None:
    reason = failed_reason(KEY, "check job 4 failed (FAILED exit 1:0): " + "x" * 400)
    assert reason.startswith("resurgo") and KEY in reason and len(reason) <= MAX_REASON
    assert ours(reason, KEY) and not ours(reason, "resurgo-node:c1:node4")
    drain = drain_reason(
        KEY, "resurgo lemon: node3 blamed for failures of 3 jobs in 24h (jobs 1,2,3)"
    )
    assert drain.startswith(f"resurgo {KEY} lemon: node3") and "1,2,3" in drain
    assert ours(drain, KEY)


def test_slurm_shows_a_repair_when_an_operator_replaced_our_reason() -> None:
    assert repaired_in_slurm("IDLE+DRAIN", "repaired: new PSU [root@2026-12-04T10:00:00]", KEY)
    assert repaired_in_slurm("IDLE+DRAIN", f"resurgo {KEY} lemon: ...", KEY) is None
    assert repaired_in_slurm("IDLE", "", KEY) is None
    assert repaired_in_slurm("DOWN+DRAIN", "", KEY) is None


@given(st.text(max_size=300), st.integers(min_value=0, max_value=10**6))
def test_names_are_safe_for_slurm_whatever_the_input(node: str, round_: int) -> None:
    res = reservation_name(node)
    assert res.startswith("resurgo_check_")
    assert all(ch.isalnum() or ch in "_.-" for ch in res if ch.isascii()) and res.isascii()
    name = check_job_name(f"resurgo-node:c:{node}", round_)
    assert name.startswith("resurgo-check-") and len(name) == len("resurgo-check-") + 16
    assert name != check_job_name(f"resurgo-node:c:{node}", round_ + 1)


@given(st.text(max_size=5000))
def test_any_output_gives_a_bounded_printable_result(output: str) -> None:
    result = check_verdict(job_id=1, state="COMPLETED", exit_code=0, exit_signal=0, output=output)
    assert len(result.report) <= 10 and len(result.tail) <= 20
    assert all(line.isprintable() and len(line) <= 300 for line in result.report + result.tail)
    said_fail = any(
        ln.startswith("RESURGO-CHECK ") and ln[14:].upper().startswith("FAIL")
        for ln in output.splitlines()
    )
    assert result.passed is not said_fail
