"""A node of the job that enumerates fewer GPUs than its peers: a board gone from the bus.

`nvidia-smi` lists every GPU the driver found, one table row per board with its PCI bus id, or
one `GPU N: <name>` line per board with `-L`. When the bundle holds that listing for several
of the job's nodes and one lists fewer boards than all the others do (they agree among
themselves), that node lost one: a GPU fallen off the bus or not initialised at boot
(attribution-labels.md: a GPU missing from its node is the board's, hardware_gpu), and the rank
bound to the missing device fails (`CUDA_ERROR_INVALID_DEVICE`, `invalid device ordinal`).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import LogLine

# `|   0  GeForce GTX 680     Off  | 0000:03:00.0     N/A |` and `GPU 3: NVIDIA A100-SXM4-80GB`.
_TABLE_ROW = re.compile(
    r"^\|\s{1,6}(\d{1,2})\s{1,4}\S.{0,60}?\|\s*(?:0000|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:"
)
_LIST_ROW = re.compile(r"^GPU (\d{1,2}): \S")


def fewer_gpus_than_peers(a: Analysis, node: str) -> LogLine | None:
    """`node`'s nvidia-smi listing, when it shows fewer GPUs than every other listed node."""
    counts: dict[str, set[str]] = {}
    first: dict[str, LogLine] = {}
    for host, lines in a.node_logs.items():
        name = a.topo.hosts.canonical(host)
        if name is None or not a.in_job(name):
            continue
        for entry in lines:
            text = entry.text
            m = _TABLE_ROW.match(text) if text.startswith("|") else _LIST_ROW.match(text)
            if m is not None:
                counts.setdefault(name, set()).add(m.group(1))
                first.setdefault(name, entry)
    if node not in counts or len(counts) < 2:
        return None
    others = {len(gpus) for host, gpus in counts.items() if host != node}
    if len(others) != 1 or len(counts[node]) >= others.pop():
        return None
    return first[node]
