"""Scanning node-side files (kernel logs, journal, slurmd): root events per host.

`scan_node_logs` runs the job registry, then the node patterns, over each host's files and
attributes what it finds to the node the file belongs to, leaving out faults from well before
the job started. Kept apart from the job-log scan: these lines have no ranks or tasks, only a
host and a timestamp.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta

from resurgo.attribute.bundle import line_time
from resurgo.attribute.events import _CORRECTED, Event, normalise
from resurgo.attribute.node_patterns import node_registry
from resurgo.attribute.topology import HostMap
from resurgo.contracts import Category, LogLine
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.registry import Registry

# Application-class signatures that, in a node's own logs, are the node's software.
SITE_OWNED_IN_NODE_LOGS = frozenset(
    {
        "symbol_lookup_error",
        "shared_library_missing",
        "cuda_no_kernel_image",
        "python_app_exception",
    }
)

STALE_AFTER = timedelta(hours=6)

# PCIe AER reports name the device that failed: the root port's `AER: Uncorrected (Fatal) error
# received: 0000:03:00.0`, then the device's own driver prefix (`nvidia 0000:03:00.0: PCIe Bus
# Error: ...`). When that device is a GPU it is the GPU's fault, not the host's (attribution
# labels: hardware_gpu covers the GPU's PCIe link). Linux drivers/pci/pcie/aer.c prints both.
AER_IDS = frozenset({"pcie_aer_fatal"})
_BDF = r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_AER_DEVICE = re.compile(rf"\berror received: (?P<bdf>{_BDF})|^\S+ (?P<dev>{_BDF}): PCIe Bus Error")
# A PCI function that is an NVIDIA GPU, as node-side files name it: bound to the nvidia driver
# (`nvidia 0000:03:00.0:`), NVIDIA's PCI vendor id 10de on a device line, NVRM/NVML naming it.
_GPU_FUNCTION = re.compile(
    rf"\bnvidia (?P<a>{_BDF}):|(?P<b>{_BDF})\b[^\n]{{0,60}}\[10de:|\bPCI:(?P<c>{_BDF})|"
    rf"\bGPU ?(?P<d>{_BDF})\b"
)


def _bus(bdf: str) -> str:
    """`0000:03:00.0`, `03:00.0` and `00000000:03:00.0` name the same PCI function."""
    return bdf.lower()[-7:]


def gpu_functions(lines: list[LogLine]) -> set[str]:
    """PCI functions (bus:device.function) a host's files show to be NVIDIA GPUs."""
    out: set[str] = set()
    for entry in lines:
        text = entry.text
        if "nvidia" not in text and "10de" not in text and "PCI:" not in text and "GPU" not in text:
            continue
        for m in _GPU_FUNCTION.finditer(text):
            out.add(_bus(next(g for g in m.groups() if g)))
    return out


def _aer_on_gpu(body: str, gpus: set[str]) -> bool:
    m = _AER_DEVICE.search(body)
    return m is not None and _bus(m["bdf"] or m["dev"]) in gpus


def scan_node_logs(
    registry: Registry,
    node_logs: Mapping[str, list[LogLine]],
    hosts: HostMap,
    *,
    window: tuple[datetime | None, datetime | None] = (None, None),
    boot: Mapping[str, datetime] | None = None,
) -> list[Event]:
    """Root events from node-side files, attributed to the node the file belongs to.

    Lines clearly older than the job (more than `STALE_AFTER` before it started, within the same
    couple of months) are left out; lines without a usable timestamp are kept.
    """
    start, _end = window
    out: list[Event] = []
    base = 1_000_000
    for index, (host, lines) in enumerate(sorted(node_logs.items())):
        node = hosts.canonical(host)
        if node is None:
            continue
        year = start.year if start else None
        gpus = gpu_functions(lines)
        for entry in lines:
            found = registry.scan(entry.text)
            if not any(m.role == "root" for m in found):
                found += node_registry().scan(entry.text)
            matches = [m for m in found if m.role in ("root", "cascade")]
            if not matches:
                continue
            when = line_time(entry.text, year=year, boot=(boot or {}).get(node))
            if when is not None and start is not None:
                s = start.replace(tzinfo=None)
                if STALE_AFTER < s - when < timedelta(days=60):
                    continue  # from well before this job started (an old, unrelated fault)
            if _CORRECTED.search(entry.text):
                continue
            body = strip_prefixes(entry.text).body
            for match in matches:
                if match.category == Category.APPLICATION and match.id in SITE_OWNED_IN_NODE_LOGS:
                    # A node's own daemons logging a broken library or config: the site's
                    # software on that node (who owns the setting decides), not the job's.
                    match = match.model_copy(update={"category": Category.SYSTEM_SOFTWARE})
                if match.id in AER_IDS and _aer_on_gpu(body, gpus):
                    match = match.model_copy(update={"category": Category.HARDWARE_GPU})
                out.append(
                    Event(
                        line=entry,
                        order=base * (index + 1) + entry.line_no,
                        origin="node",
                        actor=None,
                        task=None,
                        rank=None,
                        node=node,
                        match=match,
                        message=body.strip()[:300],
                        key=f"{match.id}|{normalise(body, [host, node])}",
                        when=when,
                    )
                )
    return out
