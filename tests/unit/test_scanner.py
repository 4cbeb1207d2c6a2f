"""Chunk scanning (`Registry.scan_chunk` / `scan_many`) gives exactly `scan_naive`, line by line,
with every chunk engine available here (Hyperscan when installed, stdlib `re` always)."""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from resurgo.contracts import StragglerThresholds
from resurgo.detect import registry as registry_module
from resurgo.detect.attempt_state import AttemptWatcher
from resurgo.detect.literals import gated
from resurgo.detect.progress import ProgressParser
from resurgo.detect.registry import PatternMatch, Registry, RegistryError
from resurgo.detect.scanner import ENGINE_ENV, hyperscan_available

DATA: dict[str, Any] = json.loads(
    resources.files("resurgo.detect").joinpath("patterns.json").read_text("utf-8")
)
EXAMPLES: list[str] = [ex for e in DATA["patterns"] for ex in e["examples"]]
NEAR_MISSES: list[str] = [nm for e in DATA["patterns"] for nm in e["near_misses"]]
BENIGN = [
    " iteration      100/    1000 | consumed samples:         1600 | elapsed time per iteration (ms): 85.3 | learning rate: 1.000E-04 | global batch size:    16 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "node1:1234:5678 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7",
    "node1:1234:5678 [0] NCCL INFO comm 0x55d0c8e0 rank 0 nranks 8 cudaDev 0 busId 3b000 - Init COMPLETE",
    "node1:1234:5678 [0] NCCL WARN NET/Plugin: Could not find: libnccl-net.so",
    "{'loss': 0.5123, 'grad_norm': 1.02, 'learning_rate': 4.9e-05, 'epoch': 0.1}",
    "  5%|▌         | 50/1000 [00:10<03:10,  5.00it/s]",
    "Epoch 0:  12%|█▏        | 120/1000 [00:30<03:40, 4.00it/s, v_num=0, train_loss=2.34]",
    "[rank1] step=5 step_time_ms=61.2 node=node2",
    "[rank0]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters in the forward pass.",
    "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will create 16 worker processes in total.",
    "ECC errors: 0",
    "Errors: none",
    "INFO: Xidian dataset loaded; 1000 samples",
    "saving checkpoint at iteration     100 to /ckpt",
    "",
    "   ",
]
# Non-ASCII characters whose case mappings touch ASCII letters (re.ASCII ignores them), lone
# surrogates, Unicode line separators that str.splitlines would split on, and a NUL.
TRICKY = [
    "\u0130",
    "\u0131",
    "\u212a",
    "\u017f",
    "\u00df",
    "\u2028",
    "\x85",
    "\ud800",
    "\x00",
    "█",
    "\U0001f525",
    "\r",
]
PREFIXES = [
    "",
    "0: ",
    " 12: ",
    "3: [rank3]: ",
    "[rank1]: ",
    "[Rank 2] ",
    "1: [rank1]:[E ProcessGroupNCCL.cpp:632] ",
    "7: 1: ",
]

ENGINES = ["re", *(["hyperscan"] if hyperscan_available() else [])]


@pytest.fixture(scope="module", params=ENGINES)
def registry(request: pytest.FixtureRequest) -> Registry:
    return Registry.load(engine=request.param)


_REGISTRIES = {engine: Registry.load(engine=engine) for engine in ENGINES}


def _expected(registry: Registry, lines: Sequence[str]) -> list[tuple[int, list[PatternMatch]]]:
    out = []
    for index, line in enumerate(lines):
        matches = registry.scan_naive(line)
        if matches:
            out.append((index, matches))
    return out


def _flip(line: str, mask: int) -> str:
    return "".join(c.swapcase() if (mask >> (i % 61)) & 1 else c for i, c in enumerate(line))


@st.composite
def log_lines(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["benign", "example", "near_miss", "garbage", "embedded"]))
    if kind == "benign":
        body = draw(st.sampled_from(BENIGN))
    elif kind == "example":
        body = draw(st.sampled_from(EXAMPLES))
    elif kind == "near_miss":
        body = draw(st.sampled_from(NEAR_MISSES))
    elif kind == "garbage":
        body = draw(st.text(alphabet=st.characters() | st.sampled_from(TRICKY), max_size=120))
    else:
        noise = st.text(st.sampled_from(TRICKY) | st.characters(max_codepoint=127), max_size=12)
        body = draw(noise) + draw(st.sampled_from(EXAMPLES)) + draw(noise)
    case = draw(st.sampled_from(["keep", "keep", "upper", "lower", "flip"]))
    if case == "upper":
        body = body.upper()
    elif case == "lower":
        body = body.lower()
    elif case == "flip":
        body = _flip(body, draw(st.integers(min_value=1, max_value=(1 << 61) - 1)))
    return draw(st.sampled_from(PREFIXES)) + body


# ---------------------------------------------------------------- the property
@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(log_lines(), max_size=25))
def test_chunk_scan_equals_naive_line_by_line(engine: str, lines: list[str]) -> None:
    registry = _REGISTRIES[engine]
    expected = _expected(registry, lines)
    assert registry.scan_chunk(lines) == expected
    assert registry.scan_many(iter(lines)) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(log_lines(), min_size=1, max_size=25))
def test_auto_engine_scans_small_inputs_line_by_line_with_the_same_result(
    lines: list[str],
) -> None:
    """`auto` scans its first ENGINE_AFTER_LINES lines with the prefilter (no database to
    compile for a small bundle), then with the chunk engine: the same matches either way."""
    registry = Registry.from_data(
        {"version": 1, "patterns": [e.model_dump() for e in _REGISTRIES["re"]]},
        engine="auto",
        check=False,
    )
    threshold = 2 * len(lines)
    with mock.patch.object(registry_module, "ENGINE_AFTER_LINES", threshold):
        assert registry.scan_chunk(lines) == _expected(registry, lines)
        assert registry._engine is None  # nothing compiled for a small input
        assert registry.scan_many(iter(lines)) == _expected(registry, lines)
        assert registry._engine is not None  # the threshold is reached: the engine takes over
        assert registry.scan_chunk(lines) == _expected(registry, lines)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(max_size=60), max_size=20))
def test_chunk_scan_of_arbitrary_text(engine: str, lines: list[str]) -> None:
    """Any str, including ones holding newlines (the chunk is then scanned line by line)."""
    registry = _REGISTRIES[engine]
    assert registry.scan_chunk(lines) == _expected(registry, lines)


# ---------------------------------------------------------------- examples and edge cases
def test_engine_is_reported(registry: Registry) -> None:
    assert registry.scan_engine in ENGINES
    assert registry.scan_engine_detail


def test_default_engine_prefers_hyperscan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert Registry.load().scan_engine == ("hyperscan" if hyperscan_available() else "re")
    monkeypatch.setenv(ENGINE_ENV, "re")
    assert Registry.load().scan_engine == "re"
    monkeypatch.setenv(ENGINE_ENV, "turbo")
    with pytest.raises(RegistryError, match="unknown scan engine 'turbo'"):
        Registry.load()


def test_every_example_with_prefixes_and_case(registry: Registry) -> None:
    lines = [
        transform(prefix + example)
        for example in EXAMPLES + NEAR_MISSES
        for prefix in ("", "5: ", "2: [rank2]: ")
        for transform in (str, str.upper, str.lower, str.swapcase)
    ]
    assert registry.scan_chunk(lines) == _expected(registry, lines)


def test_indices_across_internal_chunks(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "CHUNK_LINES", 7)
    quiet = [line for line in BENIGN if not registry.scan_naive(line)]
    lines = [quiet[i % len(quiet)] if i % 5 else EXAMPLES[i % len(EXAMPLES)] for i in range(100)]
    expected = _expected(registry, lines)
    assert [i for i, _ in expected] == list(range(0, 100, 5))
    assert registry.scan_chunk(lines) == expected
    assert registry.scan_many(iter(lines)) == expected
    assert registry.scan_many(lines) == expected


def test_lines_holding_newlines_and_odd_characters(registry: Registry) -> None:
    lines = [
        "ok",
        "first part\nSegmentation fault (core dumped)",  # a newline inside one line
        "srun: error: Node failure on node3",
        "",
        "loss: NaN",
        "\u0130NF DETECTED",  # the dotted capital I lowers to "i" + U+0307: more ASCII, not less
        "Kelvin: loss = \u212anan",
        "lone \ud800 surrogate: CUDA error: out of memory",
        "\u2028NCCL WARN Cuda failure\x85",
        "\ufb01 ligature: ValueError: x",
    ]
    assert registry.scan_chunk(lines) == _expected(registry, lines)
    assert registry.scan_chunk(lines[2:]) == _expected(registry, lines[2:])
    assert registry.scan_chunk([]) == []


def test_overlapping_literals_in_one_line(registry: Registry) -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 79, NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 12 EIOEIO ENOSPC"
    assert registry.scan_chunk([line, line]) == _expected(registry, [line, line])


def test_registry_with_an_unfiltered_entry() -> None:
    """An entry without a required literal runs on every line, in every path."""
    doc = {
        "version": 1,
        "patterns": [
            {
                "id": "bare_number",
                "regex": r"^\d+$",
                "kind": "crash",
                "category": "application",
                "role": "context",
                "severity": "warning",
                "description": "a line holding only a number",
                "examples": ["42"],
            },
            {
                "id": "demo_error",
                "regex": r"(?i)demo failure (?P<code>\d+)",
                "kind": "crash",
                "category": "application",
                "role": "root",
                "severity": "error",
                "description": "demo",
                "examples": ["demo failure 3"],
            },
        ],
    }
    lines = ["42", "x", "7: 9", "DEMO FAILURE 4", "1: demo failure 5", "12"]
    for engine in ENGINES:
        registry = Registry.from_data(doc, engine=engine)
        assert registry.unfiltered_ids == ("bare_number",)
        found = registry.scan_chunk(lines)
        assert found == _expected(registry, lines)
        assert [i for i, _ in found] == [0, 2, 3, 4, 5]


def test_concurrent_chunk_scans(registry: Registry) -> None:
    lines = [BENIGN[i % len(BENIGN)] if i % 3 else EXAMPLES[i % len(EXAMPLES)] for i in range(600)]
    expected = registry.scan_chunk(lines)
    results: list[object] = []

    def work() -> None:
        for _ in range(5):
            results.append(registry.scan_chunk(lines) == expected)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 20


# ---------------------------------------------------------------- the watcher's batch feed
def _lines() -> Iterator[tuple[int, str]]:
    n = 0
    for i in range(1, 40):
        for text in (
            f"0:  iteration {i:8d}/     200 | elapsed time per iteration (ms): 85.3 | lm loss: 1.0E-01 |",
            f"[rank1] step={i} step_time_ms={60 + (i % 3)} node=node{1 + i % 2}",
            "node1:1234:5678 [0] NCCL INFO Connected all rings",
        ):
            n += 1
            yield n, text
        if i % 9 == 0:
            n += 1
            yield n, EXAMPLES[i % len(EXAMPLES)]
    for text in (
        "resumed from checkpoint at iteration 30",
        "1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ):
        n += 1
        yield n, text


@pytest.mark.parametrize("straggler", [None, StragglerThresholds(ratio=1.5, window=5)])
def test_feed_many_equals_feed(registry: Registry, straggler: StragglerThresholds | None) -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    lines = list(_lines())
    one = AttemptWatcher(registry, ProgressParser(None), hang_timeout=None, straggler=straggler)
    for line_no, text in lines:
        one.feed(line_no, text, now)
    many = AttemptWatcher(registry, ProgressParser(None), hang_timeout=None, straggler=straggler)
    for start in range(0, len(lines), 17):
        many.feed_many(lines[start : start + 17], now)
    many.feed_many([], now)
    assert many.state == one.state
    assert one.state.pattern_ids and one.state.first_fatal_at == now


# ---------------------------------------------------------------- gated patterns
def _gated_regexes() -> list[re.Pattern[str]]:
    """The regexes the attribution path runs behind a literal pre-test, and some with flags."""
    from resurgo.attribute import job_log, series
    from resurgo.detect import progress

    return [
        job_log._COMPLETED.pattern,
        series._GATE.pattern,
        series._TIME_GATE.pattern,
        progress._GATE.pattern,
        *(regex for _, regex, _, _ in series._METRICS),
        re.compile(r"exit(?:ed)? code (?P<code>\d+)", re.IGNORECASE),
        re.compile(r"exit(?:ed)? code (?P<code>\d+)", re.IGNORECASE | re.ASCII),
        re.compile(r"(?i:Kill)ed by (?:signal|OOM)\b"),
        re.compile(r"  step \s* = \s* \d+  # verbose", re.VERBOSE),
        re.compile(r"^(?:ab|cd)?$"),
    ]


_GATE_TEXT = st.lists(
    st.sampled_from(
        ["training", " complete", "finished training", "exit code 0", "Exited status: 0",
         "srun exited rc=0", "reached max_steps", "[after training is done]", "12.5", " s/it",
         "samples/sec: 9", "tokens/s 5", "tps: 9", "step_time 1.2s", "it/s", "dt=5ms", "t_x=1",
         "\u017f", "\u212a", "\u0130", "\u0131", "killed by signal", "KILLED BY OOM", "step = 3",
         " ", ":", "=", "Epoch 2", "%|", "ab", "cd", "x"]
    ),
    max_size=8,
).map("".join)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(text=_GATE_TEXT | st.text(max_size=60))
@example(text="\u017ftep_time 1.2s")  # U+017F folds to `s` in a Unicode case-insensitive regex
@example(text="Exited \u017ftatu\u017f: 0")
@example(text="\u212aILLED BY OOM")
def test_gated_pattern_gives_the_regex_own_results(text: str) -> None:
    for regex in _gated_regexes():
        fast = gated(regex)
        found = regex.search(text)
        assert fast.may_match(text) or found is None, (regex.pattern, text)
        got = fast.search(text)
        assert (got and (got.span(), got.group())) == (found and (found.span(), found.group()))
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in regex.finditer(text)]
