"""Job-wide periodic series in a job's output: time per iteration and throughput, any unit.

Frameworks print one of two kinds of rhythm, usually from one rank for the whole job:
- time per step: Megatron `elapsed time per iteration (ms): 3112.1`, NeMo `train_step_timing
  in s: 4.11`, `step_time 1.726s`, `1.206 s/it`, `0.605 s/step`;
- throughput: DeepSpeed `CurrSamplesPerSec=16.39`, HF/Composer `samples_per_second`,
  `Train throughput/device/tokens_per_sec: 33432.6`, torchtitan `tps: 855`, `5333 img/s`,
  `604,733 tokens/s`, Megatron `throughput per GPU (TFLOP/s/GPU): 398.8`, tqdm `1.18it/s`.

`jobwide_slowdown` finds a sustained change of rhythm: the last samples all slower than the
run's own baseline by SLOWDOWN_RATIO. One slow interval (a checkpoint save, a GC pause, the
first compiled steps) is not a slowdown.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from dataclasses import dataclass
from typing import NamedTuple

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.literals import gated
from resurgo.detect.timing_fields import SEPARATED_END, SPACED_HINT, timing_fields

SLOWDOWN_RATIO = 1.2
RECENT_SAMPLES = 3
MIN_BASELINE_SAMPLES = 5
# A steady run (its samples within TIGHT_SPREAD of their median, as synchronous training's
# per-iteration times are) shows a smaller sustained change just as surely, from fewer samples:
# a few percent lost for good is a slowdown an operator wants to hear about.
TIGHT_SPREAD = 0.005
TIGHT_SLOWDOWN_RATIO = 1.03
MIN_TIGHT_BASELINE_SAMPLES = 3
# A short series (a few reports, hours apart) shows a step change: every sample from some
# point on STEP_RATIO slower than all before it, the samples on each side within STEP_SPREAD
# of each other. Noise is neither that large nor that steady.
STEP_RATIO = 1.3
STEP_SPREAD = 0.05
MIN_STEP_AFTER = 2
MIN_SLOWDOWN_MS = 50.0  # below this, a slower step is the noise of very short steps
WARMUP_SAMPLES = 2  # the first intervals include compilation and data-loader start-up

_NUM = r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,12}(?:\.\d{1,12})?(?:[eE][-+]?\d{1,3})?)"
# (metric, regex with one group, unit factor, lower is better)
_METRICS: list[tuple[str, re.Pattern[str], float, bool]] = [
    ("iteration_ms", re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUM), 1.0, True),
    ("iteration_ms", re.compile(r"(?i)\btrain_step_timing in s[:=]\s*" + _NUM), 1000.0, True),
    ("iteration_ms", re.compile(r"(?i)\bstep_time(?:_s)?[:= ]\s*" + _NUM + r"\s*s\b"), 1000.0,
     True),
    ("iteration_ms", re.compile(r"(?i)\bstep_time_ms[:= ]\s*" + _NUM), 1.0, True),
    ("iteration_ms", re.compile(r"(?<![\w.])" + _NUM + r"\s*s/(?:it|iter|step)\b"), 1000.0,
     True),
    ("iteration_ms", re.compile(r"(?<![\w.])" + _NUM + r"\s*ms/(?:it|iter|step|batch)\b"), 1.0,
     True),
    # pytorch/examples word_language_model: `| 200/ 2983 batches | lr 20.00 | ms/batch 45.84 |`
    ("iteration_ms", re.compile(r"\bms/batch\s+" + _NUM), 1.0, True),
    ("samples_per_s", re.compile(r"\bCurrSamplesPerSec[=:]\s*" + _NUM), 1.0, False),
    # DeepSpeed's ThroughputTimer before 0.6 (deepspeed/utils/timer.py): `0/4000,
    # SamplesPerSec=412.61` (not the lagging `RunningAvgSamplesPerSec` of later versions)
    ("samples_per_s", re.compile(r"\bSamplesPerSec[=:]\s*" + _NUM), 1.0, False),
    ("samples_per_s", re.compile(r"(?i)\bsamples_per_sec(?:ond)?['\"]?[:=]\s*" + _NUM), 1.0, False),
    # (`samples/s 3853` as `tokens/s 3853` below: the label, then its value; in `loss 1.98
    # samples/s 3853` the number before the label is another field's)
    ("samples_per_s", re.compile(r"(?i)\bsamples?/s(?:ec)?(?:[:=]\s*|\s+)" + _NUM), 1.0, False),
    ("samples_per_s", re.compile(r"(?i)(?<![\w.])" + _NUM + r"\s*samples?/s(?:ec)?\b"), 1.0,
     False),
    ("tokens_per_s", re.compile(r"(?i)\btokens_per_sec(?:ond)?['\"]?[:=]\s*" + _NUM), 1.0,
     False),
    ("tokens_per_s", re.compile(r"(?i)\btps[:=]\s*" + _NUM), 1.0, False),
    ("tokens_per_s", re.compile(r"(?i)\btokens/s(?:ec)?[:=]?\s+" + _NUM), 1.0, False),
    # (`tok/s=2051196`, `tokens/s=...`: a key=value log line's throughput field)
    ("tokens_per_s", re.compile(r"(?i)(?<![\w/])tok(?:en)?s?/s(?:ec)?=\s*" + _NUM), 1.0, False),
    ("tokens_per_s", re.compile(r"(?i)(?<![\w.])" + _NUM + r"\s*tok(?:en)?s/s(?:ec)?\b"), 1.0,
     False),
    # SGLang's scheduler (`Decode batch. #running-req: 25, ..., gen throughput (token/s):
    # 951.5, #queue-req: 0`): a serving job's rhythm
    ("tokens_per_s", re.compile(r"(?i)\bthroughput \(tok(?:en)?s?/s\):\s*" + _NUM), 1.0, False),
    ("images_per_s", re.compile(r"(?i)(?<![\w.])" + _NUM + r"\s*im(?:g|ages)/s(?:ec)?\b"), 1.0,
     False),
    # MaxText `completed step: 10, seconds: 1.234, TFLOP/s/device: 123.4, Tokens/s/device: ...`
    ("iteration_ms", re.compile(r"\bcompleted step: \d+, seconds: " + _NUM), 1000.0, True),
    # fairseq `wps=52922, ups=0.5` (words and updates per second; JSON logs quote the values)
    ("tokens_per_s", re.compile(r"(?i)\btokens/s/device[:=]\s*" + _NUM), 1.0, False),
    ("tokens_per_s", re.compile(r"(?<![\w.])\"?wps\"?[=:]\s*\"?" + _NUM), 1.0, False),
    ("tflops", re.compile(r"\(TFLOP/s/GPU\):\s*" + _NUM), 1.0, False),
    ("tflops", re.compile(r"(?i)\bTFLOP/s/device[:=]\s*" + _NUM), 1.0, False),
    ("tflops", re.compile(r"(?i)(?<![\w./])tflops[:=]\s*" + _NUM), 1.0, False),
    # torchtitan `mfu: 16.99%`, nanoGPT `mfu 30.21%`
    ("mfu", re.compile(r"(?i)(?<![\w.])mfu[:=]?\s*" + _NUM + r"\s*%"), 1.0, False),
    # verl's metrics line, MFU as a fraction (`perf/mfu/actor:0.171`): kept in percent
    ("mfu", re.compile(r"\bperf/mfu/\w{1,20}[:=]\s*" + _NUM), 100.0, False),
    # tqdm `1.18it/s`; progress tables that space the unit, `| step 500 | 4.19 it/s |`
    ("it_per_s", re.compile(r"(?<![\w.])" + _NUM + r" ?it/s\b"), 1.0, False),
    ("it_per_s", re.compile(r"(?<![\w.])\"?ups\"?[=:]\s*\"?" + _NUM), 1.0, False),
    # DiT/LlamaGen train.py `(step=0000300) Train Loss: 7.33, Train Steps/Sec: 2.36`; ms-swift's
    # `'train_speed(iter/s)': 0.1133`
    ("it_per_s", re.compile(r"(?i)\bsteps/sec[:=]\s*" + _NUM), 1.0, False),
    # Composer's console logger `Train throughput/batches_per_sec: 0.0642`
    ("it_per_s", re.compile(r"\bbatches_per_sec[:=]\s*" + _NUM), 1.0, False),
    # gpt-neox `approx flops per GPU: 48.3TFLOPS`; `| tflops/gpu 119.6`
    ("tflops", re.compile(r"\bflops per GPU:\s*" + _NUM + r"\s*TFLOPS\b"), 1.0, False),
    ("tflops", re.compile(r"(?i)\btflops/gpu[:=]?\s+" + _NUM), 1.0, False),
    # tf_cnn_benchmarks `100\timages/sec: 152.0 +/- 0.2 (jitter = 1.1)`
    ("images_per_s", re.compile(r"\bimages/sec:\s*" + _NUM), 1.0, False),
    ("it_per_s", re.compile(r"\btrain_speed\(iter/s\)['\"]?:\s*" + _NUM), 1.0, False),
]  # fmt: skip
_SEPARATED_UNIT = ("s |", "s\t", ")\t", "s,", "s (", "Time  ")
_TIME_GATE = gated(re.compile(r"time|\bt_|\bdt\b|ms\b"))
_GATE = gated(re.compile(
    r"(?i)/s|s/(?:it|iter|step|batch)\b|per[ _]?sec|persec|per iteration|timing|step_time|tps|"
    r"seconds: |wps|ups|tflops|mfu"
))  # fmt: skip
# Every line of the output goes through these: each regex first tests for its own literals.
_GATED_METRICS = [(m, gated(regex), factor, lower) for m, regex, factor, lower in _METRICS]


class Sample(NamedTuple):
    """One value of a series (a tuple: one is made for most lines of a long log)."""

    order: int
    metric: str
    value: float
    lower_is_better: bool


@dataclass(frozen=True)
class Slowdown:
    metric: str
    baseline: float
    recent: float
    ratio: float
    onset: int
    """Order of the first slow sample of the run of slow samples at the end."""
    lines: list[LogLine]


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


_Plan = list[tuple[str, tuple[str, ...], list[tuple[re.Pattern[str], float, bool]]]]


def _plan() -> _Plan:
    """Per metric: the lower-cased literals of its regexes' gates (any one of which a match
    needs), then its regexes in order. Testing a case-sensitive literal lower-cased on the
    lower-cased line only lets more lines through to the regexes, which decide; so every
    metric is one inline test on one lower-cased copy of the line, and its regexes are
    skipped at once."""
    global _PLAN
    if _PLAN is None:
        by_metric: dict[
            str, tuple[tuple[str, ...] | None, list[tuple[re.Pattern[str], float, bool]]]
        ] = {}
        for (metric, regex, factor, lower), (_, gate, _, _) in zip(
            _METRICS, _GATED_METRICS, strict=True
        ):
            literals = gate._gate()  # the gate's own literals (found from the regex)
            known, regexes = by_metric.get(metric, ((), []))
            # A regex without literals can match any line: its metric is never skipped.
            every = (
                None
                if known is None or not literals
                else known + tuple(sorted({lit.lower() for lit in literals} - set(known)))
            )
            by_metric[metric] = (every, [*regexes, (regex, factor, lower)])
        _PLAN = [(m, _minimal(lits or ()), regexes) for m, (lits, regexes) in by_metric.items()]
    return _PLAN


_PLAN: _Plan | None = None


def _minimal(literals: tuple[str, ...]) -> tuple[str, ...]:
    """The literals that hold no other one (a line holding `s/iter` holds `s/it`)."""
    return tuple(x for x in literals if not any(y != x and y in x for y in literals))


def samples_of(order: int, text: str) -> list[Sample]:
    """The series samples one line carries (at most one per metric)."""
    return _samples(order, text, text.lower() if text.isascii() else None)


def _samples(order: int, text: str, low: str | None) -> list[Sample]:
    """`samples_of` with the line's lower-cased copy (None for non-ASCII text, where the
    case-folded literals do not hold, see `GatedPattern`): every literal test is an inline
    `in` on it, the cheapest test per line. A literal found in a prefix only runs a regex
    for nothing; the regexes decide."""
    if low is not None:
        for literal in _GATE_LITERALS if _GATE_LITERALS is not None else _gate_literals():
            if literal in low:
                break
        else:
            return []
    body = strip_prefixes(text).body
    out: list[Sample] = []
    for metric, literals, regexes in _PLAN if _PLAN is not None else _plan():
        if literals and low is not None:
            for literal in literals:
                if literal in low:
                    break
            else:
                continue
        for regex, factor, lower in regexes:
            m = regex.search(body)
            if m is None or (value := _number(m.group(1))) is None:
                continue
            out.append(Sample(order, metric, value * factor, lower))
            break
    return out


def _gate_literals() -> tuple[str, ...]:
    global _GATE_LITERALS
    if _GATE_LITERALS is None:
        literals = _GATE._gate()  # sets `_lower`
        # A case-sensitive gate's literals cannot be tested on the lower-cased copy.
        _GATE_LITERALS = _minimal(literals) if _GATE._lower else ()
    return _GATE_LITERALS


_GATE_LITERALS: tuple[str, ...] | None = None


def read_series(a: Analysis) -> dict[str, list[Sample]]:
    """metric → samples in order (computed once per analysis)."""
    cached: dict[str, list[Sample]] | None = getattr(a, "_series", None)
    if cached is not None:
        return cached
    out: dict[str, list[Sample]] = {}
    # Per-rank time fields (`step=15 dt=559.6ms` on every rank) are a job-wide series too: in
    # a synchronous job every rank's step lasts as long as the slowest one's, so when they all
    # rise together the whole job slowed down. The actor printing most stands for all.
    fields: dict[str, dict[object, list[Sample]]] = {}
    names: dict[str, str] = {}  # field key → its metric name (made once, not on every line)
    time_literals = _TIME_GATE._gate()
    time_folded = _TIME_GATE._lower
    for order, entry in enumerate(a.lines):
        text = entry.text
        if text.startswith("#"):
            continue
        low = text.lower() if text.isascii() else None
        for sample in _samples(order, text, low):
            out.setdefault(sample.metric, []).append(sample)
        hay = low if time_folded else text
        if hay is not None:
            for literal in time_literals:
                if literal in hay:
                    break
            else:
                # Separated fields with a unit (`| data 0.011s | log_samples 0.44s |`,
                # AverageMeter's `Time  0.781 ( 0.70)\t`) name no time key.
                for literal in _SEPARATED_UNIT:
                    if literal in text:
                        break
                else:
                    # Nor do space-separated phases (`step 0.530s data 0.016s`), nor a last
                    # separated cell at the line's end (`| step 0.587s`).
                    if SPACED_HINT.search(text) is None and SEPARATED_END.search(text) is None:
                        continue
        prefix = strip_prefixes(text)
        actor = prefix.task if prefix.task is not None else prefix.rank
        for key, ms in timing_fields(prefix.body).items():
            metric = names.get(key) or names.setdefault(key, f"field:{key}")
            by_actor = fields.get(metric)
            if by_actor is None:
                by_actor = fields[metric] = {}
            taken = by_actor.get(actor)
            if taken is None:
                taken = by_actor[actor] = []
            taken.append(Sample(order, metric, ms, True))
    a._actor_fields = fields  # type: ignore[attr-defined]
    for metric, by_actor in fields.items():
        taken = max(by_actor.values(), key=len)
        if len(taken) >= 2:
            out.setdefault(metric, taken)
    a._series = out  # type: ignore[attr-defined]
    return out


def actor_fields(a: Analysis) -> dict[str, dict[object, list[Sample]]]:
    """`field:<key>` → actor (srun task, else rank, else None) → that actor's samples: the
    per-rank time fields whatever the topology knows of the actors' nodes."""
    read_series(a)
    fields: dict[str, dict[object, list[Sample]]] = a._actor_fields  # type: ignore[attr-defined]
    return fields


def last_sample_order(a: Analysis) -> int | None:
    """The last line whose sample shows the job working: a throughput of zero (an idle
    inference engine's `generation throughput: 0.0 tokens/s`, every 10 s while the trainer
    waits on it) is no progress."""
    orders = [
        order
        for s in read_series(a).values()
        if len(s) >= 2
        and (order := next((x.order for x in reversed(s) if x.lower_is_better or x.value > 0),
                           None)) is not None
    ]  # fmt: skip
    return max(orders) if orders else None


def _slowness(sample: Sample, baseline: float) -> float:
    """How many times slower than the baseline this sample is (>1 slower)."""
    if sample.lower_is_better:
        return sample.value / baseline if baseline > 0 else 1.0
    return baseline / sample.value if sample.value > 0 else math.inf


def _tight(values: list[float]) -> bool:
    """The values' median absolute deviation is within TIGHT_SPREAD of their median."""
    centre = statistics.median(values)
    spread = statistics.median(abs(v - centre) for v in values)
    return centre > 0 and spread <= TIGHT_SPREAD * centre


def jobwide_slowdown(a: Analysis) -> Slowdown | None:
    """The strongest sustained slowdown at the end of any job-wide series."""
    best: Slowdown | None = None
    for metric, samples in read_series(a).items():
        if len(samples) <= WARMUP_SAMPLES:
            continue  # too short to hold a warm-up and a steady part (median of nothing)
        # The first intervals are skipped only where they show the warm-up (slower than what
        # follows): a log that starts mid-run has none, and every steady sample counts.
        steady = statistics.median(s.value for s in samples[WARMUP_SAMPLES : WARMUP_SAMPLES + 5])
        warm = sum(
            1 for s in samples[:WARMUP_SAMPLES] if steady > 0 and _slowness(s, steady) >= 1.1
        )
        if len(samples) < warm + MIN_TIGHT_BASELINE_SAMPLES + RECENT_SAMPLES:
            step = _step_change(a, metric, samples[warm:])
            if step is not None and (best is None or step.ratio > best.ratio):
                best = step
            continue
        body = samples[warm:]
        if all(x.value < y.value for x, y in itertools.pairwise(body)):
            continue  # a running total (`train_wall=756`, an elapsed time), not a rhythm
        # The slow run at the end: walk back while samples stay slow against the early part.
        early = statistics.median(
            s.value for s in body[: max(MIN_BASELINE_SAMPLES, len(body) // 3)]
        )
        if early <= 0:
            continue
        for threshold in (SLOWDOWN_RATIO, TIGHT_SLOWDOWN_RATIO):
            run = 0
            while run < len(body) and _slowness(body[-1 - run], early) >= threshold:
                run += 1
            before = [s.value for s in body[: len(body) - run]]
            tight = len(before) >= MIN_TIGHT_BASELINE_SAMPLES and _tight(before)
            if run < RECENT_SAMPLES or (len(before) < MIN_BASELINE_SAMPLES and not tight):
                continue
            if threshold < SLOWDOWN_RATIO and not tight:
                continue
            baseline = statistics.median(before)
            recent = statistics.median(s.value for s in body[len(body) - run :])
            ratio = _slowness(Sample(0, metric, recent, samples[0].lower_is_better), baseline)
            if ratio < threshold:
                continue
            if (metric == "iteration_ms" or metric.startswith("field:")) and (
                recent - baseline < MIN_SLOWDOWN_MS
            ):
                continue  # timer noise of very short steps
            onset = body[len(body) - run].order
            found = Slowdown(
                metric, baseline, recent, ratio, onset,
                [a.lines[body[len(body) - run - 1].order], a.lines[onset],
                 a.lines[body[-1].order]],
            )  # fmt: skip
            if best is None or found.ratio > best.ratio:
                best = found
            break
    return best


def _within(values: list[float], spread: float) -> bool:
    centre = statistics.median(values)
    return centre > 0 and all(abs(v - centre) <= spread * centre for v in values)


def _step_change(a: Analysis, metric: str, body: list[Sample]) -> Slowdown | None:
    """A short series whose last MIN_STEP_AFTER samples or more are all STEP_RATIO slower than
    the steady ones before them: a new, slower rhythm (a few progress reports far apart)."""
    if len(body) < 1 + MIN_STEP_AFTER:
        return None
    first = body[0].value
    run = 0
    while run < len(body) - 1 and _slowness(body[-1 - run], first) >= STEP_RATIO:
        run += 1
    before = [s.value for s in body[: len(body) - run]]
    after = [s.value for s in body[len(body) - run :]]
    if run < MIN_STEP_AFTER or not _within(before, STEP_SPREAD) or not _within(after, STEP_SPREAD):
        return None
    baseline, recent = statistics.median(before), statistics.median(after)
    ratio = _slowness(Sample(0, metric, recent, body[0].lower_is_better), baseline)
    if ratio < STEP_RATIO:
        return None
    if (metric == "iteration_ms" or metric.startswith("field:")) and (
        recent - baseline < MIN_SLOWDOWN_MS
    ):
        return None
    onset = body[len(body) - run].order
    return Slowdown(
        metric, baseline, recent, ratio, onset,
        [a.lines[body[len(body) - run - 1].order], a.lines[onset], a.lines[body[-1].order]],
    )  # fmt: skip
