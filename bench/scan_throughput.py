"""Failure-pattern scanning throughput with the full registry, on one core (issue #3).

    .venv/bin/python bench/scan_throughput.py [--lines 1000000] [--seed 3] [--repeat 5]
        [--min-lines-per-s 2000000] [--min-speedup 3] [--clock cpu|wall]

Generates a deterministic job log (seeded): about 99 % healthy lines (Megatron iteration lines,
NCCL INFO, Hugging Face / Lightning progress with tqdm bars, per-rank step timings, warnings),
most of them with `srun -l` task labels, and 1 % real failure lines taken from the registry's
examples. Then measures, in the same process on one core:
- naive: every entry's regex searched in every line (`Registry.scan_naive`), on a subsample;
- per-line: the per-line prefilter path (`Registry.scan`), on a subsample;
- chunk: `Registry.scan_chunk` over the whole log in batches of `--batch` lines (a 1 MiB read
  of the job's output is about 8,000 lines), with the engine `auto` picks (Hyperscan if
  installed), and the stdlib `re` fallback engine on a subsample for reference.
Each figure is the median of `--repeat` runs. Time is process CPU time by default (`--clock
cpu`): throughput per core, not distorted by other processes competing for the machine; `--clock
wall` uses the wall clock. The chunk results are checked against the naive and per-line ones on
their subsamples (a mismatch exits 2). Exits 1 if the chunk path is below `--min-lines-per-s` or
below `--min-speedup` times the naive baseline (pass 0 to only report).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from resurgo.detect.lines import split_srun_label  # noqa: E402
from resurgo.detect.registry import PatternMatch, Registry  # noqa: E402

Results = list[tuple[int, list[PatternMatch]]]


# ---------------------------------------------------------------------- the corpus
def make_corpus(n: int, seed: int, error_rate: float, registry: Registry) -> list[str]:
    rnd = random.Random(seed)
    examples = [ex for entry in registry.entries for ex in entry.examples]
    nodes = [f"node{i:03d}" for i in range(1, 17)]

    def megatron() -> str:
        it = rnd.randrange(1, 500_000)
        return (
            f" iteration {it:>8}/  500000 | consumed samples: {it * 512:>12} | elapsed time per"
            f" iteration (ms): {rnd.uniform(800, 1200):.1f} | learning rate: "
            f"{rnd.uniform(1e-5, 3e-4):.3E} | global batch size:   512 | lm loss: "
            f"{rnd.uniform(1.5, 4):.6E} | loss scale: 1.0 | grad norm: {rnd.uniform(0.1, 3):.3f} |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |"
        )

    def nccl() -> str:
        prefix = (
            f"{rnd.choice(nodes)}:{rnd.randrange(1000, 99999)}:{rnd.randrange(1000, 99999)}"
            f" [{rnd.randrange(8)}] NCCL INFO"
        )
        return prefix + rnd.choice(
            [
                f" Channel {rnd.randrange(32):02d}/32 :    0   1   2   3   4   5   6   7",
                f" comm 0x55d0c8e0 rank {rnd.randrange(128)} nranks 128 cudaDev "
                f"{rnd.randrange(8)} busId 3b000 - Init COMPLETE",
                " NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
                f" Channel {rnd.randrange(32):02d}/0 : {rnd.randrange(128)}[0] ->"
                f" {rnd.randrange(128)}[0] [send] via NET/IB/0/GDRDMA",
                " Connected all rings",
                " Using network IB",
            ]
        )

    def hf() -> str:
        done = rnd.randrange(1, 10_000)
        pct = done * 100 // 10_000
        bar = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
        return rnd.choice(
            [
                f"{{'loss': {rnd.uniform(0.2, 3):.4f}, 'grad_norm': {rnd.uniform(0.1, 3):.4f},"
                f" 'learning_rate': {rnd.uniform(1e-6, 1e-4):.4e}, 'epoch': "
                f"{rnd.uniform(0, 3):.2f}}}",
                f"{pct:3d}%|{bar}| {done}/10000 [{rnd.randrange(60):02d}:{rnd.randrange(60):02d}"
                f"<{rnd.randrange(60):02d}:{rnd.randrange(60):02d}, {rnd.uniform(1, 9):.2f}it/s]",
                f"Epoch {rnd.randrange(10)}: {pct:3d}%|{bar}| {done}/10000 [01:02<03:04, "
                f"{rnd.uniform(1, 9):.2f}it/s, v_num=0, train_loss={rnd.uniform(0.2, 3):.3f}]",
            ]
        )

    def timing() -> str:
        return (
            f"[rank{rnd.randrange(128)}] step={rnd.randrange(500_000)} "
            f"step_time_ms={rnd.uniform(55, 90):.1f} node={rnd.choice(nodes)}"
        )

    def warning() -> str:
        return rnd.choice(
            [
                "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning:"
                " This DataLoader will create 16 worker processes in total.",
                f"[rank{rnd.randrange(128)}]:[W reducer.cpp:1389] Warning: "
                "find_unused_parameters=True was specified in DDP constructor, but did not find"
                " any unused parameters in the forward pass.",
                "WARNING:torch.distributed.run: Setting OMP_NUM_THREADS environment variable for"
                " each process to be 1 in default",
                "wandb: WARNING Serializing object of type dict that is 8 bytes",
                f"[W socket.cpp:697] [c10d] The IPv6 network addresses of ({rnd.choice(nodes)},"
                " 29500) cannot be retrieved (gai error: -3 - Temporary failure in name"
                " resolution).",
                f"saving checkpoint at iteration {rnd.randrange(500_000):>7} to /ckpt/run1",
            ]
        )

    makers: list[Callable[[], str]] = [megatron] * 5 + [nccl] * 4 + [hf] * 3
    makers += [timing] * 6 + [warning] * 2
    lines: list[str] = []
    for _ in range(n):
        line = rnd.choice(examples) if rnd.random() < error_rate else rnd.choice(makers)()
        # Most jobs run under `srun -l`: a task label, unless the line already has one.
        if rnd.random() < 0.8 and split_srun_label(line)[0] is None:
            line = f"{rnd.randrange(128)}: {line}"
        lines.append(line)
    return lines


# ---------------------------------------------------------------------- measuring
def measure(fn: Callable[[], object], lines: int, repeat: int, clock: Callable[[], float]) -> float:
    """Median seconds per line over `repeat` runs."""
    times: list[float] = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times) / lines


def per_line(registry: Registry, lines: Sequence[str], naive: bool) -> Results:
    scan = registry.scan_naive if naive else registry.scan
    out: Results = []
    for index, line in enumerate(lines):
        matches = scan(line)
        if matches:
            out.append((index, matches))
    return out


def chunked(registry: Registry, lines: Sequence[str], batch: int) -> Results:
    out: Results = []
    for base in range(0, len(lines), batch):
        out.extend((base + i, m) for i, m in registry.scan_chunk(lines[base : base + batch]))
    return out


# The timed loops consume each batch's matches and drop them, as the watcher does with each read
# of the job's output (keeping a million lines' worth of matches would time the allocator).
def count_per_line(registry: Registry, lines: Sequence[str], naive: bool) -> int:
    scan = registry.scan_naive if naive else registry.scan
    return sum(1 for line in lines if scan(line))


def count_chunked(registry: Registry, lines: Sequence[str], batch: int) -> int:
    return sum(
        len(registry.scan_chunk(lines[base : base + batch])) for base in range(0, len(lines), batch)
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lines", type=int, default=1_000_000, help="corpus size (default 1000000)")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--error-rate", type=float, default=0.01)
    p.add_argument("--batch", type=int, default=8192, help="lines per scan_chunk call")
    p.add_argument("--naive-lines", type=int, default=3000, help="subsample for the baseline")
    p.add_argument("--per-line-lines", type=int, default=50_000, help="subsample, per-line path")
    p.add_argument("--fallback-lines", type=int, default=200_000, help="subsample, re engine")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--cpu", type=int, default=None, help="pin the process to this CPU")
    p.add_argument("--min-lines-per-s", type=float, default=2_000_000)
    p.add_argument("--min-speedup", type=float, default=3.0)
    args = p.parse_args(argv)
    console = Console(width=max(Console().width, 100))
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    registry = Registry.load()  # engine: $RESURGO_SCAN_ENGINE, else auto
    fallback = Registry.load(engine="re")
    corpus = make_corpus(args.lines, args.seed, args.error_rate, registry)
    size = sum(map(len, corpus))
    non_ascii = sum(not line.isascii() for line in corpus)
    rnd = random.Random(args.seed + 1)

    def sample(n: int) -> list[str]:
        if n >= len(corpus):
            return corpus
        start = rnd.randrange(len(corpus) - n + 1)
        return corpus[start : start + n]

    naive_lines = sample(args.naive_lines)
    line_lines = sample(args.per_line_lines)
    fallback_lines = sample(args.fallback_lines)

    # Correctness first: the chunk path equals the per-line and naive ones on their samples.
    chunk_result = chunked(registry, corpus, args.batch)
    checks = [
        ("naive", naive_lines, per_line(registry, naive_lines, naive=True)),
        ("per-line", line_lines, per_line(registry, line_lines, naive=False)),
    ]
    for name, lines, expected in checks:
        for engine_registry in (registry, fallback):
            if chunked(engine_registry, lines, args.batch) != expected:
                console.print(f"[red]MISMATCH: chunk ({engine_registry.scan_engine}) != {name}")
                return 2

    naive = measure(
        lambda: count_per_line(registry, naive_lines, True), len(naive_lines), args.repeat, clock
    )
    line = measure(
        lambda: count_per_line(registry, line_lines, False), len(line_lines), args.repeat, clock
    )
    chunk = measure(
        lambda: count_chunked(registry, corpus, args.batch), len(corpus), args.repeat, clock
    )
    rows = [
        ("naive: every regex, every line", "re", len(naive_lines), naive),
        ("per-line prefilter (scan)", "re", len(line_lines), line),
    ]
    if registry.scan_engine != "re":
        slow = measure(
            lambda: count_chunked(fallback, fallback_lines, args.batch),
            len(fallback_lines),
            args.repeat,
            clock,
        )
        rows.append(("chunk, fallback engine", "re", len(fallback_lines), slow))
    rows.append(("chunk (scan_chunk)", registry.scan_engine, len(corpus), chunk))

    table = Table(
        title=f"Pattern scan throughput, {len(registry)} patterns, one core "
        f"({args.clock} time, median of {args.repeat})"
    )
    for col in ("path", "engine", "lines timed", "lines/s", "µs/line", "vs naive"):
        table.add_column(col, justify="left" if col in ("path", "engine") else "right")
    for name, engine, n, per in rows:
        table.add_row(
            name, engine, f"{n:,}", f"{1 / per:,.0f}", f"{per * 1e6:.3f}", f"{naive / per:,.1f}x"
        )
    console.print(
        f"corpus: {len(corpus):,} lines, {size / 1e6:.1f} M characters "
        f"({size / len(corpus):.0f} per line), {non_ascii / len(corpus):.1%} lines non-ASCII, "
        f"{len(chunk_result):,} lines matched ({args.error_rate:.1%} error lines), seed "
        f"{args.seed}"
    )
    console.print(f"engine: {registry.scan_engine_detail}")
    console.print(f"python {platform.python_version()} on {platform.machine()}, pid {os.getpid()}")
    console.print(table)

    rate, speedup = 1 / chunk, naive / chunk
    ok = rate >= args.min_lines_per_s and speedup >= args.min_speedup
    verdict = "[green]PASS" if ok else "[red]FAIL"
    console.print(
        f"{verdict}[/]: chunk path {rate:,.0f} lines/s (target >= {args.min_lines_per_s:,.0f}),"
        f" {speedup:,.1f}x naive (target >= {args.min_speedup:g}x)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
