"""GPU/node metrics (Prometheus text exposition) as attribution evidence.

Recognised series (DCGM exporter and node_exporter names): XID errors, volatile double-bit ECC,
row-remap failures, uncorrectable NVLink errors, clock-throttle reasons, SM clocks and
temperatures, InfiniBand port state. Each sample is attributed to a host through its `Hostname`,
`hostname`, `host`, `node`, `nodename` or `instance` label. Findings are facts about one host:
`fatal` ones name it as a culprit, `degraded` ones explain a straggler.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass

from resurgo.contracts import Category, LogLine

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\d+)?\s*$"
)
_LABEL = re.compile(r'(?P<key>[A-Za-z_]\w*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"')
HOST_LABELS = ("Hostname", "hostname", "host", "node", "nodename", "instance", "exported_instance")

# Xids that mean the GPU (not the program) failed; see the failure taxonomy, B.19.
FATAL_XIDS = frozenset({48, 61, 62, 64, 74, 79, 94, 95, 119, 120, 140, *range(144, 151)})
# Clock-throttle reason bits that mean hardware trouble (HW slowdown, thermal, power brake).
_THROTTLE_BITS = 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    line: LogLine

    @property
    def host(self) -> str | None:
        for key in HOST_LABELS:
            value = self.labels.get(key)
            if value:
                if key in ("instance", "exported_instance"):
                    value = re.sub(r":\d+$", "", value)
                return value
        return None

    @property
    def gpu(self) -> str | None:
        gpu = self.labels.get("gpu") or self.labels.get("GPU_I_ID")
        return f"gpu{gpu}" if gpu is not None and gpu.isdigit() else gpu


@dataclass(frozen=True)
class Finding:
    host: str
    category: Category
    severity: str  # "fatal" | "degraded"
    what: str
    line: LogLine
    gpu: str | None = None


# Counters that only count link faults: node_exporter's infiniband collector
# (`node_infiniband_symbol_error_total`, `..._link_error_recovery_total`,
# `..._port_errors_received_total`) and guilbaults/infiniband-exporter
# (`infiniband_symbolerrorcounter_total`, `infiniband_linkerrorrecoverycounter_total`).
_LINK_ERRORS = re.compile(
    r"^(?:NODE_)?INFINIBAND_(?:SYMBOL_?ERROR(?:COUNTER)?|LINK_?ERROR_?RECOVERY(?:COUNTER)?|"
    r"PORT_ERRORS_RECEIVED|PORT_?RCV_?ERRORS)(?:_TOTAL)?$"
)


# node_exporter's edac collector.
_EDAC_UE = ("NODE_EDAC_UNCORRECTABLE_ERRORS_TOTAL", "NODE_EDAC_CSROW_UNCORRECTABLE_ERRORS_TOTAL")


def parse_samples(lines: list[LogLine]) -> list[Sample]:
    out: list[Sample] = []
    for entry in lines:
        text = entry.text.strip()
        if not text or text.startswith("#"):
            continue
        m = _SAMPLE.match(text)
        if m is None:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        labels = {lm.group("key"): lm.group("value") for lm in _LABEL.finditer(m["labels"] or "")}
        out.append(Sample(m.group("name"), labels, value, entry))
    return out


def findings(lines: list[LogLine]) -> list[Finding]:
    """Host-level facts from the samples (the latest sample per series decides)."""
    samples = parse_samples(lines)
    latest: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    peak: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    first: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    for s in samples:
        key = (s.name, tuple(sorted(s.labels.items())))
        first.setdefault(key, s)
        latest[key] = s
        if key not in peak or s.value > peak[key].value:
            peak[key] = s
    out: list[Finding] = []
    widths: list[Sample] = []  # DCGM_FI_DEV_PCIE_LINK_WIDTH, one per GPU
    clocks: dict[str, list[float]] = defaultdict(list)
    clock_line: dict[str, Sample] = {}
    reasons: dict[str, int] = defaultdict(int)  # host → OR of its GPUs' clock event reasons
    for key, s in latest.items():
        host = s.host
        if host is None:
            continue
        name = s.name.upper()
        top = peak[key]
        if name.endswith("XID_ERRORS") and top.value > 0:
            xid = int(top.value)
            if xid in FATAL_XIDS:
                out.append(Finding(host, Category.HARDWARE_GPU, "fatal", f"Xid {xid}", top.line,
                                   s.gpu))  # fmt: skip
        elif (
            re.search(r"ECC_DBE_VOL|ROW_REMAP_FAILURE|UNCORRECTABLE_REMAPPED_ROWS", name)
            or ("NVLINK" in name and "UNCORRECT" in name)
            or name.endswith("NVLINK_RECOVERY_ERROR")
        ):
            if top.value > 0:
                out.append(Finding(host, Category.HARDWARE_GPU, "fatal", s.name, top.line, s.gpu))
        elif name.endswith(("CLOCK_THROTTLE_REASONS", "CLOCKS_EVENT_REASONS")):
            reasons[host] |= int(s.value) | (1 << 62)  # (the high bit: a reason was reported)
            if int(top.value) & _THROTTLE_BITS:
                out.append(
                    Finding(host, Category.HARDWARE_GPU, "degraded", "clock throttled", top.line,
                            s.gpu)
                )  # fmt: skip
        elif name.endswith("GPU_TEMP") and top.value >= 90:
            out.append(Finding(host, Category.HARDWARE_GPU, "degraded", "GPU temperature",
                               top.line, s.gpu))  # fmt: skip
        elif name.endswith("PCIE_LINK_WIDTH"):
            widths.append(s)
        elif name.endswith("SM_CLOCK"):
            clocks[host].append(s.value)
            clock_line.setdefault(host, s)
        elif _LINK_ERRORS.search(name) and s.value - first[key].value > 0:
            # node_exporter's infiniband collector: link errors still counting up between two
            # scrapes are a degrading cable or transceiver (a straggler's cause), not history.
            out.append(Finding(host, Category.HARDWARE_NETWORK, "degraded", "IB link errors",
                               s.line))  # fmt: skip
        elif name in _EDAC_UE and s.value > 0 and (s is first[key] or s.value > first[key].value):
            # node_exporter's edac collector: uncorrectable host memory errors (counted since
            # boot: with several scrapes, only ones that happened between them).
            out.append(Finding(host, Category.HARDWARE_HOST, "fatal", "EDAC uncorrectable "
                               "memory errors", s.line))  # fmt: skip
        elif name in ("NODE_INFINIBAND_STATE_ID", "INFINIBAND_PORT_STATE") and s.value != 4:
            out.append(Finding(host, Category.HARDWARE_NETWORK, "fatal", "IB port not ACTIVE",
                               s.line))  # fmt: skip
    out += _narrow_pcie_links(widths)
    if len(clocks) >= 2:
        per_host = {h: sum(v) / len(v) for h, v in clocks.items()}
        ordered = sorted(per_host.values())
        median = ordered[len(ordered) // 2]
        for host, value in per_host.items():
            if median > 0 and value < 0.75 * median:
                # Slow clocks with no clock event reason at all (DCGM reports 0: no power cap,
                # no thermal, no brake) were set: clocks locked (nvidia-smi -lgc/-ac) and
                # left so, the node's configuration rather than its hardware.
                locked = reasons.get(host) == 1 << 62
                out.append(Finding(
                    host, Category.SYSTEM_SOFTWARE if locked else Category.HARDWARE_GPU,
                    "degraded", "low SM clock, no clock event reason" if locked
                    else "low SM clock", clock_line[host].line,
                ))  # fmt: skip
    return out


def _narrow_pcie_links(widths: list[Sample]) -> list[Finding]:
    """GPUs whose PCIe link runs narrower than most of the job's GPUs do (dcgm-exporter
    `DCGM_FI_DEV_PCIE_LINK_WIDTH`, DCGM field reference): a link that trained down (a riser,
    a slot, the board), the GPU's straggler cause. The link generation is left out: it drops
    at idle to save power (nvidia-smi(1), PCIe Generation), the width does not."""
    if len(widths) < 4:
        return []
    usual = statistics.median(s.value for s in widths)
    return [
        Finding(host, Category.HARDWARE_GPU, "degraded", "PCIe link width below the others'",
                s.line, s.gpu)
        for s in widths if s.value < usual and (host := s.host) is not None
    ]  # fmt: skip
