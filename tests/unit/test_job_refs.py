"""How the API reads a job's name: a Slurm id, an array task `<array>_<task>`, a hetjob
component `<leader>+<n>`; and the job a workflow id names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resurgo.api.core import ApiProblem, parse_job_ref
from resurgo.api.history import job_ref
from resurgo.api.job_refs import SlurmRef, parse_workflow_id, slurm_ref


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500", SlurmRef(500)),
        ("500_1", SlurmRef(500, 1)),
        ("500_0", SlurmRef(500, 0)),
        ("500+1", SlurmRef(500)),  # one workflow per hetjob: a component names its leader
        (str(2**63 - 1), SlurmRef(2**63 - 1)),
    ],
)
def test_names_people_use(text: str, expected: SlurmRef) -> None:
    assert parse_job_ref(text) == expected
    if expected.task_id is not None:
        assert str(expected) == text


@pytest.mark.parametrize(
    "text",
    ["", "_1", "500_", "500__1", "500_1_2", "500-1", " 500", "500\n", "1_2;rm -rf /", "0x1f",
     "\uff11\uff12", "5e3", str(2**63), "500_" + str(2**32), "1" * 20, "500_1+2"],
)  # fmt: skip
def test_anything_else_is_a_422(text: str) -> None:
    assert slurm_ref(text) is None
    with pytest.raises(ApiProblem) as err:
        parse_job_ref(text)
    assert err.value.status == 422


@given(st.text(max_size=40))
def test_parsing_never_raises_anything_but_a_refusal(text: str) -> None:
    ref = slurm_ref(text)
    if ref is not None:
        assert text.split("+")[0] == str(ref) or text.startswith(f"{ref.job_id}+")


def test_workflow_ids() -> None:
    assert parse_workflow_id("resurgo:dev:500_1:1764849600") == ("dev", SlurmRef(500, 1))
    assert parse_workflow_id("resurgo:dev:42:1764849600") == ("dev", SlurmRef(42))
    # Colons in a cluster name stay with the cluster.
    assert parse_workflow_id("resurgo:a:b:7_3:1") == ("a:b", SlurmRef(7, 3))
    for other in ["resurgo:dev:array:500", "temporal:dev:1:1",
                  "resurgo:dev:500+1:1", "resurgo:dev:x_1:1"]:  # fmt: skip
        assert parse_workflow_id(other) is None, other


def test_job_ref_names_array_tasks() -> None:
    ref = job_ref("dev", 503, "resurgo:dev:500_2:1764849600")
    assert (ref.name, ref.job_id, ref.array_job_id, ref.array_task_id) == ("500_2", 503, 500, 2)
    plain = job_ref("dev", 42, "resurgo:dev:42:1764849600")
    assert (plain.name, plain.array_job_id, plain.array_task_id) == ("42", None, None)
