"""Attribution time against the size of the job's output: is it fast, and does it grow linearly?

Synthetic 512-rank jobs (64 nodes x 8 GPUs, srun labels and torchrun rank prefixes), four shapes:
- `crash` (the target): every rank prints progress, then the same fatal error, then NCCL and
  teardown noise (the shape that once made attribution quadratic);
- `megatron`: a healthy run, rank 0's Megatron iteration lines among every rank's INFO lines;
- `rank_timing`: every rank prints `step=... step_time_ms=... node=...`, one rank slower;
- `nccl_info`: NCCL INFO lines only (a job that stops in its first collective).

For each shape and size it prints the CPU time of `attribute_bundle` on one core, the cost per
line, the ratio to a floor measured in the same run (one regex search and one `lower()` per
line: the cheapest Python pass over those lines, so the ratio holds on a busy machine) and the
growth from the smallest to the largest size (linear: the size ratio). Exit 1 when the `crash`
shape's largest size takes 2 s or more, or any shape grows more than 1.5 times faster than
linear.

    .venv/bin/python bench/attribution_speed.py [--ranks 512] [--sizes 10000,100000]
                                                [--shapes crash,megatron,rank_timing,nccl_info]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resurgo.attribute.bundle import Bundle
from resurgo.attribute.rules import attribute_bundle
from resurgo.contracts import LogLine
from resurgo.detect.registry import Registry

GPUS = 8
TARGET_SECONDS = 2.0
TARGET_SHAPE = "crash"
_FLOOR = re.compile(r"error|warn", re.IGNORECASE)


def crash_lines(total: int, ranks: int) -> list[str]:
    nodes = max(1, ranks // GPUS)
    out: list[str] = []
    fatal = [
        "[rank{r}]: Traceback (most recent call last):",
        '[rank{r}]:   File "/work/train.py", line 88, in <module>',
        "[rank{r}]:     loss = step(batch)",
        "[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank{r}]:[E ProcessGroupNCCL.cpp:1182] [Rank {r}] NCCL watchdog thread terminated "
        "with exception: NCCL error: unhandled system error",
        "[rank{r}]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank {r}",
    ]
    progress = max(0, total - ranks * len(fatal) - nodes)
    for i in range(progress):
        node, _local = divmod(i % ranks, GPUS)
        out.append(f"{node}: [rank{i % ranks}]: iteration {i // ranks} | loss 2.31 | 410 ms")
    while len(out) < total - nodes:
        for r in range(ranks):
            node = r // GPUS
            for template in fatal:
                out.append(f"{node}: " + template.format(r=r))
                if len(out) >= total - nodes:
                    break
            if len(out) >= total - nodes:
                break
    for n in range(nodes):
        out.append(f"srun: error: gpu{n:03d}: task {n}: Exited with exit code 1")
    return out[:total]


def megatron_lines(total: int, ranks: int) -> list[str]:
    out = []
    for i in range(total):
        rank, step = i % ranks, i // ranks
        if rank == 0:
            out.append(
                f" iteration {step:8d}/  100000 | consumed samples: {step * 512} | elapsed time "
                "per iteration (ms): 412.3 | learning rate: 1.0E-04 | lm loss: 2.3E+00 |"
            )
        else:
            out.append(
                f"{rank // GPUS}: [rank{rank}]: [2024-05-01 12:{step % 60:02d}:{rank % 60:02d}] "
                f"INFO step {step} tokens/s 12345 loss 2.31"
            )
    return out


def rank_timing_lines(total: int, ranks: int) -> list[str]:
    slow = ranks // 7
    return [
        f"{(i % ranks) // GPUS}: [rank{i % ranks}]: step={i // ranks} "
        f"step_time_ms={710 if i % ranks == slow else 410}.0 node=gpu{(i % ranks) // GPUS:03d}"
        for i in range(total)
    ]


def nccl_info_lines(total: int, ranks: int) -> list[str]:
    return [
        f"{(i % ranks) // GPUS}: gpu{(i % ranks) // GPUS:03d}:{1000 + i % ranks}:"
        f"{2000 + i % ranks} [{i % GPUS}] NCCL INFO Channel {i % 32:02d}/0 : {i % ranks} -> "
        f"{(i + 1) % ranks} via P2P/IPC"
        for i in range(total)
    ]


SHAPES: dict[str, tuple[Callable[[int, int], list[str]], str]] = {
    "crash": (crash_lines, "FAILED"),
    "megatron": (megatron_lines, "RUNNING"),
    "rank_timing": (rank_timing_lines, "RUNNING"),
    "nccl_info": (nccl_info_lines, "FAILED"),
}


def _bundle(texts: list[str], ranks: int, state: str) -> Bundle:
    nodes = max(1, ranks // GPUS)
    job = [LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(texts)]
    facts = f"JobId=1 JobState={state} NodeList=gpu[000-{nodes - 1:03d}] NumTasks={nodes}"
    scheduler = [LogLine(source="scheduler.txt", line_no=1, text=facts)]
    return Bundle(path=Path("."), job=job, scheduler=scheduler, metrics=[], node_logs={})


def timed(bundle: Bundle, registry: Registry) -> tuple[float, str]:
    start = time.process_time()
    attribution, _ = attribute_bundle(bundle, registry)
    return time.process_time() - start, f"{attribution.kind} {attribution.category.value}"


def floor(texts: list[str]) -> float:
    start = time.process_time()
    for text in texts:
        _FLOOR.search(text)
        text.lower()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    shapes = [s for s in args.shapes.split(",") if s]
    registry = Registry.default()
    for name in shapes:  # warm-up: registry, scan engine, every code path once
        make, state = SHAPES[name]
        timed(_bundle(make(2000, args.ranks), args.ranks, state), registry)
    print(f"{'shape':<12} {'lines':>8} {'cpu s':>7} {'us/line':>8} {'x floor':>8}  verdict")
    failed = []
    for name in shapes:
        make, state = SHAPES[name]
        seconds: list[float] = []
        for size in sizes:
            texts = make(size, args.ranks)
            bundle = _bundle(texts, args.ranks, state)
            spent, verdict = timed(bundle, registry)
            base = floor(texts)
            seconds.append(spent)
            ratio = spent / base if base > 0 else float("inf")
            print(f"{name:<12} {size:>8} {spent:>7.2f} {spent / size * 1e6:>8.1f} "
                  f"{ratio:>8.0f}  {verdict}")  # fmt: skip
            if name == TARGET_SHAPE and size == sizes[-1] and spent >= TARGET_SECONDS:
                failed.append(f"{name} {size} lines: {spent:.2f} s >= {TARGET_SECONDS} s")
        if len(sizes) >= 2 and seconds[0] > 0:
            grow, ratio = sizes[-1] / sizes[0], seconds[-1] / seconds[0]
            print(f"{'':<12} time ratio {ratio:.1f} for {grow:.0f}x the lines (linear: {grow:.0f})")
            if ratio > 1.5 * grow:
                failed.append(f"{name}: grows {ratio:.1f}x for {grow:.0f}x the lines")
    for problem in failed:
        print(f"MISSED: {problem}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
