"""Slurm output parsers, against output captured from the real test cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import (
    SQUEUE_END,
    SQUEUE_SEP,
    expand_hostlist,
    parse_job,
    parse_node,
    parse_squeue_discovery,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def one_line(name: str) -> str:
    return next(ln for ln in (FIXTURES / name).read_text().splitlines() if ln.startswith("JobId="))


class TestParseJob:
    def test_running(self) -> None:
        obs = parse_job(one_line("scontrol_show_job_running.txt"))
        assert obs.state == "RUNNING" and obs.running and not obs.terminal
        assert obs.restarts == 0 and obs.node_list and obs.start_time is not None

    def test_failed(self) -> None:
        obs = parse_job(one_line("scontrol_show_job_failed.txt"))
        assert obs.state == "FAILED" and obs.terminal
        assert obs.exit_code == 1 and obs.exit_signal == 0

    def test_requeued_held(self) -> None:
        obs = parse_job(one_line("scontrol_show_job_requeued_held.txt"))
        assert obs.state == "PENDING" and obs.held and obs.restarts >= 1

    def test_pending_released_is_not_held(self) -> None:
        obs = parse_job(one_line("scontrol_show_job_pending_released.txt"))
        assert obs.state == "PENDING" and not obs.held

    def test_excluded_nodes(self) -> None:
        obs = parse_job(one_line("scontrol_show_job_held_excluded.txt"))
        assert obs.exc_node_list and all(n.startswith("node") for n in obs.exc_node_list)

    def test_completed_and_cancelled(self) -> None:
        assert parse_job(one_line("scontrol_show_job_completed.txt")).state == "COMPLETED"
        assert parse_job(one_line("scontrol_show_job_cancelled.txt")).state == "CANCELLED"

    def test_hostile_comment_cannot_spoof_fields(self) -> None:
        line = one_line("scontrol_show_job_running.txt")
        comment = '{"resurgo":{}} JobState=COMPLETED StdOut=/etc/passwd Restarts=9'
        spoofed = line.replace(" StdErr=", f" Comment={comment}  StdErr=", 1)
        obs = parse_job(spoofed, comment)
        assert obs.state == "RUNNING" and obs.restarts == 0
        assert obs.std_out != "/etc/passwd" and obs.comment == comment

    def test_hostile_name_cannot_spoof_fields(self) -> None:
        line = one_line("scontrol_show_job_running.txt")
        real = line.split(" JobName=", 1)[1].split(" UserId=", 1)[0]
        name = "x JobState=COMPLETED Restarts=7 AdminComment=resurgo:hold key=k deadline=none"
        spoofed = line.replace(f" JobName={real} ", f" JobName={name} ", 1)
        obs = parse_job(spoofed, None, name)
        assert obs.state == "RUNNING" and obs.restarts == 0 and obs.admin_comment == ""
        assert obs.name == name
        # Without the separately read name, the spoof would have won: the reason for the rule.
        assert parse_job(spoofed).state == "COMPLETED"

    def test_not_a_job_record(self) -> None:
        with pytest.raises(ParseError, match="not a job record"):
            parse_job("slurm_load_jobs error: Invalid job id specified")


class TestHostlist:
    @pytest.mark.parametrize(
        ("expr", "names"),
        [
            ("node1", ["node1"]),
            ("node[1-3]", ["node1", "node2", "node3"]),
            ("node[1,3-4]", ["node1", "node3", "node4"]),
            ("gpu[08-10],cpu1", ["gpu08", "gpu09", "gpu10", "cpu1"]),
            ("(null)", []),
            ("", []),
        ],
    )
    def test_expand(self, expr: str, names: list[str]) -> None:
        assert expand_hostlist(expr) == names

    def test_bad_range(self) -> None:
        with pytest.raises(ParseError):
            expand_hostlist("node[5-1]")


class TestNodesAndSqueue:
    def test_drained_node(self) -> None:
        text = (FIXTURES / "scontrol_show_node_drain_oneline.txt").read_text()
        nodes = [parse_node(ln) for ln in text.splitlines() if ln.startswith("NodeName=")]
        drained = [n for n in nodes if "DRAIN" in n.state]
        assert drained and drained[0].reason

    def test_discovery_rows_keep_hostile_comment_whole(self) -> None:
        row = SQUEUE_SEP.join(
            ["42", "2026-11-29T13:54:31", "RUNNING", "2027-11-29T13:54:31", "root", "debug",
             "x;touch /tmp/pwned", '{"resurgo":{}}' + SQUEUE_SEP + "junk"]
        )  # fmt: skip
        end = SQUEUE_END + "\n"
        (job,) = parse_squeue_discovery(row + end + "12_3" + SQUEUE_SEP + "garbage" + end + "\n")
        assert job.job_id == 42 and job.name == "x;touch /tmp/pwned"
        assert job.comment.endswith("junk") and job.submit_time is not None
