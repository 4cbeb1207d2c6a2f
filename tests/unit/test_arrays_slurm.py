"""Job arrays as Slurm shows them (resurgo/slurm/arrays.py and the discovery rows), against a
real capture from this repo's Slurm 22.05 cluster: `sbatch --array=0-5%2`, tasks 0 and 1
running, then `scontrol hold <id>_[2-5]` and `scontrol update JobId=<id>_[2-5]
ExcNodeList=node3` (tests/fixtures/slurm/squeue_json_array.json, the array's records only)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resurgo.api.job_refs import SlurmRef, slurm_ref
from resurgo.array_models import ArrayActionRequest, ArrayKey, ArrayStep
from resurgo.contracts import ActionRequest, ActionStep, JobKey, JobObservation
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.arrays import (
    ArraySteps,
    array_view,
    count_tasks,
    pending_target,
    task_expression,
)
from resurgo.slurm.errors import CommandFailed, ParseError
from resurgo.slurm.hetjobs import component_ref, exclusions_by_component, whole_job
from resurgo.slurm.json_records import Listing

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "slurm" / "squeue_json_array.json"
ARRAY = 21


@pytest.fixture
def listing() -> Listing:
    return Listing(FIXTURE.read_text())


def test_the_array_as_a_whole(listing: Listing) -> None:
    view = array_view(listing, ARRAY)
    assert view.tasks_by_state == {"PENDING": 4, "RUNNING": 2}
    assert view.pending_tasks == "2-5" and view.pending_held
    assert view.pending_excluded == ["node3"]
    assert not view.finished
    assert array_view(listing, 999).finished


def test_discovery_sees_each_started_task_and_one_row_for_the_rest(listing: Listing) -> None:
    rows = sorted(listing.discovered(), key=lambda r: r.job_id)
    assert [(r.job_id, r.array_job_id, r.array_task_id, r.state) for r in rows] == [
        (21, 21, None, "PENDING"),
        (22, 21, 0, "RUNNING"),
        (23, 21, 1, "RUNNING"),
    ]
    assert rows[0].array_tasks == "2-5%2" and rows[1].array_tasks == ""
    assert all(r.het_job_id is None for r in rows)


def test_only_the_pending_tasks_are_addressed() -> None:
    assert pending_target(21, "2-5%2") == "21_[2-5]"
    assert pending_target(7, "1,3,5-9:2") == "7_[1,3,5-9:2]"
    assert count_tasks("2-5") == 4 and count_tasks("1,3,5-9:2") == 5 and count_tasks("0") == 1


@pytest.mark.parametrize(
    "hostile", ["", "2-5 ExcNodeList=", "1;rm -rf /", "1-", "a-b", "1,,2", "-1", "1]", "9" * 11]
)
def test_anything_else_never_reaches_scontrol(hostile: str) -> None:
    with pytest.raises(ParseError):
        task_expression(hostile)


@given(st.text(max_size=40))
def test_an_accepted_expression_is_digits_and_separators_only(raw: str) -> None:
    try:
        tasks = task_expression(raw)
    except ParseError:
        return
    assert tasks and set(tasks) <= set("0123456789,-:")
    assert count_tasks(tasks) >= 1 or "-" in tasks  # a descending range counts no task


# ---- heterogeneous jobs -------------------------------------------------------------------------


def part(job_id: int, nodes: list[str], excluded: tuple[str, ...] = ()) -> JobObservation:
    return JobObservation(job_id=job_id, state="RUNNING", node_list=nodes,
                          exc_node_list=list(excluded), num_nodes=len(nodes))  # fmt: skip


def test_the_leader_speaks_for_every_component() -> None:
    leader = part(70, ["node1"])
    whole = whole_job(leader, [leader, part(71, ["node3", "node4"], ("node2",))])
    assert whole.job_id == 70 and whole.node_list == ["node1", "node3", "node4"]
    assert whole.het_nodes == [["node1"], ["node3", "node4"]] and whole.num_nodes == 3
    assert whole.exc_node_list == ["node2"]
    assert whole_job(leader, [leader]) == leader


def test_a_culprit_is_excluded_on_the_component_that_ran_it() -> None:
    ran = [["node1"], ["node3", "node4"]]
    assert exclusions_by_component(["node4"], ran, 2) == {1: {"node4"}}
    assert exclusions_by_component(["node1", "node3"], ran, 2) == {0: {"node1"}, 1: {"node3"}}
    # A node no component ran: every component keeps off it.
    assert exclusions_by_component(["node9"], ran, 2) == {0: {"node9"}, 1: {"node9"}}


class HetSlurm:
    """A heterogeneous job 85 (components 85+0 on node1, 85+1 on node3 keeping off node2) in
    `squeue --json`; scontrol updates recorded."""

    def __init__(self) -> None:
        doc = json.loads(FIXTURE.read_text())
        base = {**doc["jobs"][0], "array_job_id": 0, "array_task_id": None,
                "array_task_string": "", "het_job_id": 85}  # fmt: skip
        doc["jobs"] = [
            {**base, "job_id": 85, "het_job_offset": 0, "nodes": "node1", "excluded_nodes": ""},
            {**base, "job_id": 86, "het_job_offset": 1, "nodes": "node3",
             "excluded_nodes": "node2"},
        ]  # fmt: skip
        self.text = json.dumps(doc)
        self.calls: list[tuple[str, dict[str, str]]] = []

    async def squeue_json(self, job_id: int | None = None) -> Listing:
        return Listing(self.text)

    async def update_tasks(self, target: str, **fields: str) -> None:
        self.calls.append((target, fields))


async def test_a_hetjob_exclusion_names_the_component_as_slurm_prints_it() -> None:
    """The whole job is `85` (its leader); the exclusion lands on, and its detail (audit, CLI,
    API, console) names, component `85+1`: squeue's and sacct's name for it, not `85` or `86`."""
    slurm = HetSlurm()
    assert Listing(slurm.text).observation(85).node_list == ["node1", "node3"]  # type: ignore[union-attr]
    req = ActionRequest(
        job=JobKey(cluster="c", job_id=85, submit_time=datetime(2026, 12, 5, tzinfo=UTC)),
        step=ActionStep.EXCLUDE_NODES, idempotency_key="k", attempt=1, nodes=["node3"],
        component_nodes=[["node1"], ["node3"]],
    )  # fmt: skip
    detail = await SlurmActions(slurm)._exclude_on_components(req, {"node3"})  # type: ignore[arg-type]
    assert slurm.calls == [("85+1", {"ExcNodeList": "node2,node3"})]
    assert detail == "85+1 ExcNodeList=node2,node3"
    assert component_ref(85, 1) == "85+1" and slurm_ref("85+1") == SlurmRef(85)


@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3), min_size=1, max_size=3),
    st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=4),
)
def test_every_culprit_lands_somewhere_and_only_where_it_ran(
    ran: list[list[str]], wanted: list[str]
) -> None:
    plan = exclusions_by_component(wanted, ran, len(ran))
    assert set().union(*plan.values()) == set(wanted) if wanted else plan == {}
    for offset, nodes in plan.items():
        for node in nodes:
            somewhere = any(node in r for r in ran)
            assert node in ran[offset] or not somewhere


# ---- the array-level steps against a scripted Slurm ------------------------------------------


class ScriptedSlurm:
    """`squeue --json` answers in turn (the last one repeats); scontrol calls recorded, and
    failing like scontrol does when a task started between the look and the command."""

    def __init__(self, answers: list[str], fail: bool) -> None:
        self.answers = answers
        self.fail = fail
        self.calls: list[tuple[str, ...]] = []

    async def squeue_json(self, job_id: int | None = None) -> Listing:
        text = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        return Listing(text)

    async def show_job(self, job_id: int) -> JobObservation | None:
        return (await self.squeue_json()).observation(job_id)

    async def hold_tasks(self, target: str) -> None:
        self.calls.append(("hold", target))
        if self.fail:
            raise CommandFailed(f"scontrol hold {target} exited 1: Job is no longer pending")


def unheld(text: str) -> str:
    doc = json.loads(text)
    for record in doc["jobs"]:
        if record["array_task_string"]:
            record.update(priority=4294901737, state_reason="JobArrayTaskLimit",
                          state_description="")  # fmt: skip
    return json.dumps(doc)


def hold_request() -> ArrayActionRequest:
    array = ArrayKey(cluster="c", array_job_id=ARRAY, submit_time=datetime(2026, 12, 4, tzinfo=UTC))
    return ArrayActionRequest(array=array, step=ArrayStep.HOLD_PENDING, idempotency_key="k")


@pytest.mark.parametrize("fail", [False, True])
async def test_a_hold_is_judged_by_what_slurm_shows(fail: bool) -> None:
    held = FIXTURE.read_text()
    slurm = ScriptedSlurm([unheld(held), unheld(held), held], fail)
    steps = ArraySteps(slurm, SlurmActions(slurm))  # type: ignore[arg-type]
    result = await steps.run(hold_request())
    assert slurm.calls == [("hold", f"{ARRAY}_[2-5]")]
    assert result.outcome == "applied" and result.target == f"{ARRAY}_[2-5]"


async def test_a_hold_that_did_not_happen_is_an_error() -> None:
    slurm = ScriptedSlurm([unheld(FIXTURE.read_text())], fail=True)
    steps = ArraySteps(slurm, SlurmActions(slurm))  # type: ignore[arg-type]
    with pytest.raises(CommandFailed):
        await steps.run(hold_request())


async def test_a_held_array_is_not_held_again() -> None:
    slurm = ScriptedSlurm([FIXTURE.read_text()], fail=False)
    steps = ArraySteps(slurm, SlurmActions(slurm))  # type: ignore[arg-type]
    assert (await steps.run(hold_request())).outcome == "already_satisfied"
    assert slurm.calls == []
