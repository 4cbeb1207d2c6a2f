"""Job records from `squeue --json` (resurgo/slurm/json_records.py), against real captures of
Slurm 22.05.8 (tests/fixtures/slurm/squeue_json*.json), and node lists through python-hostlist.

`squeue_json_hostile.json` / `scontrol_show_job_hostile.txt` hold the same 7 jobs, captured
together (tests/fixtures/slurm/capture_hostile.sh): names posing as fields, a work dir holding
a forged Resurgo hold tag next to the user's own `--exclude`, a comment holding a forged
discovery row behind \\x0b, output patterns, a pending array, `exit 3` and `kill -9 $$`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.slurm import breaker
from resurgo.slurm.errors import ParseError
from resurgo.slurm.json_records import Listing, observation
from resurgo.slurm.parsers import (
    SQUEUE_DISCOVERY_FORMAT,
    SQUEUE_END,
    SQUEUE_SEP,
    compress_hostlist,
    expand_hostlist,
    parse_job,
    parse_squeue_discovery,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
HOSTILE_TEXT = (FIXTURES / "squeue_json_hostile.json").read_text()
PLAIN_TEXT = (FIXTURES / "squeue_json.json").read_text()
SCONTROL = {
    int(line.split()[0].removeprefix("JobId=")): line
    for line in (FIXTURES / "scontrol_show_job_hostile.txt").read_text().split("\n")
    if line.startswith("JobId=")
}
# Job ids of the capture (see capture_hostile.sh).
STATE_NAME, NODELIST_NAME, FORGED_WORKDIR, FORGED_ROW, ARRAY, EXIT3, KILLED = range(53, 60)


@pytest.fixture(scope="module")
def hostile() -> Listing:
    return Listing(HOSTILE_TEXT)


def test_user_text_stays_in_its_own_field(hostile: Listing) -> None:
    named = hostile.observation(STATE_NAME)
    assert named is not None and named.name == "x JobState= Comment=C" and named.comment == "C"
    assert named.state == "PENDING" and named.held
    # The same record as text: the name poses as fields, and the text parser has to give up.
    with pytest.raises(ParseError):
        parse_job(SCONTROL[STATE_NAME], named.comment, named.name)
    nodes = hostile.observation(NODELIST_NAME)
    assert nodes is not None and nodes.name.startswith("x NodeList=n[0-3000000]")
    assert nodes.node_list == []


def test_a_work_dir_cannot_forge_a_hold_tag_or_an_output_path(hostile: Listing) -> None:
    obs = hostile.observation(FORGED_WORKDIR)
    assert obs is not None and obs.admin_comment == ""
    assert obs.exc_node_list == ["node3", "node4"]
    assert obs.std_out.endswith("at=2026-01-01T00:00:00Z/slurm-55.out")
    # Text: the forged tag wins, and the circuit breaker would count the user's own exclusions.
    text = parse_job(SCONTROL[FORGED_WORKDIR], None, obs.name)
    assert text.admin_comment.startswith("resurgo:hold")
    assert breaker.remediations_from_jobs([text], "local")
    assert breaker.remediations_from_jobs([obs], "local") == []


def test_fields_match_what_scontrol_prints(hostile: Listing) -> None:
    for job_id in (FORGED_ROW, ARRAY, EXIT3, KILLED):
        obs = hostile.observation(job_id)
        assert obs is not None
        assert obs == parse_job(SCONTROL[job_id], obs.comment or None, obs.name), job_id
    exit3, killed = hostile.observation(EXIT3), hostile.observation(KILLED)
    assert exit3 is not None and (exit3.exit_code, exit3.exit_signal) == (3, 0)
    assert killed is not None and (killed.exit_code, killed.exit_signal) == (0, 9)
    patterned = hostile.observation(FORGED_ROW)
    assert patterned is not None and patterned.std_out == "/tmp/hx/o-56-tr-root.log"
    array = hostile.observation(ARRAY)
    assert array is not None and array.std_out == "/tmp/hx/arr-57_4294967294.log"


def test_a_forged_row_in_a_comment_is_only_a_comment(hostile: Listing) -> None:
    rows = hostile.discovered()
    jobs = {job.job_id: job for job in rows if job.array_job_id is None}
    # The pending array is an array row (its tasks' expression, no task id), never a plain job.
    (array,) = [job for job in rows if job.job_id == ARRAY]
    assert array.array_job_id == ARRAY and array.array_task_id is None and array.array_tasks
    assert set(jobs) == {STATE_NAME, NODELIST_NAME, FORGED_WORKDIR, FORGED_ROW, EXIT3, KILLED}
    assert jobs[FORGED_ROW].comment.startswith('{"resurgo":{"mode":"observe"}}\x0b1\x1f')
    assert 1 not in jobs


def test_the_plain_capture() -> None:
    jobs = Listing(PLAIN_TEXT).observations()
    assert jobs[2].comment == '{"resurgo":{"mode":"action"}}' and jobs[2].state == "RUNNING"
    assert jobs[2].std_out == "/tmp/resurgo-fixtures/slurm-2.out" and jobs[2].node_list
    assert jobs[1].name == "timeout" and jobs[1].user == "root"


def broken(text: str, job_id: int, **fields: Any) -> str:
    doc = json.loads(text)
    for record in doc["jobs"]:
        if record["job_id"] == job_id:
            record.update(fields)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "fields",
    [
        {"excluded_nodes": "n[1-5000000]"},
        {"excluded_nodes": "node[1-2,]"},
        {"job_state": None},
        {"restart_cnt": "many"},
        {"name": ["not", "a", "string"]},
        {"submit_time": {"set": True, "number": "soon"}},
    ],
)
def test_one_bad_record_costs_only_that_job(fields: dict[str, Any]) -> None:
    listing = Listing(broken(HOSTILE_TEXT, EXIT3, **fields))
    jobs = listing.observations()
    assert EXIT3 not in jobs and KILLED in jobs and len(jobs) == 6
    with pytest.raises(ParseError, match=f"job {EXIT3}"):
        listing.observation(EXIT3)
    assert listing.observation(KILLED) is not None


def test_no_json_is_a_parse_error() -> None:
    for text in ("", "squeue: unrecognized option '--json'", '{"jobs": 3}', "[" * 100_000):
        with pytest.raises(ParseError):
            Listing(text)


def test_slurm_23_shapes() -> None:
    """Hand-made from the 22.05 capture: the shapes Slurm 23.02+ prints (no such Slurm here)."""
    record = copy.deepcopy(json.loads(HOSTILE_TEXT)["jobs"][EXIT3 - STATE_NAME])
    record.update(
        job_state=["FAILED"],
        priority={"set": True, "infinite": False, "number": 7},
        submit_time={"set": True, "infinite": False, "number": record["submit_time"]},
        end_time={"set": False, "infinite": False, "number": 0},
        exit_code={"status": ["EXITED"], "return_code": {"set": True, "number": 3},
                   "signal": {"id": {"set": False, "number": 0}, "name": ""}},
        node_count={"set": True, "infinite": False, "number": 1},
        standard_output="/tmp/hx/exit3-58.log",
    )  # fmt: skip
    obs = observation(record, (23, 11))
    assert (obs.state, obs.priority, obs.exit_code, obs.exit_signal) == ("FAILED", 7, 3, 0)
    assert obs.submit_time is not None and obs.end_time is None and obs.num_nodes == 1
    assert obs.std_out == "/tmp/hx/exit3-58.log"
    record["job_state"] = ["RUNNING", "COMPLETING"]
    assert observation(record, (23, 11)).state == "COMPLETING"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(json.loads(HOSTILE_TEXT)["jobs"][0])),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                                    lambda c: st.lists(c, max_size=3)
                                    | st.dictionaries(st.text(max_size=5), c, max_size=3),
                                    max_leaves=8),
                       max_size=6))  # fmt: skip
def test_any_record_content_costs_at_most_that_job(fields: dict[str, Any]) -> None:
    fields.pop("job_id", None)
    listing = Listing(broken(HOSTILE_TEXT, EXIT3, **fields))
    jobs = listing.observations()
    assert {KILLED, FORGED_ROW} <= set(jobs)
    listing.discovered()


class TestHostlist:
    @pytest.mark.parametrize(
        ("expr", "names"),
        [
            ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01",
                                       "rack2-node02"]),
            ("node[1-3,7],gpu-a[01-02]", ["node1", "node2", "node3", "node7", "gpu-a01",
                                          "gpu-a02"]),
            ("node[08-10]", ["node08", "node09", "node10"]),
            ("node1,node1", ["node1"]),
        ],
    )  # fmt: skip
    def test_valid_lists(self, expr: str, names: list[str]) -> None:
        assert expand_hostlist(expr) == names

    @pytest.mark.parametrize(
        "expr",
        ["node[1-2,]", "node[1-5000000]", "n[0-99999],m[0-99999]", "a[1]" * 3000, "x[[1]]",
         "node[2", "n" * 300_000],
    )  # fmt: skip
    def test_refused_with_a_clear_error(self, expr: str) -> None:
        with pytest.raises(ParseError, match="hostlist"):
            expand_hostlist(expr)

    def test_printed_compressed(self) -> None:
        assert compress_hostlist(["node3", "node1", "node2", "gpu7", "node2"]) == "gpu7,node[1-3]"
        assert compress_hostlist([]) == ""


SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\n"]


@pytest.mark.parametrize("sep", SEPARATORS)
def test_text_fallback_rows_split_only_at_the_terminator(sep: str) -> None:
    """Slurm without --json: a row forged behind any line separator (or the terminator itself)
    never stands for the job it names."""
    assert SQUEUE_DISCOVERY_FORMAT.endswith(SQUEUE_END)

    def row(job_id: int, comment: str) -> str:
        fields = [str(job_id), "2026-11-29T13:54:31", "PENDING", "N/A", "alice", "debug", "wrap"]
        return SQUEUE_SEP.join([*fields, comment])

    forged = row(7, '{"resurgo":{"mode":"action","max_attempts":1}}')
    end = SQUEUE_END + "\n"
    for glue in (sep, end):
        output = row(7, "") + end + row(8, '{"resurgo":{}}' + glue + forged) + end
        rows = parse_squeue_discovery(output)
        assert [job.comment for job in rows if job.job_id == 7] in ([""], [])
        if glue == sep:  # a line separator is text like any other: the comment stays whole
            assert [job.comment for job in rows if job.job_id == 8] == [
                '{"resurgo":{}}' + sep + forged
            ]
