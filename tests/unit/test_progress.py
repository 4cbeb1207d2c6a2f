"""Progress recognition: iteration numbers, step times and per-rank timing lines."""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from resurgo.detect import progress
from resurgo.detect import timing_fields as tf
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.progress import (
    ProgressParser,
    RankTiming,
    compile_progress_pattern,
    parse_rank_timing,
    parse_step_duration,
    parse_step_time,
)
from resurgo.detect.timing_fields import timing_fields

MEGATRON = (
    " iteration       12/     200 | consumed samples:          192 | elapsed time per iteration "
    "(ms): 85.3 | learning rate: 1.000E-04 | global batch size:    16 | lm loss: 7.012345E+00 | "
    "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan "
    "iterations:   0 |"
)


@pytest.mark.parametrize(
    ("line", "iteration"),
    [
        (MEGATRON, 12),
        ("0: " + MEGATRON, 12),
        ("  5%|▌         | 50/1000 [00:10<03:10,  5.00it/s]", 50),
        (" 10%|#         | 100/1000 [00:20<03:00,  5.00it/s] 11%|#         | 110/1000 [00:22<03:00,  5.00it/s]", 110),
        ("Training:  25%|██▌       | 250/1000 [01:00<03:00,  4.16it/s]", 250),
        ("120it [00:10, 11.9it/s]", 120),
        ("Epoch 0:  12%|█▏        | 120/1000 [00:30<03:40, 4.00it/s, v_num=0, train_loss=2.34]", 120),
        ("Epoch 2:  12%|█▏        | 120/1000 [00:30<03:40, 4.00it/s, v_num=0]", 2120),
        ("Epoch 3: |          | 17/? [00:03<00:00,  5.02it/s]", 17),
        ("Step 50/1000", 50),
        ("step 7 loss 0.25", 7),
        ("[rank0] step=12 step_time_ms=85.2 node=node1", 12),
        ("3: [rank3] step=12 step_time_ms=85.2 node=node1", 12),
        ("global_step=900 lr=1e-4", 900),
        ("{'step': 44, 'loss': 1.0}", 44),
        ('{"global_step": 45, "loss": 1.0}', 45),
        ("iter 10 | loss 3.2", 10),
        ("Iteration: 51, loss=0.3", 51),
        ("2026-01-01 00:00:00,000 INFO trainer: step: 300 loss: 1.5", 300),
        ("[2024-07-02 10:28:10] it 7425 | loss 2.2257 | it_time 1.13s", 7425),
        ("it: 120, loss 3.1", 120),
        ("1: rank1 05:01:21 it=100 loss=2.1800 rss=62.8GiB", 100),
        # A run that reports once per epoch, its result line (DeepH-pack's trainer, a
        # hand-written loop): the epoch is the clock.
        ("Epoch #2057  | Time: 23h 56m 41s | LR: 4.00e-04 | Epoch time:  41.26 | Train loss: 0.00034544 | Val loss: 0.00037308", 2057),
        ("epoch: 12, loss 0.31, val_loss 0.35", 12),
        # fairchem/OCP's trainer logs every field in `%.4e`, the step too.
        ("2022-11-16 10:26:20 (INFO): energy_mae: 3.7000e-01, forcesx_mae: 4.15e-02, loss: 1.79e+01, lr: 5.00e-04, epoch: 2.1538e-02, step: 1.4000e+03", 1400),
        # ms-swift's log dict: `'global_step/max_steps': '295/4491'`.
        ("{'loss': 0.3863, 'train_speed(iter/s)': 0.1132, 'epoch': 0.19, 'global_step/max_steps': '295/4491', 'percentage': '6.57%'}", 295),
        # A timer line of the Hand4Whole/common trainers: `Epoch 0/12 itr 245/3861: lr: ...`.
        ("09-24 10:22:57 Epoch 0/12 itr 245/3861: lr: 0.0001 speed: 4.91(0.61s r4.30)s/itr 5.27h/epoch", 245),
        # An epoch's result with blanks between its fields (a hand-written loop's summary).
        ("Epoch 6/40  train_loss 0.7052  val_loss 0.8219  val_acc 0.7301  time 147.3s", 6),
        # nnU-Net opening an epoch on a line of its own (v1; v2 after its time stamp).
        ("epoch:  3", 3),
        ("2024-04-30 14:12:08.401733: Epoch 318", 318),
        # ProgressMeter's counter with no epoch before it, its tabs expanded by the logger.
        ("2019-09-16 06:06:43,447 - INFO - [  10/5000]    lr: 0.000040    Time  2.828 ( 4.689)    Data  0.011 ( 1.300)", 10),
        # Blanks around the key's `=`, as aligned columns print them (the blank runs the
        # readers accept are bounded: an 8 KiB run of blanks after `step` is no field).
        ("step   =   120 | loss 2.31", 120),
        ("it :  42 | loss 1.2", 42),
    ],
)  # fmt: skip
def test_builtin_formats(line: str, iteration: int) -> None:
    assert ProgressParser().parse(line) == iteration


@pytest.mark.parametrize(
    "line",
    [
        "{'loss': 0.5, 'learning_rate': 4.9e-05, 'epoch': 0.1}",
        "  Total optimization steps = 1000",
        "  Gradient Accumulation steps = 1",
        "max_steps=1000 warmup_steps=100",
        "split=3 it=2",
        "step_time_ms=12.5",
        "number of nan iterations:   0",
        " loading checkpoint from /ckpt at iteration 200",
        "  successfully loaded checkpoint from /ckpt [ t 0, p 0 ] at iteration 200",
        "Resuming training from step 200",
        "Restored all states from the checkpoint at step 300",
        "node1:1234:5678 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
        "Epoch 1/10",
        "Epoch 3 of the schedule starts after warm-up",
        "[3/4] Building extension module cpu_adam...",
        "2024-04-30 14:12:08.401733: Epoch 318 took 212 s, next: Epoch 319",
        "Starting epoch 1: 3 steps expected",
        "epochs=5000 loss=mse",
        "step 1.5 of the warmup",
        "",
        "Traceback (most recent call last):",
        "retrying it 3 times before giving up",
        "step: 1.4567e+03",  # (not a whole number: not a step)
        "step: 5.0e-04",
        "speed: 4.91(0.61s r4.30)s/itr 5.27h/epoch",
        "step" + " " * 8000 + "120",  # (a user's blank run: no field, and read in one pass)
    ],
)
def test_not_progress(line: str) -> None:
    assert ProgressParser().parse(line) is None


def test_custom_pattern_single_group() -> None:
    parser = ProgressParser(r"it=(\d+)")
    assert parser.parse("train it=17 loss=1") == 17
    assert parser.parse(MEGATRON) is None  # a custom pattern replaces the built-in formats


def test_custom_pattern_named_group_among_others() -> None:
    parser = ProgressParser(r"(epoch|ep) (\d+) batch (?P<iteration>[\d,]+)")
    assert parser.parse("epoch 3 batch 1,200") == 1200


def test_custom_pattern_anchored_sees_body_after_prefixes() -> None:
    parser = ProgressParser(r"^it (\d+)$")
    assert parser.parse("3: [rank3]: it 5") == 5
    assert parser.parse("it 6") == 6


@pytest.mark.parametrize(
    ("pattern", "line"),
    [
        (r"step=(\w+)", "step=abc"),
        (r"step(?:=(\d+))?", "step"),
        (r"step=(\S+)", "step=-5"),
        (r"step=(\d+)", "step=" + "9" * 40),
        (r"step=(\S+)", "step=\uff11\uff12"),  # full-width digits are not an iteration
    ],
)
def test_custom_pattern_without_integer_returns_none(pattern: str, line: str) -> None:
    assert ProgressParser(pattern).parse(line) is None


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"step=\d+", "one capturing group"),
        (r"(step)=(\d+)", "2 capturing groups"),
        (r"step=(\d+", "not a valid regular expression"),
        ("", "non-empty"),
        ("(" + "a" * 2000 + ")", "longer than"),
    ],
)
def test_custom_pattern_validation(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProgressParser(pattern)
    with pytest.raises(ValueError, match=message):
        compile_progress_pattern(pattern)


def test_step_time() -> None:
    assert parse_step_time(MEGATRON) == pytest.approx(85.3)
    assert parse_step_time("[rank0] step=3 step_time_ms=12.5 node=n1") == pytest.approx(12.5)
    assert parse_step_time("iteration_time_ms: 7") == pytest.approx(7.0)
    assert parse_step_time("step_time_ms=1e3") == pytest.approx(1000.0)
    assert parse_step_time("step_time_ms=nan") is None
    assert parse_step_time("loss=0.5") is None


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("step 7300 | loss 1.97 | step_time 1.838s | tok/s 1324176", 1838.0),
        ("iter_time=512.3ms", 512.3),
        ("time/iter: 0.52", 520.0),
        ("time per step (ms): 85", 85.0),
        ("iter 23010 | lm_loss 1.96 | 4.89s/it", 4890.0),
        ("elapsed time per iteration (ms): 337.8", 337.8),
        ("it 7425 | loss 2.22 | it_time 1.13s", 1130.0),
        ("loss 2.0 lr 3e-4 grad_norm 0.3", None),
        ("exit time 3", None),
    ],
)
def test_step_duration(text: str, ms: float | None) -> None:
    assert (
        parse_step_duration(text) == pytest.approx(ms)
        if ms is not None
        else (parse_step_duration(text) is None)
    )


def test_rank_timing_demo_format() -> None:
    line = "[rank3] step=12 step_time_ms=85.2 node=node1"
    assert parse_rank_timing(line) == RankTiming(rank=3, node="node1", step=12, ms=85.2)
    assert parse_rank_timing("7: " + line) == RankTiming(3, "node1", 12, 85.2)


def test_rank_timing_variants() -> None:
    assert parse_rank_timing("[rank1]: node=gpu-2.c step_time_ms=9 step=4") == RankTiming(
        1, "gpu-2.c", 4, 9.0
    )
    assert parse_rank_timing("rank=5 step=1 step_time_ms=2.5 node=n5") == RankTiming(
        5, "n5", 1, 2.5
    )


@pytest.mark.parametrize(
    "line",
    [
        "[rank3] step=12 step_time_ms=85.2",  # no node
        "[rank3] step=12 node=node1",  # no time
        "step=12 step_time_ms=85.2 node=node1",  # no rank
        "[rank3] step=x step_time_ms=85.2 node=node1",
        "[rank3] step=12 step_time_ms=fast node=node1",
        "[rank3] step=12 step_time_ms=inf node=node1",
        "[rank3] step=12 step_time_ms=85.2 node=???",
        "",
    ],
)
def test_rank_timing_rejects(line: str) -> None:
    assert parse_rank_timing(line) is None


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_never_raises_on_arbitrary_text(text: str) -> None:
    for parser in (
        ProgressParser(),
        ProgressParser(r"(?P<iteration>\S+)"),
        ProgressParser(r"(\d*)"),
    ):
        value = parser.parse(text)
        assert value is None or (isinstance(value, int) and value >= 0)
    ms = parse_step_time(text)
    assert ms is None or ms >= 0
    timing = parse_rank_timing(text)
    assert timing is None or timing.ms >= 0


@settings(max_examples=200)
@given(
    st.integers(min_value=0, max_value=10**12),
    st.sampled_from(["step={}", "Step {}/99", "iter {}"]),
)
def test_roundtrip_numbers(n: int, template: str) -> None:
    assert ProgressParser().parse(template.format(n)) == n


# ------------------------------------------------------------------ literal gates change nothing
# `_parse_builtin`, `parse_step_duration` and `timing_fields` skip a format's regex when the
# line lacks a literal that regex needs. These references run every regex, as before the gates;
# the gated functions must agree on any line, including text whose Unicode case folding maps
# onto ASCII letters (U+017F long s folds to `s`, U+212A Kelvin to `k`).


def _reference_iteration(line: str) -> int | None:
    if progress._GATE.pattern.search(line) is None:
        return None
    text = strip_prefixes(line).body
    if progress._RESUME.search(text) is not None:
        return None
    if m := progress._MEGATRON.search(text):
        return progress._to_iteration(m.group(1))
    if last := progress._last(progress._LIGHTNING, text):
        epoch, n = progress._to_iteration(last.group(1)), progress._to_iteration(last.group(2))
        if epoch is None or n is None:
            return None
        size = progress._to_iteration(last.group(3))
        steps = n if size is None else epoch * size + n
        return steps if steps <= progress.MAX_ITERATION else None
    for regex in (progress._TQDM, progress._TQDM_UNKNOWN_TOTAL):
        if last := progress._last(regex, text):
            return progress._to_iteration(last.group(1))
    m = progress._KEYED.search(text) or progress._SHORT_IT.search(text)
    if m is not None:
        return progress._to_iteration(m.group(1))
    m = progress._EPOCH_ONLY.search(text)
    if m is None and len(text) < 60:
        m = progress._EPOCH_LINE.match(text)
    m = m or progress._BRACKET_COUNTER.search(text)
    return progress._to_iteration(m.group(1)) if m else None


def _reference_duration(text: str) -> float | None:
    m = progress._STEP_DURATION.search(text) or progress._PER_IT.search(text)
    if m is None:
        return None
    unit = (m.group("unit") or m.group("key_unit") or "").lower()
    ms = float(m.group("value")) * (1.0 if unit == "ms" else 1000.0)
    return ms if math.isfinite(ms) and ms >= 0 else None


_FRAGMENTS = [
    "3: ", "[rank7]: ", "[default0]:", "gpu01: ", "iteration", " iteration  12/ 200 |",
    "Iteration", "ITER", "iter", "step", "STEP", "Step", "\u017ftep", "global_step", "it", "IT", " it ",
    "it [", "120it [00:10, 1it/s]", "Epoch ", "Epoch 2: ", "%|", " 12%|#  | 120/1000 [", "|", " | ",
    "/", "s/it", "S/IT", "ms/step", "\u017f/it", "4.5", "12", " 7 ", "=", ":", ": ", "'step': 3",
    "resum", "RESUMING", "re\u017fuming", "restor", "checkpoint", "loaded checkpoint", "time", "TIME",
    "t\u0131me", "step_time", "step_time_ms=85.2", "dt=554.0ms", "elapsed time per iteration (ms): 3",
    "time/iter: 0.5", "t_fwd: 3", "data_time_s=0.35", "ms", "s", "\u212a", "é", " ", "\t",
]  # fmt: skip
_LINES = st.lists(st.sampled_from(_FRAGMENTS), max_size=10).map("".join)


@settings(max_examples=3000, deadline=None)
@given(_LINES)
@example("ITER 7 | loss 2")
@example("3: [rank7]: STEP: 12")
@example("\u212aeep \u017ftep 3 it: 4, t\u0131me 5")
@example("re\u017fuming at Step 50/1000")
@example("\u017f/it12|")  # (no gate word at all: the literals passed it on folding alone)
@example("itit 7 s/it12|")  # (the gate's literal `it ` elsewhere; `it12|` is no short key)
@example("TIME/ITER: 0.5 | 4.5 S/IT")
@example("2: Epoch 2:  12%|#  | 120/1000 [00:30<03:40, 4.00it/s]")
def test_literal_gates_change_no_result(line: str) -> None:
    assert ProgressParser().parse(line) == _reference_iteration(line)
    body = strip_prefixes(line).body
    assert ProgressParser().parse(line, body) == _reference_iteration(line)
    assert parse_step_duration(line) == _reference_duration(line)
    assert tf.keyed_fields(line) == _reference_fields(line, fallback=False)


def test_time_keys_memory_is_bounded_and_changes_no_result() -> None:
    # A flood of distinct tokens (keys made up on every line) fills the memory of tried keys
    # up to its bound; keys seen after that are still read, just not remembered.
    lines = [f"f{i}_time={i % 7}.5 tok{i}=3 step_time_ms=2" for i in range(tf._TIME_KEYS_MAX + 50)]
    for line in lines:
        assert tf.keyed_fields(line) == _reference_fields(line, fallback=False)
    assert len(tf._TIME_KEYS) <= tf._TIME_KEYS_MAX
    assert tf.keyed_fields(lines[-1]) == {"f4145_time": 1500.0, "step_time_ms": 2.0}


def _reference_fields(text: str, *, fallback: bool = True) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in tf._TIME_FIELD.finditer(text):
        key = m.group("key").lower()
        unit = (m.group("unit") or "").lower() or ("ms" if key.endswith("ms") else "s")
        ms = float(m.group("value")) * (1.0 if unit == "ms" else 1000.0)
        if math.isfinite(ms) and ms >= 0:
            out.setdefault(key, ms)
    if fallback and not out and (spelled := _reference_duration(text)) is not None:
        out["step"] = spelled
    return out


# More frameworks' step lines (public sources): fairseq's simple and JSON progress bars
# (facebookresearch/fairseq issues #940 and #2201 quote them), timm train.py's `Train:` line,
# Composer's console logger `[epoch=1][batch=120/10000]`, MaxText's `completed step:` line
# (docs understand_logs_and_metrics.md), nanoGPT train.py's `iter 100: loss ..., time ...ms`.
@pytest.mark.parametrize(
    ("line", "iteration"),
    [
        ("| epoch 001:    450 / 1891 loss=11.521, nll_loss=10.881, ppl=1886.05, wps=52922, ups=0.5, wpb=104928, bsz=5325, num_updates=445, lr=8.90889e-05, gnorm=1.543, clip=0%, oom=0, loss_scale=2.000, wall=882, train_wall=756", 445),
        ('{"epoch": 27, "update": 26.267, "loss": "8.206", "nll_loss": "7.049", "ppl": "132.47", "wps": "1195.4", "ups": "1.62", "wpb": "738.1", "bsz": "46.4", "num_updates": "33700", "lr": "0.00017226"}', 33700),
        ("Train: 3 [ 100/1251 (  8%)]  Loss: 3.214 (3.412)  Time: 0.312s, 3281.45/s  (0.315s, 3250.89/s)  LR: 1.000e-03  Data: 0.012 (0.015)", 3 * 1251 + 100),
        ("[epoch=1][batch=120/10000]: Train throughput/samples_per_sec: 123.4", 10120),
        ("completed step: 10, seconds: 1.234, TFLOP/s/device: 123.456, Tokens/s/device: 4567.890, total_weights: 196608, loss: 7.123", 10),
        ("iter 100: loss 4.2345, time 120.53ms, mfu 30.21%", 100),
        # pytorch/examples mnist/main.py's train loop (samples seen), and open_clip's after it
        ("Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.301003", 60640),
        ("0: 2024-04-14,08:12:40 | INFO | Train Epoch: 0 [  262144/40000000 (1%)] Data (t): 0.101 Batch (t): 0.912, 9340.3/s, 291.9/s/gpu LR: 0.000050", 262144),
    ],
)  # fmt: skip
def test_more_frameworks_progress(line: str, iteration: int) -> None:
    assert ProgressParser().parse(line) == iteration


def test_deepspeed_wall_clock_breakdown_phases() -> None:
    # deepspeed/utils/timer.py SynchronizedWallClockTimer.log with wall_clock_breakdown on.
    line = "[2024-03-02 10:11:12,345] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | forward: 123.45 | backward: 234.56 | backward_inner: 200.00 | backward_allreduce: 30.00 | step: 40.00"
    assert timing_fields(line) == {
        "forward": 123.45, "backward": 234.56, "backward_inner": 200.0,
        "backward_allreduce": 30.0, "step": 40.0,
    }  # fmt: skip


def test_timing_fields_are_read_once_per_line_inside_an_attribution_block() -> None:
    # The event scan and the series reader both ask for a line's fields: inside a
    # `memoised_prefixes` block the second ask is the first answer, equal to a fresh read.
    from resurgo.detect.lines import memoised_prefixes

    line = "iter 40 | step_time 0.52s | dt=554.0ms"
    fresh = dict(tf.timing_fields(line))
    assert fresh == {"step_time": 520.0, "dt": 554.0}
    with memoised_prefixes():
        first = tf.timing_fields(line)
        assert tf.timing_fields(line) is first
        assert dict(first) == fresh
    assert tf.timing_fields(line) is not first  # (the memory ends with the block)
