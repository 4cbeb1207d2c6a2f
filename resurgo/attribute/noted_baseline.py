"""A running job slower than the same job ran before, by an operator's note, and the job's own
reasons for a job-wide slowdown.

A job slow from its first step shows no change of rhythm in its own output; what shows it is a
note beside the logs giving the rate of the same model or configuration elsewhere (`# same
model/config with num_workers=8 (job 60812, same nodes, last week) ran at 3.9-4.1 it/s`, `# the
same example on one node reports step_time = 0.012315`). attribution-labels.md: a job-wide
slowdown is a straggler; with no culprit and no cause it is left running.

Causes the job owns (an application straggler, left running):
- CUDA_LAUNCH_BLOCKING=1 in the job's environment (a debugging switch: every launch waits);
- its DataLoader starved of workers: Lightning warns `The 'train_dataloader' does not have many
  workers which may be a bottleneck` (lightning/pytorch/trainer/connectors/data_connector.py);
- NCCL over TCP sockets because the container the job launches cannot load the RDMA userspace
  (`misc/ibvwrap.cc ... NCCL WARN Failed to open libibverbs.so[.1]`, then `Using network
  Socket`) on nodes whose InfiniBand ports are up: the job's image lacks rdma-core.
"""

from __future__ import annotations

import itertools
import re
import statistics

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.bundle import stamp_in
from resurgo.attribute.series import RECENT_SAMPLES, Sample, Slowdown, read_series
from resurgo.contracts import LogLine
from resurgo.detect.progress import ProgressParser

_STEP_FIELDS = [
    "field:step_time", "field:time", "field:batch_time", "field:iter_time", "field:step"
]  # fmt: skip
NOTED_SLOWDOWN = 1.05  # the recent rate's slowness against the noted one that makes a straggler

_SAME = re.compile(
    r"(?i)\b(?:same (?:model|config\w*|script|job|example|run|code|setup|toml|yaml|recipe|command)|"
    r"reference(?: run)?|"
    r"baseline|previous run|earlier run|last week|"
    # (a smaller run of the job quoted beside it: `# single-node 8-GPU run (job 30114): ...`)
    r"(?:single|one|1)[- ]node (?:\d+[- ]GPU )?run)\b"
)
# A rate in a note: `3.9-4.1 it/s`, `1.47 s/it`, `9800 samples/s`, `step_time = 0.012315`.
_RATE = re.compile(
    r"(?i)(?<![\w.])(?P<lo>\d+(?:\.\d+)?)(?:\s*-\s*(?P<hi>\d+(?:\.\d+)?))?\s*"
    r"(?P<unit>it/s|steps?/s|s/it(?:er)?|s/step|samples?/s|tok(?:en)?s/s|im(?:g|ages)/s(?:ec)?"
    r"|TFLOP/s|TFLOPs?(?:/GPU)?|batches_per_sec|tokens_per_sec)\b"
    r"|\bstep_time\s*[=:]\s*(?P<step>\d+(?:\.\d+)?)\s*(?P<step_unit>ms|s)?\b"
    # the unit before the number, as trainers print it: DiT's `Train Steps/Sec: 2.94`, ms-swift's
    # `train_speed(iter/s) 0.194`; and MetricLogger's `time: 0.2441 per iter` (seconds)
    r"|\b(?P<unit2>steps?/sec|iter/s)\)?[:=]?\s*(?P<val2>\d+(?:\.\d+)?)"
    r"|\btime[:=]?\s*~?(?P<per>\d+(?:\.\d+)?)\s*(?:s\s*)?per iter(?:ation)?\b"
    # Megatron's own field quoted: `elapsed time per iteration (ms): 4480`
    r"|\bper iteration \(ms\):\s*(?P<itms>\d+(?:\.\d+)?)"
    # torchtitan's `tps` (tokens per second per GPU) as a note quotes it: `tps ~3,300`
    r"|\btps\s{0,3}[=:~]?\s{0,3}~?(?P<tps>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\b"
    # model FLOPs utilisation, in percent or as verl's fraction: `perf/mfu/actor around 0.5`
    # (one run of blanks on each side of the optional word: no two `\s*` compete for them)
    r"|(?i:\bmfu)(?:/\w{1,20})?\s{0,3}(?:(?:[:=]|around|about|of|at|is)\s{0,3})?~?"
    r"(?P<mfu>\d+(?:\.\d+)?)"
    r"(?P<mfu_pct>\s*%)?"
)
_METRIC = {
    "it/s": ("it_per_s", 1.0), "s/it": ("iteration_ms", 1000.0),
    "step/s": ("it_per_s", 1.0), "steps/s": ("it_per_s", 1.0), "steps/sec": ("it_per_s", 1.0),
    "batches_per_sec": ("it_per_s", 1.0), "tokens_per_sec": ("tokens_per_s", 1.0),
    "images/sec": ("images_per_s", 1.0), "img/sec": ("images_per_s", 1.0),
    "tflops": ("tflops", 1.0), "tflop": ("tflops", 1.0), "tflops/gpu": ("tflops", 1.0),
    "tflop/gpu": ("tflops", 1.0),
    "step/sec": ("it_per_s", 1.0), "iter/s": ("it_per_s", 1.0),
    "s/iter": ("iteration_ms", 1000.0), "s/step": ("iteration_ms", 1000.0),
    "samples/s": ("samples_per_s", 1.0), "sample/s": ("samples_per_s", 1.0),
    "tokens/s": ("tokens_per_s", 1.0), "toks/s": ("tokens_per_s", 1.0),
    "img/s": ("images_per_s", 1.0), "images/s": ("images_per_s", 1.0),
    "tflop/s": ("tflops", 1.0),
}  # fmt: skip


# A note that states the drop itself: `# throughput 18% below the same config last week`.
_PCT_BELOW = re.compile(
    r"(?i)\b(?P<pct>\d{1,2}(?:\.\d+)?)\s*% (?:below|slower than|lower than|less than|under)\b"
)


def slower_than_noted(a: Analysis) -> Slowdown | None:
    """The job's recent rate against the rate a note gives for the same job elsewhere, or the
    drop a note states against it."""
    series = read_series(a)
    for note in _notes(a):
        if (p := _PCT_BELOW.search(note.text)) is not None and _SAME.search(note.text):
            ratio = 100.0 / (100.0 - float(p["pct"]))
            if ratio >= NOTED_SLOWDOWN:
                return Slowdown("throughput (noted)", 100.0, 100.0 - float(p["pct"]), ratio,
                                0, [note])  # fmt: skip
        m = _RATE.search(note.text)
        if m is None or not _SAME.search(note.text):
            continue
        if m["tps"] is not None:
            candidates = ["tokens_per_s"]
            noted = float(m["tps"].replace(",", ""))
        elif m["step"] is not None or m["per"] is not None or m["itms"] is not None:
            factor = 1.0 if m["step_unit"] == "ms" or m["itms"] else 1000.0
            candidates = ["iteration_ms", *_STEP_FIELDS]
            noted = float(m["step"] or m["per"] or m["itms"]) * factor
        elif m["mfu"] is not None:
            candidates = ["mfu"]
            value = float(m["mfu"])
            noted = value if m["mfu_pct"] or value > 1 else value * 100.0  # (kept in percent)
        elif m["unit2"] is not None:
            candidates = ["it_per_s"]
            noted = float(m["val2"])
        else:
            metric, factor = _METRIC.get(m["unit"].lower(), ("", 1.0))
            # (a time per iteration is also what a trainer's own `time:` field prints)
            candidates = [metric, *(_STEP_FIELDS if metric == "iteration_ms" else [])]
            lo, hi = float(m["lo"]), float(m["hi"] or m["lo"])
            noted = (lo + hi) / 2 * factor
        for metric in candidates:
            samples = series.get(metric, []) or (_step_rate(a) if metric == "it_per_s" else [])
            if len(samples) < RECENT_SAMPLES or noted <= 0:
                continue
            recent = statistics.median(s.value for s in samples[-RECENT_SAMPLES:])
            lower = samples[-1].lower_is_better
            ratio = recent / noted if lower else (noted / recent if recent > 0 else 0.0)
            if ratio >= NOTED_SLOWDOWN:
                last: Sample = samples[-1]
                return Slowdown(metric, noted, recent, ratio, samples[0].order,
                                [note, a.lines[last.order]])  # fmt: skip
    return None


def _step_rate(a: Analysis) -> list[Sample]:
    """Steps per second between consecutive dated progress lines (the job prints no rate of its
    own: fairchem's `... step: 2.0000e+03` under a time stamp), for a noted rate in steps/s.
    Worked out once per analysis: every note with a rate in steps/s asks."""
    return a.once("noted_baseline:step_rate", lambda: _dated_step_rate(a))


def _dated_step_rate(a: Analysis) -> list[Sample]:
    parser = ProgressParser()
    points = [
        (o, step, at)
        for o in a.scan.advances[-(RECENT_SAMPLES * 4) :]
        if (step := parser.parse(a.lines[o].text)) is not None
        and (at := stamp_in(a.lines[o].text)) is not None
    ]
    return [
        Sample(o2, "it_per_s", (s2 - s1) / seconds, False)
        for (_, s1, t1), (o2, s2, t2) in itertools.pairwise(points)
        if (seconds := (t2 - t1).total_seconds()) > 0 and s2 > s1
    ]


def _notes(a: Analysis) -> list[LogLine]:
    """The first 200 operator notes (`#` lines) of the output, then the scheduler text."""
    found = (e for e in itertools.chain(a.lines, a.facts.lines) if e.text.lstrip().startswith("#"))
    return list(itertools.islice(found, 200))


# CUDA_LAUNCH_BLOCKING=1 makes every kernel launch synchronous, for debugging only (CUDA
# Programming Guide, 'Asynchronous Concurrent Execution'; PyTorch's CUDA semantics notes), set
# by the job: its environment printout, its script's trace, or a note quoting the script.
_LAUNCH_BLOCKING = re.compile(r"(?:^|[\s+:'\"])(?:export )?CUDA_LAUNCH_BLOCKING=['\"]?1\b")
_FEW_WORKERS = re.compile(r"The '(?:train|training)_dataloader' does not have many workers")
_NO_VERBS = re.compile(r"\bNCCL WARN Failed to open libibverbs\.so")
_SOCKETS = re.compile(r"\bNCCL INFO Using network Socket\b")
_CONTAINER = re.compile(
    r"--container-image[= ]|\b(?:singularity|apptainer) (?:exec|run|shell)\b|"
    r"\b(?:docker|podman) run\b|\benroot start\b"
)
_IB_UP = re.compile(r"^\s*State:\s*Active\s*$|\bHDR|\bNDR|\bEDR|\bInfiniBand\b", re.I)


def own_slowdown_cause(a: Analysis) -> tuple[str, list[LogLine]] | None:
    """What in the job's own configuration slows every step, where its output shows it."""
    head = a.lines[:2000]
    notes = [
        e for e in [*a.header, *head[:200], *a.facts.lines] if "CUDA_LAUNCH_BLOCKING" in e.text
    ]
    if blocking := [e for e in notes if _LAUNCH_BLOCKING.search(e.text)]:
        return (
            "the job runs with CUDA_LAUNCH_BLOCKING=1 (every kernel launch synchronous)",
            blocking[:1],
        )
    if few := [e for e in head if "dataloader" in e.text and _FEW_WORKERS.search(e.text)]:
        return "its DataLoader has too few workers (Lightning warns it is a bottleneck)", few[:1]
    no_verbs = next((e for e in head if "libibverbs" in e.text and _NO_VERBS.search(e.text)), None)
    sockets = next((e for e in head if "Socket" in e.text and _SOCKETS.search(e.text)), None)
    launch = next((e for e in [*a.header, *head[:200]] if _CONTAINER.search(e.text)), None)
    if no_verbs and sockets and launch:
        files = [*a.node_logs.values(), a.header]
        if any(_IB_UP.search(e.text) for lines in files for e in lines):
            return (
                "NCCL in the container the job launches cannot load libibverbs and runs over "
                "TCP sockets on nodes with InfiniBand (the job's image lacks the RDMA userspace)",
                [launch, no_verbs, sockets],
            )
    return None
