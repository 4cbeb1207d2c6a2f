"""Start-up cost of the `resurgo` CLI: wall time of whole commands, against bare Python.

    .venv/bin/python bench/cli_startup.py [--runs 7] [--bundle tests/corpus/<bundle>]

Prints one table: median and best wall time, and median CPU time (user + system of the child),
of `python -c pass` (the baseline, measured in the same run), `resurgo --help`, and
`resurgo attribute BUNDLE --json` (target: < 0.5 s). On a busy machine wall time grows with
the load; CPU time does not, and on an idle one the two agree (the CLI is single-threaded).

Commands run as an installed package runs: with Python's bytecode cache (in a temporary
PYTHONPYCACHEPREFIX, warmed by one run, so the checkout gets no __pycache__). The attribute
command is also timed without any bytecode cache (`no .pyc` row; PYTHONDONTWRITEBYTECODE=1
in this environment), where every start compiles Resurgo's own sources first.
Exit 1 when the attribute command, with its bytecode cache, misses the target in CPU time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.5


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run (after one untimed run that fills the cache)."""
    walls, cpus = [], []
    quiet = subprocess.DEVNULL
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=quiet, stderr=quiet)
    for _ in range(runs):
        cpu, start = _children_cpu(), time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=quiet, stderr=quiet)
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
    attribute = [*resurgo, "attribute", args.bundle, "--json"]
    cache = tempfile.mkdtemp(prefix="resurgo-pycache-")
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = cache
    uncached = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    cases = [
        ("python -c pass (baseline)", [python, "-c", "pass"], cached),
        ("resurgo --help", [*resurgo, "--help"], cached),
        (f"resurgo attribute {args.bundle} --json", attribute, cached),
        ("  the same, no .pyc", attribute, uncached),
    ]
    table = Table("command", "median s", "best s", "median CPU s", "CPU / baseline", "target")
    baseline = None
    missed = False
    for name, cmd, env in cases:
        walls, cpus = _timed(cmd, args.runs, env)
        median, best, cpu = statistics.median(walls), min(walls), statistics.median(cpus)
        baseline = cpu if baseline is None else baseline
        target = ""
        if cmd is attribute and env is cached:
            missed = cpu >= TARGET_SECONDS
            target = f"< {TARGET_SECONDS} s CPU " + ("MISSED" if missed else "ok")
        ratio = f"{cpu / baseline:.1f}" if baseline > 0 else "-"
        table.add_row(name, f"{median:.3f}", f"{best:.3f}", f"{cpu:.3f}", ratio, target)
    Console(width=140).print(table)
    shutil.rmtree(cache, ignore_errors=True)
    if missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
