"""The failure pattern registry: every entry's examples and near-misses, validation, robustness."""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import copy
import json
import random
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.contracts import Category
from resurgo.detect.lines import decode_line
from resurgo.detect.literals import needs_folding, required_literals
from resurgo.detect.registry import PatternMatch, Registry, RegistryError

DATA: dict[str, Any] = json.loads(
    resources.files("resurgo.detect").joinpath("patterns.json").read_text("utf-8")
)
# The packaged registry is patterns.json plus the catalogue files beside it.
ENTRIES: list[dict[str, Any]] = DATA["patterns"] + [
    e
    for f in sorted(resources.files("resurgo.detect").iterdir(), key=lambda f: f.name)
    if f.name.startswith("catalogue_") and f.name.endswith(".json")
    for e in json.loads(f.read_text("utf-8"))["patterns"]
]
EXAMPLES = [
    pytest.param(e["id"], ex, id=f"{e['id']}-{n}")
    for e in ENTRIES
    for n, ex in enumerate(e["examples"])
]
NEAR_MISSES = [
    pytest.param(e["id"], nm, id=f"{e['id']}-{n}")
    for e in ENTRIES
    for n, nm in enumerate(e["near_misses"])
]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load()


def _minimal(**over: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "demo_error",
        "regex": r"demo failure (?P<code>\d+)",
        "kind": "crash",
        "category": "application",
        "role": "root",
        "severity": "error",
        "description": "demo",
        "examples": ["demo failure 3"],
        "near_misses": ["demo failures counted: 0"],
    }
    entry.update(over)
    return entry


def _doc(*entries: dict[str, Any], version: int = 1) -> dict[str, Any]:
    return {"version": version, "patterns": list(entries)}


# ---------------------------------------------------------------- the packaged registry
def test_packaged_registry_loads(registry: Registry) -> None:
    assert registry.version == 1
    assert 60 <= len(registry) == len(ENTRIES)
    assert Registry.default() is Registry.default()
    # every entry has a prefilter literal: nothing runs on every line
    assert registry.unfiltered_ids == ()


@pytest.mark.parametrize(("entry_id", "line"), EXAMPLES)
def test_example_matches_its_entry(registry: Registry, entry_id: str, line: str) -> None:
    matches = registry.scan(line)
    assert entry_id in {m.id for m in matches}, [m.id for m in matches]
    assert matches == registry.scan_naive(line)
    for m in matches:
        start, end = m.span
        assert 0 <= start <= end <= len(line)


@pytest.mark.parametrize(("entry_id", "line"), NEAR_MISSES)
def test_near_miss_matches_no_root_or_cascade(registry: Registry, entry_id: str, line: str) -> None:
    matches = registry.scan_naive(line)
    assert entry_id not in {m.id for m in matches}
    assert [m.id for m in matches if m.role in ("root", "cascade")] == []


@pytest.mark.parametrize(("entry_id", "line"), EXAMPLES)
def test_prefilter_is_case_safe(registry: Registry, entry_id: str, line: str) -> None:
    """Case-flipped variants give the same result with and without the prefilter."""
    rnd = random.Random(entry_id + line)
    for _ in range(3):
        flipped = "".join(c.swapcase() if rnd.random() < 0.3 else c for c in line)
        assert registry.scan(flipped) == registry.scan_naive(flipped)


def test_entries_are_consistent() -> None:
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids))
    categories = {e["category"] for e in ENTRIES}
    assert Category.NONE.value not in categories
    assert {c.value for c in Category} - {"none"} <= categories
    assert {e["kind"] for e in ENTRIES} == {"crash", "hang", "straggler"}
    assert {e["role"] for e in ENTRIES} == {"root", "cascade", "context"}


# ---------------------------------------------------------------- semantics that attribution relies on
def _ids(registry: Registry, line: str, roles: tuple[str, ...] = ("root", "cascade")) -> set[str]:
    return {m.id for m in registry.scan(line) if m.role in roles}


def _only(registry: Registry, line: str) -> PatternMatch:
    matches = [m for m in registry.scan(line) if m.role in ("root", "cascade")]
    assert len(matches) == 1, [m.id for m in matches]
    return matches[0]


@pytest.mark.parametrize(
    ("line", "category", "role"),
    [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "hardware_gpu", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.", "hardware_gpu", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, An uncorrectable double bit error", "hardware_gpu", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=python, NVLink: fatal error detected on link 1(0x0)", "hardware_gpu", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 94, pid=1, name=python, Contained: SM (0x1).", "hardware_gpu", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python, Timeout after 6s of waiting for RPC", "hardware_gpu", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics SM Warp Exception", "application", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=python, MMU Fault", "application", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 43, pid=1, name=python, Ch 00000010", "application", "root"),
        ("NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=python, Ch 00000010", "unknown", "cascade"),
        ("node1:123:456 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1234> with error 12, opcode 0, len 0, vendor err 129 (Recv)", "hardware_network", "root"),
        ("[rank1]:[E ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.", "unknown", "cascade"),
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:12345", "unknown", "cascade"),
        ("[rank1]: ValueError: learning rate must be positive", "application", "root"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "application", "root"),
        ("OSError: [Errno 28] No space left on device", "system_software", "root"),
        ("slurmstepd: error: Detected 1 oom_kill event in StepId=42.0. Some of the step tasks have been OOM Killed.", "application", "root"),
        ("slurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***", "scheduler", "root"),
        ("slurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO PREEMPTION ***", "scheduler", "root"),
        ("slurmstepd: error: *** STEP 42.0 ON node1 CANCELLED AT 2026-01-01T00:00:00 ***", "scheduler", "cascade"),
        ("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", "scheduler", "cascade"),
        ("srun: error: Node failure on node3", "hardware_host", "root"),
        ("Segmentation fault (core dumped)", "unknown", "root"),
        ("srun: error: node2: task 1: Segmentation fault", "unknown", "root"),
        ("Fatal Python error: Segmentation fault", "unknown", "root"),
    ],
)  # fmt: skip
def test_classification(registry: Registry, line: str, category: str, role: str) -> None:
    match = _only(registry, line)
    assert (match.category, match.role) == (category, role)


def test_demo_trainer_lines_are_fatal_roots(registry: Registry) -> None:
    for line in (
        "1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=31337, name=python, GPU has fallen off the bus.",
    ):
        match = _only(registry, line)
        assert (match.role, match.severity, match.category) == ("root", "fatal", "hardware_gpu")


def test_context_lines_are_context(registry: Registry) -> None:
    for line in (
        "srun: error: node2: task 1: Exited with exit code 1",
        "srun: error: node2: task 1: Killed",
        "Traceback (most recent call last):",
        "Root Cause (first observed failure):",
        "  host      : node2",
        "  rank      : 1 (local_rank: 0)",
        "  exitcode  : -9 (pid: 123)",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "RuntimeError: something nobody has a pattern for",
    ):
        matches = registry.scan(line)
        assert matches, line
        assert {m.role for m in matches} == {"context"}, (line, [m.id for m in matches])


def test_named_groups_and_spans(registry: Registry) -> None:
    line = "3: srun: error: node2: task 1: Exited with exit code 7"
    (match,) = registry.scan(line)
    assert match.groups == {"node": "node2", "tasks": "1", "exit_code": "7"}
    assert line[match.span[0] : match.span[1]].startswith("srun: error: node2")
    xid = registry.scan(
        "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    )
    assert [(m.groups["xid"], m.groups["pci"]) for m in xid] == [("79", "0000:3b:00")]
    host = [
        m for m in registry.scan("  host      : node7") if m.id == "torchelastic_root_cause_field"
    ]
    assert host[0].groups == {"node": "node7"}


def test_prefixes_are_stripped_before_anchored_patterns(registry: Registry) -> None:
    line = " 1: [rank1]: KeyError: 'weight'"
    match = next(m for m in registry.scan(line) if m.id == "python_app_exception")
    assert line[match.span[0] :].startswith("KeyError")
    assert "python_app_exception" not in _ids(registry, "logged KeyError: 'weight' and moved on")


def test_checkpoint_tags(registry: Registry) -> None:
    (match,) = [m for m in registry.scan("Failed to save checkpoint to /ckpt/iter_200") if m.tags]
    assert "checkpoint_save" in match.tags
    assert registry.get(match.id).tags == match.tags


def test_healthy_log_has_no_root_or_cascade(registry: Registry) -> None:
    healthy = [
        "node1:1234:5678 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
        "node1:1234:5678 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
        "node1:1234:5678 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
        "node1:1234:5678 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7",
        "node1:1234:5678 [0] NCCL INFO Connected all rings",
        "node1:1234:5678 [0] NCCL INFO comm 0x55d0c8e0 rank 0 nranks 8 cudaDev 0 busId 3b000 - Init COMPLETE",
        "node1:1234:5678 [0] NCCL WARN NET/Plugin: Could not find: libnccl-net.so",
        "[rank0]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters in the forward pass.",
        "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will create 16 worker processes in total.",
        "[W socket.cpp:697] [c10d] The IPv6 network addresses of (node1, 29500) cannot be retrieved (gai error: -3 - Temporary failure in name resolution).",
        "WARNING:torch.distributed.run: Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        "wandb: WARNING Serializing object of type dict that is 8 bytes",
        "> compiling and loading fused kernels ...",
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 124439808",
        "ECC errors: 0",
        "Volatile Uncorr. ECC: 0",
        "error_file: <N/A>",
        "Errors: none",
        "retrying connection, attempt 1 of 5 (no error)",
        " iteration      100/    1000 | consumed samples:         1600 | elapsed time per iteration (ms): 85.3 | learning rate: 1.000E-04 | global batch size:    16 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        "saving checkpoint at iteration     100 to /ckpt",
        "  successfully saved checkpoint from iteration     100 to /ckpt",
        "{'loss': 0.5123, 'grad_norm': 1.02, 'learning_rate': 4.9e-05, 'epoch': 0.1}",
        "  5%|▌         | 50/1000 [00:10<03:10,  5.00it/s]",
        "[rank3] step=12 step_time_ms=85.2 node=node1",
        "Epoch 0:  12%|█▏        | 120/1000 [00:30<03:40, 4.00it/s, v_num=0, train_loss=2.34]",
        "INFO: Xidian dataset loaded; 1000 samples",
        "nvidia-smi: NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4",
        "|  N/A   34C    P0    62W / 400W |      0MiB / 81920MiB |      0%      Default |",
        "srun: job 42 queued and waiting for resources",
        "srun: job 42 has been allocated resources",
        "mlx5_core 0000:3b:00.0 ib0: Link up",
    ]  # fmt: skip
    assert {line: _ids(registry, line) for line in healthy if _ids(registry, line)} == {}


# ---------------------------------------------------------------- robustness
def test_ten_thousand_garbage_lines_never_raise(registry: Registry) -> None:
    rnd = random.Random(20260101)
    alphabet = b"abcdeNCLWARVIDXx:|[]()0123456789 \t\x00\xff\xfe\x1b\r/._-=*'\""
    lines: list[str] = []
    for n in range(10_000):
        if n % 2:
            raw = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 200)))
        else:
            raw = bytes(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 200)))
        lines.append(decode_line(raw))
    results = dict(registry.scan_many(lines))
    for index in range(0, 10_000, 97):  # the prefilter never changes the answer
        assert results.get(index, []) == registry.scan_naive(lines[index])


@settings(max_examples=300)
@given(st.text(max_size=400))
def test_scan_never_raises_and_agrees_with_naive(text: str) -> None:
    registry = Registry.default()
    assert registry.scan(text) == registry.scan_naive(text)


@settings(max_examples=200)
@given(
    st.sampled_from([ex for e in ENTRIES for ex in e["examples"]]),
    st.text(max_size=40),
    st.text(max_size=40),
)
def test_examples_embedded_in_noise(example: str, before: str, after: str) -> None:
    registry = Registry.default()
    line = before + example + after
    assert registry.scan(line) == registry.scan_naive(line)


def test_scan_many_reports_indices(registry: Registry) -> None:
    lines = [
        "all good",
        "Segmentation fault (core dumped)",
        "still fine",
        "srun: error: Node failure on n3",
    ]
    found = registry.scan_many(lines)
    assert [index for index, _ in found] == [1, 3]
    assert found[0][1] == registry.scan(lines[1])
    assert registry.scan_chunk(lines) == found == registry.scan_many(iter(lines))


def test_matches_are_independent_valid_models(registry: Registry) -> None:
    line = "3: srun: error: node2: task 1: Exited with exit code 7"
    first, second = registry.scan(line)[0], registry.scan_chunk([line])[0][1][0]
    assert first == second and first is not second and first.groups is not second.groups
    assert PatternMatch.model_validate(first.model_dump()) == first
    assert first.model_fields_set == set(PatternMatch.model_fields)


# ---------------------------------------------------------------- validation
def test_valid_minimal_registry() -> None:
    reg = Registry.from_data(_doc(_minimal()))
    (match,) = reg.scan("x demo failure 42 y")
    assert (match.id, match.groups, match.span) == ("demo_error", {"code": "42"}, (2, 17))
    assert "demo_error" in reg and len(reg) == 1


def test_duplicate_id_is_rejected() -> None:
    with pytest.raises(
        RegistryError, match=r"duplicate pattern id 'demo_error' \(entries 0 and 1\)"
    ):
        Registry.from_data(_doc(_minimal(), _minimal(examples=["demo failure 1"])))


def test_bad_regex_is_rejected() -> None:
    with pytest.raises(RegistryError, match=r"pattern 'demo_error': regex: .*invalid regex"):
        Registry.from_data(_doc(_minimal(regex="demo (failure")))


def test_example_that_does_not_match_is_rejected() -> None:
    with pytest.raises(
        RegistryError, match=r"pattern 'demo_error': example 2 does not match: 'no'"
    ):
        Registry.from_data(_doc(_minimal(examples=["demo failure 1", "no"])))


def test_near_miss_that_matches_is_rejected() -> None:
    other = _minimal(
        id="other", regex="failures counted", examples=["failures counted"], near_misses=[]
    )
    with pytest.raises(RegistryError, match=r"pattern 'demo_error': near-miss 1 matches other"):
        Registry.from_data(_doc(_minimal(), other))


def test_packaged_catalogue_passes_its_self_check() -> None:
    """Loading the packaged catalogue skips the example/near-miss check (start-up time); this
    test is where it runs, so a catalogue entry with a wrong example cannot be merged."""
    Registry.load().check_examples()
    assert len(Registry.load(check=True)) == len(ENTRIES)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_minimal(examples=["demo failure 1", "no"]), "example 2 does not match: 'no'"),
        (_minimal(near_misses=["demo failure 9"]), "near-miss 1 matches demo_error"),
    ],
)
def test_deferred_self_check_refuses_what_loading_would(entry: Any, message: str) -> None:
    """`check=False` (as for the packaged catalogue) only defers the check: the explicit
    check refuses the same entries, with the same message, as a checked load."""
    with pytest.raises(RegistryError, match=message):
        Registry.from_data(_doc(entry))
    deferred = Registry.from_data(_doc(entry), check=False)
    with pytest.raises(RegistryError, match=message):
        deferred.check_examples()


def test_registry_file_is_checked_unless_told_not_to(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_doc(_minimal(examples=["nothing like it"]))), encoding="utf-8")
    with pytest.raises(RegistryError, match="example 1 does not match"):
        Registry.load(path)
    assert len(Registry.load(path, check=False)) == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=2), "unsupported registry version 2"),
        (lambda d: d.pop("patterns"), "patterns"),
        (lambda d: d["patterns"][0].update(id="Bad-Id"), "pattern 'Bad-Id': id"),
        (lambda d: d["patterns"][0].update(category="none"), "'none' is not a failure category"),
        (lambda d: d["patterns"][0].update(role="maybe"), "role"),
        (lambda d: d["patterns"][0].update(kind="explosion"), "kind"),
        (lambda d: d["patterns"][0].update(examples=[]), "examples"),
        (lambda d: d["patterns"][0].update(surprise=1), "surprise"),
        (lambda d: d["patterns"][0].pop("severity"), "severity"),
    ],
)
def test_schema_errors_are_reported(mutate: Any, message: str) -> None:
    doc = _doc(_minimal())
    mutate(doc)
    with pytest.raises(RegistryError, match=message):
        Registry.from_data(doc)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot read"):
        Registry.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(RegistryError, match="not valid JSON"):
        Registry.load(bad)
    bad.write_text("[]", encoding="utf-8")
    with pytest.raises(RegistryError, match="expected an object"):
        Registry.load(bad)
    good = tmp_path / "good.json"
    doc = copy.deepcopy(DATA)
    doc["patterns"] = doc["patterns"][:5]
    good.write_text(json.dumps(doc), encoding="utf-8")
    assert len(Registry.load(good)) == 5


# ---------------------------------------------------------------- literal extraction
@pytest.mark.parametrize(
    ("regex", "fold", "expected"),
    [
        (r"NVRM: Xid \(PCI:", False, {"NVRM: Xid (PCI:"}),
        (r"(?i)loss(?:: |=)(?:nan|inf)", True, {"loss: nan", "loss: inf", "loss=nan", "loss=inf"}),
        (r"\bfo\d+ba\b", False, None),  # nothing of three characters or more is required
        (r"abc(?:def)?ghi", False, {"abcghi", "abcdefghi"}),
        (r"x{3}yz", False, {"xxxyz"}),
        (r"(?:alpha|beta)\s+gamma", False, {"gamma"}),
        (r"(?:alpha|beta)\s+ga", False, {"alpha", "beta"}),
        (r"[Ss]egfault", False, {"Segfault", "segfault"}),
    ],
)
def test_required_literals(regex: str, fold: bool, expected: set[str] | None) -> None:
    found = required_literals(regex, fold=fold)
    assert found == (None if expected is None else frozenset(expected))


def test_needs_folding() -> None:
    assert needs_folding(r"(?i)abc")
    assert needs_folding(r"ab(?i:cd)")
    assert needs_folding(r"ab(?:x|(?i:cd))+")
    assert not needs_folding(r"abc[Dd]")
