"""Start-up cost of the `resurgo` CLI: wall time of whole commands, against bare Python.

    .venv/bin/python bench/cli_startup.py [--runs 7] [--bundle tests/corpus/<bundle>]

Prints one table: median and best wall time, and median CPU time (user + system of the child),
of `python -c pass` (the baseline, measured in the same run), `resurgo --help`, and
`resurgo attribute BUNDLE --json` (target: < 0.5 s). On a busy machine wall time grows with
the load; CPU time does not, and on an idle one the two agree (the CLI is single-threaded).
Exit 1 when the attribute command misses the target in CPU time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.5


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, start = _children_cpu(), time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--bundle", default="tests/corpus/cancelled-by-owner-2n")
    args = parser.parse_args()
    python = sys.executable
    resurgo = [python, "-m", "resurgo.cli.main"]
    cases = [
        ("python -c pass (baseline)", [python, "-c", "pass"]),
        ("resurgo --help", [*resurgo, "--help"]),
        (f"resurgo attribute {args.bundle} --json", [*resurgo, "attribute", args.bundle, "--json"]),
    ]
    table = Table("command", "median s", "best s", "median CPU s", "over baseline s", "target")
    baseline = None
    missed = False
    for name, cmd in cases:
        walls, cpus = _timed(cmd, args.runs)
        median, best, cpu = statistics.median(walls), min(walls), statistics.median(cpus)
        baseline = median if baseline is None else baseline
        target = ""
        if "attribute" in name:
            missed = cpu >= TARGET_SECONDS
            target = f"< {TARGET_SECONDS} s CPU " + ("MISSED" if missed else "ok")
        over = median - baseline
        table.add_row(name, f"{median:.3f}", f"{best:.3f}", f"{cpu:.3f}", f"{over:.3f}", target)
    Console(width=140).print(table)
    if missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
