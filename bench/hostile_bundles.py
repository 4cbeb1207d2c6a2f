"""Attribution cost of hostile lines in a bundle's job output and node files.

    .venv/bin/python bench/hostile_bundles.py [--lines 200] [--kib 8] [--repeat 3]

`bench/hostile_lines.py` measures the live watch's registry scan. Attribution reads the same
text again with its own readers, several of them built for one kind of node file: a firewall's
REJECT/DROP log (`firewall`), a port going down and coming back (`link_recovery`), slurmctld's
node updates (`node_removals`), a job's own Python environment (`own_environment`), a store
port taken twice (`store_clash`), Open MPI's first process to exit (`rank_finished`), a
checkpoint save's time (`periodic_work`), srun's step id (`log_header`), an alive note's clock
(`liveness`), init_process_group's arguments (`stages_launch`), DCP's relayed tracebacks
(`job_log`), a store host in hostlist syntax (`store_address`), a NIC's link events
(`link_recovery`). Each hostile shape repeats the fragment one of them looks for, without ever
completing a match, to `--kib` KiB per line: the shape that makes a regex with a lazy or
unbounded gap try every start. Every shape fills the job's output and one node's dmesg file
with `--lines` such lines.

Printed: CPU seconds per MiB of text attributed, for an ordinary bundle of the same size (the
baseline, measured in the same run) and for each hostile shape, and the ratio. A ratio near 1
is a reader that stays linear on its worst input; a ratio in the tens is a gap to bound. Each
figure is the median of `--repeat` runs. Only reports; exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resurgo.attribute.bundle import Bundle
from resurgo.attribute.rules import attribute_bundle
from resurgo.contracts import LogLine
from resurgo.detect.registry import Registry

NODES = ["gpu001", "gpu002"]
ORDINARY_JOB = "0: [rank0]: iteration 1200 | loss 2.3457 | grad norm 0.812 | 412.3 ms/step"
ORDINARY_NODE = "[Mon Nov 11 10:02:11 2024] mlx5_core 0000:9a:00.0: poll_health:801 health ok"
# Fragments that open a match and never close it (what each reader's regex looks for first).
SHAPES = {
    "firewall REJECT": "REJECT IN=eth0 OUT= SRC=10.0.0.1 ",
    "firewall SRC": "IN= SRC=10.0.0.1 DST=gpu001 ",
    "port down": "mlx5_0: Port: 1 Link ",
    "slurmctld update": "update_node: node gpu001 reason set to: ",
    "site-packages": "/home/u/.venv/lib/python",
    "store clash": "RuntimeError: port: 29500 ",
    "first to exit": "Process name: [[1,2],",
    "py-spy thread": 'Thread 0x7f (idle): "',
    "checkpoint save": "saved checkpoint to /ckpt/iter_0001200 in ",
    "srun step": "srun: Terminating ",
    "alive note": "# job still running at 13:",
    "process group": "init_process_group(backend='nccl', world_size=",
    "relayed traceback": "Traceback (most recent call last): (RANK ",
    "store hostlist": "[c10d] socket to (gpu-b[12-",
    "link pair": "cxi_core 0000:c1:00.0: cxi0[hsn0] CXI_EVENT_LINK_",
    # A key, then a long blank run and no value: two open `\s*` around an optional `=` try
    # every split of the run (progress's `step`, the timing readers' `| max`, a tab-separated
    # field, a note's `nodes`, a rich traceback frame's box).
    "blank run after step": "step" + " " * 4000,
    "blank run after a cell": "| max" + " " * 4000,
    "tabs before a field": "\t" * 4000 + "mfu",
    "blank run after nodes": "# nodes" + " " * 4000,
    "blank run in a frame": "│ /a.py:1 in f" + " " * 4000,
}


def _bundle(job_line: str, node_line: str, lines: int, kib: int) -> Bundle:
    def fill(fragment: str) -> str:
        return (fragment * (kib * 1024 // len(fragment) + 1))[: kib * 1024]

    job = [fill(job_line) if job_line else ORDINARY_JOB for _ in range(lines)]
    node = [fill(node_line) if node_line else ORDINARY_NODE for _ in range(lines)]
    facts = "JobId=1 JobState=FAILED NodeList=gpu[001-002] NumTasks=2"
    return Bundle(
        path=Path("."),
        job=[LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(job)],
        scheduler=[LogLine(source="scheduler.txt", line_no=1, text=facts)],
        metrics=[],
        node_logs={
            "gpu002": [
                LogLine(source="dmesg_gpu002.txt", line_no=i + 1, text=t)
                for i, t in enumerate(node)
            ]
        },
    )


def _seconds_per_mib(bundle: Bundle, registry: Registry, repeat: int) -> float:
    size = sum(len(e.text) for e in bundle.job) + sum(
        len(e.text) for lines in bundle.node_logs.values() for e in lines
    )
    spent = []
    for _ in range(repeat):
        start = time.process_time()
        attribute_bundle(bundle, registry)
        spent.append(time.process_time() - start)
    return statistics.median(spent) / (size / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--kib", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    registry = Registry.default()
    # The baseline: ordinary lines, as many bytes as a hostile bundle holds.
    per_line = len(ORDINARY_JOB) + len(ORDINARY_NODE)
    count = args.lines * args.kib * 1024 * 2 // per_line
    base = _seconds_per_mib(_bundle("", "", count, args.kib), registry, args.repeat)
    table = Table(title=f"attribution CPU per MiB ({args.lines} lines of {args.kib} KiB per file)")
    for column in ("shape", "s / MiB", "x ordinary"):
        table.add_column(column, justify="left" if column == "shape" else "right")
    table.add_row("ordinary lines (baseline)", f"{base:.3f}", "1.0")
    for name, fragment in SHAPES.items():
        cost = _seconds_per_mib(
            _bundle(fragment, fragment, args.lines, args.kib), registry, args.repeat
        )
        table.add_row(name, f"{cost:.3f}", f"{cost / base:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
