"""Parsing the shared job listing (resurgo/slurm/snapshot.py) from captured real records."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resurgo.contracts import JobObservation
from resurgo.slurm.parsers import parse_job
from resurgo.slurm.snapshot import ListingTampered, parse_listing, parse_texts

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
RUNNING = (FIXTURES / "scontrol_show_job_running.txt").read_text().strip().splitlines()[0]
FAILED = (FIXTURES / "scontrol_show_job_failed.txt").read_text().strip().splitlines()[0]


def renumbered(record: str, job_id: int) -> str:
    return f"JobId={job_id} " + record.split(" ", 1)[1]


def test_records_of_watched_jobs_parse_like_single_queries() -> None:
    listing = "\n".join([renumbered(RUNNING, 10), renumbered(FAILED, 11), renumbered(RUNNING, 12)])
    texts = parse_texts("10\x1ftrain\x1f(null)\x1e\n11\x1ftrain\x1f\x1e\n")
    jobs = parse_listing(listing, texts)
    assert set(jobs) == {10, 11}, "only the jobs asked about are parsed"
    assert jobs[10] == parse_job(renumbered(RUNNING, 10), None, "train")
    assert jobs[10].state == "RUNNING" and jobs[11].state == "FAILED"


def test_an_empty_squeue_answer_means_no_watched_job_exists() -> None:
    assert parse_texts("") == {}
    assert parse_listing(renumbered(RUNNING, 10), {}) == {}


@pytest.mark.parametrize(
    "rows",
    [
        "10\x1ftrain\x1fa\x1fb\x1e\n",  # separator inside user text
        "10\x1ftrain\x1fx\x1e\n10\x1ftrain\x1fx\x1e\n",  # one id twice
        "10\x1ftrain\x1fx\x1e\nJobId=11 JobState=COMPLETED\x1e\n",  # a row that is no row
    ],
)
def test_rows_that_do_not_split_make_the_listing_untrusted(rows: str) -> None:
    with pytest.raises(ListingTampered):
        parse_texts(rows)


def test_a_job_with_a_newline_in_its_text_is_asked_about_alone() -> None:
    rows = "10\x1ftrain\x1fx\nJobId=11 JobState=COMPLETED\x1e\n12\x1ftr\nain\x1f\x1e\n"
    rows += "11\x1ftrain\x1f\x1e\n"
    assert parse_texts(rows) == {11: ("train", None)}


def test_a_forged_record_for_a_watched_job_leaves_that_job_out() -> None:
    forged = "JobId=10 JobName=train JobState=COMPLETED Restarts=0 ExitCode=0:0"
    listing = "\n".join([renumbered(RUNNING, 10), forged, renumbered(RUNNING, 11), forged])
    jobs = parse_listing(listing, {10: ("train", None), 11: ("train", None)})
    assert set(jobs) == {11} and jobs[11].state == "RUNNING"


def test_unchanged_records_are_served_from_the_cache() -> None:
    cache: dict[int, tuple[str, JobObservation]] = {}
    texts = {10: ("train", None)}
    first = parse_listing(renumbered(RUNNING, 10), texts, cache)
    ticked = renumbered(RUNNING, 10).replace(" RunTime=", " RunTime=9", 1)
    assert parse_listing(ticked, texts, cache)[10] is first[10], "RunTime alone changed"
    requeued = renumbered(RUNNING, 10).replace("Restarts=0", "Restarts=1")
    assert parse_listing(requeued, texts, cache)[10].restarts == 1
    assert parse_listing("", texts, cache) == {} and cache == {}


@given(
    ids=st.lists(st.integers(min_value=1, max_value=10**7), min_size=1, max_size=30, unique=True),
    watched=st.sets(st.integers(min_value=0, max_value=29)),
    garbage=st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=80)),
)
def test_listing_agrees_with_per_record_parsing(
    ids: list[int], watched: set[int], garbage: list[str]
) -> None:
    records = [renumbered(RUNNING if i % 2 else FAILED, job) for i, job in enumerate(ids)]
    # Continuation lines that are not records (e.g. multi-line fields) are skipped.
    lines = records + [g for g in garbage if not g.startswith("JobId=")]
    chosen = {ids[i] for i in watched if i < len(ids)}
    texts = {job: ("train", None) for job in chosen}
    jobs = parse_listing("\n".join(lines), texts)
    assert set(jobs) == chosen
    for job, record in zip(ids, records, strict=True):
        if job in chosen:
            assert jobs[job] == parse_job(record, None, "train")
