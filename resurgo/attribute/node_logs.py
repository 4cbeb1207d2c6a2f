"""Scanning node-side files (kernel logs, journal, slurmd): root events per host.

`scan_node_logs` runs the job registry, then the node patterns, over each host's files and
attributes what it finds to the node the file belongs to, leaving out faults from well before
the job started. Kept apart from the job-log scan: these lines have no ranks or tasks, only a
host and a timestamp.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import replace
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

# PCIe AER reports name the device that failed: the root port's `AER: Uncorrected (Fatal) error
# received: 0000:03:00.0`, then the device's own driver prefix (`nvidia 0000:03:00.0: PCIe Bus
# Error: ...`). When that device is a GPU it is the GPU's fault, a NIC/HCA's the network's, not
# the host's (attribution labels: hardware_gpu covers the GPU's PCIe link, hardware_network the
# NICs/HCAs). Linux drivers/pci/pcie/aer.c prints both lines (newer kernels `error message
# received from BDF`, older `error received: BDF`).
AER_IDS = frozenset({"pcie_aer_fatal"})
_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_AER_DEVICE = re.compile(
    rf"\berror (?:message )?received(?::| from) (?P<bdf>{_BDF})"
    rf"|\b[\w-]+ (?P<dev>{_BDF}): PCIe Bus Error"
)
# What a PCI function is, from a host's files: its driver prefix (`nvidia 0000:03:00.0:`,
# `mlx5_core 0000:41:00.0:`), its vendor id on a device line (`[10de:26b9]` NVIDIA, `[15b3:1021]`
# Mellanox/NVIDIA networking), NVRM/NVML naming a GPU's bus.
_DRIVER_FUNCTION = re.compile(rf"\b(?P<drv>[\w-]+) (?P<bdf>{_BDF}):")
_VENDOR_FUNCTION = re.compile(rf"\b(?P<bdf>{_BDF})\b[^\n]{{0,60}}\[(?P<vendor>10de|15b3):")
_GPU_NAMED = re.compile(rf"\bPCI:(?P<a>{_BDF})|\bGPU ?(?P<b>{_BDF})\b")
# Accelerators' kernel drivers: NVIDIA's, AMD's (`amdgpu 0000:c9:00.0:`), Intel Gaudi's
# (`habanalabs 0000:4d:00.0:`); the attribution labels' hardware_gpu covers any vendor's board.
_GPU_DRIVERS = frozenset({"nvidia", "amdgpu", "habanalabs"})
# (Linux drivers by module name; `efa`/`ena` are AWS's Elastic Fabric Adapter and Elastic
# Network Adapter, `cxi_core`/`cxi_ss1` HPE Slingshot's NIC, `bnxt_re` Broadcom's RoCE.)
_NIC_DRIVERS = frozenset(
    {"mlx4_core", "mlx5_core", "ice", "i40e", "ixgbe", "bnxt_en", "bnxt_re", "irdma", "hfi1",
     "ionic", "qede", "efa", "ena", "cxi_core", "cxi_ss1"}
)  # fmt: skip


def _bus(bdf: str) -> str:
    """`0000:03:00.0`, `03:00.0` and `00000000:03:00.0` name the same PCI function."""
    return bdf.lower()[-7:]


def device_kinds(lines: list[LogLine]) -> dict[str, Category]:
    """PCI functions (bus:device.function) a host's files show to be GPUs or NICs/HCAs."""
    out: dict[str, Category] = {}
    for entry in lines:
        text = entry.text
        for m in _DRIVER_FUNCTION.finditer(text):
            if m["drv"] in _GPU_DRIVERS:
                out[_bus(m["bdf"])] = Category.HARDWARE_GPU
            elif m["drv"] in _NIC_DRIVERS:
                out[_bus(m["bdf"])] = Category.HARDWARE_NETWORK
        for m in _VENDOR_FUNCTION.finditer(text):
            vendor = Category.HARDWARE_GPU if m["vendor"] == "10de" else Category.HARDWARE_NETWORK
            out.setdefault(_bus(m["bdf"]), vendor)
        if "PCI:" in text or "GPU" in text:
            for g in _GPU_NAMED.finditer(text):
                out.setdefault(_bus(g["a"] or g["b"]), Category.HARDWARE_GPU)
    return out


def _aer_device(body: str, kinds: dict[str, Category]) -> Category | None:
    m = _AER_DEVICE.search(body)
    return kinds.get(_bus(m["bdf"] or m["dev"])) if m is not None else None


# The devices below a failed port that the AER core could not recover
# (drivers/pci/pcie/err.c: `nvidia 0000:03:00.0: AER: can't recover (no error_detected
# callback)`), printed right after the port's own fatal error report.
_UNRECOVERED = re.compile(rf"\b[\w-]+ (?P<bdf>{_BDF}): AER: can't recover\b")
AER_REPORT_LINES = 12


def _unrecovered_below(
    lines: list[LogLine], pos: int, kinds: dict[str, Category]
) -> Category | None:
    """A GPU or NIC the AER core reports it could not recover in the lines right after a port's
    fatal error (at `pos`): the port was that device's link, the device the fault (GPU first)."""
    found: set[Category] = set()
    for entry in lines[pos + 1 : pos + 1 + AER_REPORT_LINES]:
        m = _UNRECOVERED.search(entry.text) if "can't recover" in entry.text else None
        if m is not None and (kind := kinds.get(_bus(m["bdf"]))) is not None:
            found.add(kind)
    if Category.HARDWARE_GPU in found:
        return Category.HARDWARE_GPU
    return found.pop() if found else None


STALE_AFTER = timedelta(hours=6)


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
        kinds = device_kinds(lines)
        for pos, entry in enumerate(lines):
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
                if match.id in AER_IDS and (
                    (device := _aer_device(body, kinds)) is not None
                    or (device := _unrecovered_below(lines, pos, kinds)) is not None
                ):
                    match = match.model_copy(update={"category": device})
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
    return _port_errors_of_lost_gpus(out)


# A fatal PCIe error on a switch or root port above a GPU that the driver reports lost in the
# same seconds (Xid 79 `GPU has fallen off the bus`): the port carried that GPU's link, and the
# lost GPU is the fault (attribution-labels.md: Xid 79 and a GPU's PCIe link are hardware_gpu).
_SAME_BURST = timedelta(seconds=5)


def _port_errors_of_lost_gpus(events: list[Event]) -> list[Event]:
    lost: dict[str | None, list[datetime]] = {}
    for e in events:
        if e.category == Category.HARDWARE_GPU and e.when is not None:
            lost.setdefault(e.node, []).append(e.when)
    for times in lost.values():
        times.sort()
    out = []
    for e in events:
        if e.match.id in AER_IDS and e.category == Category.HARDWARE_HOST and e.when is not None:
            # (the nearest lost-GPU time on the same node, found by bisection: linear overall)
            times = lost.get(e.node, [])
            at = bisect_left(times, e.when - _SAME_BURST)
            if at < len(times) and times[at] <= e.when + _SAME_BURST:
                e = replace(e, match=e.match.model_copy(update={"category": Category.HARDWARE_GPU}))
        out.append(e)
    return out
