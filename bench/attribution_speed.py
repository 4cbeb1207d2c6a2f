"""Attribution time against the size of the job's output: does it grow linearly?

A synthetic 512-rank job (64 nodes x 8 GPUs, srun labels and torchrun rank prefixes) whose
every rank prints progress, then the same fatal error, then the usual NCCL/teardown noise:
the shape that made attribution quadratic (each fatal line compared with every other).
Prints, for 10k and 100k lines, the wall time of `attribute_bundle` on one core and the ratio
of the two (linear growth is a ratio near 10).

    .venv/bin/python bench/attribution_speed.py [--ranks 512] [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resurgo.attribute.bundle import Bundle
from resurgo.attribute.rules import attribute_bundle
from resurgo.contracts import LogLine
from resurgo.detect.registry import Registry

GPUS = 8


def job_lines(total: int, ranks: int) -> list[LogLine]:
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
    return [LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(out[:total])]


def timed(lines: list[LogLine], registry: Registry, ranks: int) -> tuple[float, str]:
    nodes = max(1, ranks // GPUS)
    scheduler = [
        LogLine(source="scheduler.txt", line_no=1,
                text=f"JobId=1 JobState=FAILED NodeList=gpu[000-{nodes - 1:03d}] NumTasks={nodes}"),
    ]  # fmt: skip
    bundle = Bundle(path=Path("."), job=lines, scheduler=scheduler, metrics=[], node_logs={})
    start = time.process_time()
    attribution, _ = attribute_bundle(bundle, registry)
    return time.process_time() - start, f"{attribution.kind} {attribution.category.value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    registry = Registry.default()
    timed(job_lines(2000, args.ranks), registry, args.ranks)  # warm-up: registry, engines
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[tuple[int, float, str]] = []
    for size in sizes:
        lines = job_lines(size, args.ranks)
        seconds, verdict = timed(lines, registry, args.ranks)
        rows.append((size, seconds, verdict))
    print(f"{'lines':>8} {'ranks':>6} {'cpu s':>8} {'us/line':>8}  verdict")
    for size, seconds, verdict in rows:
        print(f"{size:>8} {args.ranks:>6} {seconds:>8.2f} {seconds / size * 1e6:>8.1f}  {verdict}")
    if len(rows) >= 2 and rows[0][1] > 0:
        grow = rows[-1][0] / rows[0][0]
        ratio = rows[-1][1] / rows[0][1]
        print(f"time ratio {ratio:.1f} for {grow:.0f}x the lines (linear: ~{grow:.0f})")


if __name__ == "__main__":
    main()
