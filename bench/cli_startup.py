"""Start-up cost of the `resurgo` CLI: wall time of whole commands, against bare Python.

    .venv/bin/python bench/cli_startup.py [--runs 7] [--bundle tests/corpus/<bundle>]

Prints one table: median and best wall time of `python -c pass` (the baseline, measured in
the same run), `resurgo --help`, and `resurgo attribute BUNDLE --json` (target: < 0.5 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.5


def _wall(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


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
    table = Table("command", "median s", "best s", "over baseline s", "target")
    baseline = None
    for name, cmd in cases:
        times = _wall(cmd, args.runs)
        median, best = statistics.median(times), min(times)
        baseline = median if baseline is None else baseline
        target = ""
        if "attribute" in name:
            target = f"< {TARGET_SECONDS} s " + ("ok" if median < TARGET_SECONDS else "MISSED")
        table.add_row(name, f"{median:.3f}", f"{best:.3f}", f"{median - baseline:.3f}", target)
    Console().print(table)


if __name__ == "__main__":
    main()
