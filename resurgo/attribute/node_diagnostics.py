"""Why a slow node is slow, from its diagnostic output (`node_<host>.txt`: nvidia-smi -q,
ibstat/mlxlink, cpupower, tuned-adm).

A straggler's culprit is found from the job's timings; its category comes from what the node
itself reports. Each entry: (pattern, category, what it means, public source).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import Category, LogLine

_SLOW_CAUSES: list[tuple[re.Pattern[str], Category, str, str]] = [
    (re.compile(r"^\s*Applications Clocks Setting\s*:\s*Active\b"), Category.SYSTEM_SOFTWARE,
     "GPU application clocks left set (nvidia-smi -ac)",
     "NVIDIA nvidia-smi(1): Clocks Event Reasons, Applications Clocks Setting"),
    (re.compile(r"^\s*HW Power Brake Slowdown\s*:\s*Active\b"), Category.HARDWARE_HOST,
     "GPU power brake asserted by the system (power supply)",
     "NVIDIA nvidia-smi(1): Clocks Event Reasons, HW Power Brake Slowdown"),
    (re.compile(r"^\s*(?:HW|SW) Thermal Slowdown\s*:\s*Active\b"), Category.HARDWARE_GPU,
     "GPU thermal slowdown", "NVIDIA nvidia-smi(1): Clocks Event Reasons, Thermal Slowdown"),
    (re.compile(r"^\s*Width\s*:\s*[12]x\b"), Category.HARDWARE_NETWORK,
     "InfiniBand link trained below 4x width", "NVIDIA MFT mlxlink: Width (4x expected)"),
    (re.compile(r'\bThe governor "powersave"'), Category.SYSTEM_SOFTWARE,
     "CPU frequency governor left at powersave", "Linux cpupower-frequency-info(1)"),
    (re.compile(r"^\s*Current active profile:\s*powersave\b"), Category.SYSTEM_SOFTWARE,
     "tuned profile powersave", "tuned-adm(8): active profile"),
]  # fmt: skip
_IB_RATE = re.compile(r"^\s*Rate:\s*(\d{2,4})\s*$")


def _causes(lines: list[LogLine]) -> list[tuple[Category, LogLine]]:
    found: list[tuple[Category, LogLine]] = []
    rates: list[tuple[int, LogLine]] = []
    for entry in lines:
        text = entry.text
        for regex, category, _what, _source in _SLOW_CAUSES:
            if regex.search(text):
                found.append((category, entry))
                break
        if (m := _IB_RATE.match(text)) is not None:
            rates.append((int(m.group(1)), entry))
    if len(rates) >= 2 and min(r for r, _ in rates) < max(r for r, _ in rates):
        # ibstat(8): one port of the node at a lower rate than its siblings is a degraded link.
        slowest = min(rates, key=lambda r: r[0])
        found.append((Category.HARDWARE_NETWORK, slowest[1]))
    return found


def diagnose_slow_nodes(a: Analysis, culprits: list[str]) -> tuple[Category, list[LogLine]] | None:
    """The category the slow nodes' own diagnostics give, with the lines that say so."""
    found: list[tuple[Category, LogLine]] = []
    for node in culprits:
        for name, lines in a.node_logs.items():
            if a.topo.hosts.canonical(name) == node or name == node:
                found += _causes([e for e in lines if e.source.startswith("node_")])
    if not found:
        return None
    return found[0][0], [line for category, line in found if category == found[0][0]][:3]
