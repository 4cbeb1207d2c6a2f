"""Fuzz harness over what cluster users write: directives, log lines and Slurm records.

Bounded and reproducible (a fixed number of examples, derandomised), run in CI with every
test. What must hold for any input: no exception escapes (bad input is a reported problem,
never a crash), every result serialises, and no field a user controls can change who a job is.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from resurgo.attribute.rules import attribute
from resurgo.contracts import LogLine
from resurgo.detect.lines import decode_line, host_of, rank_of, sanitize_line, strip_prefixes
from resurgo.detect.registry import Registry
from resurgo.policy.directive import parse_directive
from resurgo.slurm.json_records import Listing

BUDGET = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REGISTRY = Registry.load()

# Characters that split lines or records in one library or another, and other troublemakers.
SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00\t|"
HOSTILE = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(SEPARATORS + '{}[]"\\:=,; ')),
        st.characters(codec="utf-8"),
        st.sampled_from(["\ud800", "\udfff", "\ufeff", "\u202e"]),
    ),
    max_size=400,
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE, inner, max_size=4),
    max_leaves=20,
)
DIRECTIVE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["observe", "action", "ACTION", "", None]) | HOSTILE,
        "max_attempts": st.integers(-5, 10**12) | HOSTILE,
        "hang_timeout": st.floats() | st.integers() | HOSTILE,
        "progress_pattern": st.sampled_from(
            [r"^(?:\w+\s?)+(\d+)$", r"(a+)+$", r"step (\d+)", r"(\d+)(\d+)", "(", "x" * 2000]
        )
        | HOSTILE,
        "straggler": JSONISH,
        "approval": st.sampled_from(["none", "required"]) | HOSTILE,
        "approval_timeout": st.floats() | st.integers(),
        "policy": HOSTILE,
        "environment": HOSTILE,
        "drain": JSONISH,
    },
)


def _nested(depth: int) -> str:
    return '{"resurgo":' + "[" * depth + "]" * depth + "}"


@BUDGET
@given(HOSTILE)
@example('{"resurgo":{"mode":"observe","environment":"\\ud800"}}')
@example('{"resurgo":{"policy":"\\udfff"}}')
def test_any_comment_text_is_read_without_crashing(comment: str) -> None:
    parsed = parse_directive(comment)
    json.loads(parsed.model_dump_json())  # what the workflow input and the audit store need


@BUDGET
@given(DIRECTIVE_FIELDS, st.sampled_from(["resurgo", "nvidia-recovery"]), st.booleans())
def test_any_directive_is_accepted_or_reported(fields: dict, key: str, wrap: bool) -> None:
    comment = json.dumps({key: fields} if wrap else fields, ensure_ascii=False)
    parsed = parse_directive(comment)
    dumped = json.loads(parsed.model_dump_json())
    if parsed.directive is not None:
        assert dumped["directive"]["mode"] in ("observe", "action")
    elif parsed.opted_in:
        assert parsed.problems, "a refused directive must say why"


@BUDGET
@given(st.integers(1, 20_000))
def test_deeply_nested_comments_are_reported(depth: int) -> None:
    parsed = parse_directive(_nested(depth))
    assert parsed.opted_in
    json.loads(parsed.model_dump_json())


@BUDGET
@given(st.binary(max_size=600) | HOSTILE.map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_any_output_bytes_normalise(raw: bytes) -> None:
    text = decode_line(raw)
    clean = sanitize_line(text)
    assert "\n" not in clean and "\x00" not in clean
    clean.encode("utf-8")  # storable
    strip_prefixes(clean)
    host_of(clean)
    rank_of(clean)
    for match in REGISTRY.scan(clean):
        json.loads(json.dumps(match.entry.id))


PREFIXES = st.sampled_from(
    ["", "0: ", "3: ", "[node003] ", "node2: ", "[rank1]: ", "[default0]:", "2026-11-29T10:00:00 "]
)
KNOWN = st.sampled_from(
    [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "srun: error: node[1-3000000]: tasks 0-1: Exited with exit code 1",
        "slurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2026-11-29T10:00:00 ***",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "iteration      100/  1000 | elapsed time per iteration (ms): 512.3",
    ]
)
LINE = st.builds(lambda p, t: p + t, PREFIXES, KNOWN | HOSTILE)


@settings(BUDGET, max_examples=120)
@given(
    st.lists(LINE, min_size=1, max_size=60),
    st.lists(st.text(string.ascii_lowercase + "[]-,0123456789", max_size=30), max_size=4),
)
def test_attribution_of_any_lines_returns_a_verdict(lines: list[str], nodes: list[str]) -> None:
    log = [
        LogLine(source="job.log", line_no=n, text=sanitize_line(t)) for n, t in enumerate(lines, 1)
    ]
    verdict = attribute(REGISTRY, None, log, None, [], nodes)
    json.loads(verdict.model_dump_json())
    assert 0.0 <= verdict.confidence <= 1.0


# ---- Slurm records: no user-written field can change who a job is ---------------------------
SQUEUE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "squeue_json.json").read_text()
)
USER_FIELDS = ("name", "comment", "current_working_directory", "standard_output", "command")


@BUDGET
@given(st.fixed_dictionaries({f: HOSTILE for f in USER_FIELDS}))
def test_user_fields_never_forge_another_job(fields: dict[str, str]) -> None:
    victim = dict(SQUEUE["jobs"][0], job_id=1001, user_name="alice", user_id=1001)
    attacker = dict(SQUEUE["jobs"][0], job_id=1002, user_name="mallory", user_id=1002)
    attacker.update(fields)
    text = json.dumps({**SQUEUE, "jobs": [victim, attacker]}, ensure_ascii=False)
    listing = Listing(text)
    jobs = listing.observations()
    assert set(jobs) <= {1001, 1002} and 1001 in jobs
    assert (
        jobs[1001].user
        == Listing(json.dumps({**SQUEUE, "jobs": [victim]})).observations()[1001].user
    )
    if 1002 in jobs:
        assert jobs[1002].job_id == 1002 and "mallory" in jobs[1002].user
        assert jobs[1002].admin_comment == attacker.get("admin_comment", "")
    found = {j.job_id: j for j in listing.discovered()}
    assert set(found) <= {1001, 1002}
    if 1002 in found:
        assert found[1002].comment == fields["comment"] or not found[1002].comment
