"""Why a slow node is slow, from its diagnostic output (`node_<host>.txt`: nvidia-smi -q,
ibstat/ibstatus/mlxlink, lspci, cpupower, tuned-adm, ras-mc-ctl; `dmesg_<host>.txt`), and from
the NCCL set-up lines each node printed into the job's output.

A straggler's culprit is found from the job's timings; its category comes from what the node
itself reports. Where the timings name no one (the job prints one rank's rhythm only), a node
whose own diagnostics show a degraded state that its peers do not share is the straggler.
Each entry: (pattern, category, what it means, public source).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.bundle import is_diagnostic
from resurgo.attribute.slow_node_files import fleet_rate_outliers, node_file_causes
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
    (re.compile(r"^\s*rate:\s*\d+ Gb/sec \([12]X\b"), Category.HARDWARE_NETWORK,
     "InfiniBand link trained below 4x width", "ibstatus(8) (infiniband-diags): rate (4X)"),
    (re.compile(r'\bThe governor "powersave"|^\s*powersave\s*$'), Category.SYSTEM_SOFTWARE,
     "CPU frequency governor left at powersave",
     "Linux cpupower-frequency-info(1); cpufreq scaling_governor"),
    (re.compile(r"^\s*Current active profile:\s*powersave\b"), Category.SYSTEM_SOFTWARE,
     "tuned profile powersave", "tuned-adm(8): active profile"),
    (re.compile(r"\blimited by [\d.]+ GT/s PCIe x(?:1|2|4|8) link\b.*\bx16 link\)"),
     Category.HARDWARE_GPU, "a PCIe link trained below its width",
     "Linux drivers/pci/pci.c __pcie_print_link_status"),
    (re.compile(r"\bLnkSta:.*\b(?:Width x\d+|Speed [\d.]+GT/s) \(downgraded\)"),
     Category.HARDWARE_GPU, "a PCIe link trained below its speed or width",
     "pciutils lspci(8): LnkSta (downgraded)"),
    (re.compile(r"\bCMCI storm detected\b|\bEDAC MC\d+: \d{3,} CE\b"), Category.HARDWARE_HOST,
     "a storm of corrected host memory errors", "Linux arch/x86 mce CMCI storm; EDAC"),
    (re.compile(r"^\s*ACSCtl:.*\b(?:ReqRedir|CmpltRedir)\+"), Category.SYSTEM_SOFTWARE,
     "PCIe ACS redirect enabled: GPU peer traffic detours through the root complex",
     "NCCL troubleshooting guide, PCI Access Control Services (ACS); pciutils lspci(8) ACSCtl"),
    (re.compile(r"\biommu: Default domain type: Translated\b"), Category.SYSTEM_SOFTWARE,
     "IOMMU in translated mode (no iommu=pt): GPUDirect RDMA slowed",
     "NCCL troubleshooting guide, IOMMU; Linux drivers/iommu/iommu.c default domain type"),
    (re.compile(r"^\s*SymbolErrorCounter:\.*\s*(?:[1-9]\d{3,})\s*$"), Category.HARDWARE_NETWORK,
     "InfiniBand symbol errors on the port", "perfquery(8) (infiniband-diags)"),
]  # fmt: skip
# nvidia-smi's compute processes, as `--query-compute-apps=gpu_bus_id,pid,...` CSV rows or the
# `Processes:` table (`|    0   N/A  N/A     40112      C   python3    30988MiB |`).
_APP_CSV = re.compile(r"^\s*(?:0000)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d),\s*(\d+),")
_APP_TABLE = re.compile(r"^\|\s+(\d{1,2})\s+\S+\s+\S+\s+(\d+)\s+[CG+]{1,3}\s")


def _shared_gpu(lines: list[LogLine]) -> LogLine | None:
    """A GPU running two processes while the node's other GPUs run one each: a process left
    over from an earlier job (or someone else's) shares it with the job."""
    pids: dict[str, list[LogLine]] = {}
    for entry in lines:
        if (m := _APP_CSV.match(entry.text) or _APP_TABLE.match(entry.text)) is not None:
            pids.setdefault(m.group(1), []).append(entry)
    crowded = [rows for rows in pids.values() if len(rows) >= 2]
    if len(pids) >= 2 and len(crowded) == 1:
        return crowded[0][-1]
    return None


_NVLINK_DOWN = re.compile(r"^\s*Link \d{1,2}: <inactive>\s*$")
_NVLINK_UP = re.compile(r"^\s*Link \d{1,2}: \d+(?:\.\d+)? GB/s\s*$")
_IB_RATE = re.compile(r"^\s*(?:Rate|rate):\s*(\d{2,4})(?:\s*Gb/sec\b.*)?\s*$")
# The device a downtrained PCIe link belongs to: the kernel's link status line carries the
# driver that printed it (`mlx5_core 0000:3b:00.0: 63.008 Gb/s available PCIe bandwidth,
# limited by ...`: mlx5 calls pcie_print_link_status), lspci -vv heads each device with its
# class (`3b:00.0 Infiniband controller: Mellanox ...`). A NIC's or HCA's link is the network's.
_NIC_DRIVER = re.compile(r"\b(?:mlx[45]_core|bnxt_en|ice|i40e|ixgbe|efa|cxgb4|qede|hfi1)\b")
_NIC_CLASS = re.compile(r"(?i)\b(?:Infiniband|Ethernet|Network) controller\b")
_LSPCI_DEVICE = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d (.+)$")
_LINK_LAYER = re.compile(r"^\s*(?:Link layer|link_layer):\s*(\w+)\s*$")
_LINK_WIDTH = re.compile(r"^\s*Link Width\s*$")
_WIDTH_VALUE = re.compile(r"^\s*(Max|Current)\s*:\s*(\d+)x\s*$")
_SMI_CSV_HEADER = re.compile(r"pcie\.link\.width\.current")
# NCCL src/transport/net_ib.cc: a node without nvidia_peermem/dmabuf stages every transfer
# through host memory (NVIDIA/nccl#1537 quotes the line).
_GDR_DISABLED = re.compile(
    r"\b([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO NET/IB ?: GPU Direct RDMA Disabled\b"
)
_GDR_ENABLED = re.compile(
    r"\b([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO (?:NET/IB ?: GPU Direct RDMA Enabled\b|"
    r"Channel .* via NET/\w+/\d+/GDRDMA\b)"
)


def _pcie_widths(lines: list[LogLine]) -> list[LogLine]:
    """nvidia-smi -q `Link Width` blocks (and its --query-gpu csv) below their maximum."""
    found: list[LogLine] = []
    in_width = False
    widths: dict[str, int] = {}
    columns: list[str] | None = None
    for entry in lines:
        text = entry.text
        if _LINK_WIDTH.match(text):
            in_width, widths = True, {}
            continue
        if in_width and (m := _WIDTH_VALUE.match(text)):
            widths[m.group(1)] = int(m.group(2))
            if len(widths) == 2:
                if widths["Current"] < widths["Max"]:
                    found.append(entry)
                in_width = False
            continue
        in_width = False
        if _SMI_CSV_HEADER.search(text):
            columns = [c.strip() for c in text.split(",")]
            continue
        if columns is not None:
            cells = [c.strip() for c in text.split(",")]
            if len(cells) != len(columns):
                columns = None
                continue
            row = dict(zip(columns, cells, strict=True))
            cur, top = row.get("pcie.link.width.current", ""), row.get("pcie.link.width.max", "")
            if cur.isdigit() and top.isdigit() and int(cur) < int(top):
                found.append(entry)
    return found


# Slurm's gres.conf(5) (doc/man/man5/gres.conf.5, Cores=): `Name=gpu File=/dev/nvidia[0-3]
# Cores=0-55` binds GPUs to the cores Slurm pins their tasks to (--gpu-bind=closest);
# `nvidia-smi topo -m` prints each GPU's real CPU affinity (`GPU0 ... 0-55,112-167  0`). Cores
# that miss the GPU's affinity put every task on the socket far from its GPU: the node's
# configuration (the site's gres.conf).
_GRES_GPU = re.compile(r"\bFile=/dev/nvidia(?:\[(?P<set>[\d,-]+)\]|(?P<one>\d+)(?!\d))")
_GRES_CORES = re.compile(r"\bCores=(?P<cores>[\d,-]+)")
_TOPO_GPU = re.compile(r"^\s*GPU(?P<gpu>\d+)\s")
_CPU_LIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")


def _numbers(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.update(range(int(low), int(high or low) + 1))
    return out


def _gres_off_affinity(lines: list[LogLine]) -> LogLine | None:
    """A gres.conf line whose Cores= share no core with the CPU affinity nvidia-smi topo -m
    reports for the same GPUs."""
    affinity: dict[int, set[int]] = {}
    for entry in lines:
        if (t := _TOPO_GPU.match(entry.text)) is not None:
            cpus = next((w for w in entry.text.split()[1:] if _CPU_LIST.match(w) and
                         ("-" in w or "," in w)), None)  # fmt: skip
            if cpus is not None:
                affinity.setdefault(int(t["gpu"]), _numbers(cpus))
    if not affinity:
        return None
    for entry in lines:
        g, c = _GRES_GPU.search(entry.text), _GRES_CORES.search(entry.text)
        if g is None or c is None:
            continue
        gpus = _numbers(g["set"]) if g["set"] else {int(g["one"])}
        cores = _numbers(c["cores"])
        known = [affinity[i] for i in gpus if i in affinity]
        if known and all(not cores & cpus for cpus in known):
            return entry
    return None


def _causes(lines: list[LogLine]) -> list[tuple[Category, LogLine]]:
    found: list[tuple[Category, LogLine]] = []
    rates: dict[str, list[tuple[int, LogLine]]] = {}  # link layer → its ports' rates
    port: list[tuple[int, LogLine]] = []
    device = ""  # lspci -vv: the device whose capabilities the lines below describe
    for entry in lines:
        text = entry.text
        if (header := _LSPCI_DEVICE.match(text)) is not None:
            device = header.group(1)
        for regex, category, _what, _source in _SLOW_CAUSES:
            if regex.search(text):
                if (
                    category == Category.HARDWARE_GPU
                    and "PCIe" in _what
                    and (_NIC_DRIVER.search(text) or _NIC_CLASS.search(device))
                ):
                    category = Category.HARDWARE_NETWORK  # the HCA's/NIC's own PCIe link
                found.append((category, entry))
                break
        if (m := _IB_RATE.match(text)) is not None:
            port = [(int(m.group(1)), entry)]
            rates.setdefault("", []).extend(port)
        elif port and (layer := _LINK_LAYER.match(text)) is not None:
            # (ibstat/ibstatus print a port's link layer after its rate)
            rates[""].remove(port[0])
            rates.setdefault(layer.group(1).lower(), []).extend(port)
            port = []
    found += [(Category.HARDWARE_GPU, e) for e in _pcie_widths(lines)]
    if (shared := _shared_gpu(lines)) is not None:
        found.append((Category.SYSTEM_SOFTWARE, shared))
    if (gres := _gres_off_affinity(lines)) is not None:
        found.append((Category.SYSTEM_SOFTWARE, gres))
    # nvidia-smi nvlink -s: some NVLinks of the node up and others `<inactive>` (a GPU that
    # lost links; on a GPU without NVLink none would be up, which says nothing).
    inactive = [e for e in lines if _NVLINK_DOWN.match(e.text)]
    if inactive and any(_NVLINK_UP.match(e.text) for e in lines):
        found.append((Category.HARDWARE_GPU, inactive[0]))
    unknown = rates.pop("", [])  # (ports whose link layer is not shown compare with any)
    for same in [ports + unknown for ports in rates.values()] or [unknown]:
        if len(same) >= 2 and min(r for r, _ in same) < max(r for r, _ in same):
            # ibstat(8): one port of the node at a lower rate than its siblings of the same link
            # layer is a degraded link (an Ethernet storage port may run slower than the IB ones).
            found.append((Category.HARDWARE_NETWORK, min(same, key=lambda r: r[0])[1]))
            break
    return found


def _node_lines(a: Analysis, node: str) -> list[LogLine]:
    out: list[LogLine] = []
    for name, lines in a.node_logs.items():
        if a.topo.hosts.canonical(name) == node or name == node:
            out += [e for e in lines if is_diagnostic(e.source) or e.source.startswith("dmesg_")]
    return out


def all_node_lines(a: Analysis, node: str) -> list[LogLine]:
    """Every line of the files the bundle holds for `node` (any of its names)."""
    return [
        e for name, lines in a.node_logs.items()
        if a.topo.hosts.canonical(name) == node or name == node for e in lines
    ]  # fmt: skip


def _node_causes(a: Analysis, node: str) -> list[tuple[Category, LogLine]]:
    """What slows the node down, from its diagnostics, its other files (`slow_node_files`)
    and its HCAs' rates against the same HCAs on the job's other nodes."""
    found = _causes(_node_lines(a, node)) + node_file_causes(all_node_lines(a, node))
    fleet: dict[str, LogLine] | None = getattr(a, "_fleet_rates", None)
    if fleet is None:
        hosts = {a.topo.hosts.canonical(n) or n for n in a.node_logs}
        fleet = fleet_rate_outliers(a, {h: _node_lines(a, h) for h in hosts})
        a._fleet_rates = fleet  # type: ignore[attr-defined]
    if node in fleet:
        found.append((Category.HARDWARE_NETWORK, fleet[node]))
    return found


def _gdr_outliers(a: Analysis) -> dict[str, list[LogLine]]:
    """Nodes whose NCCL reports GPU Direct RDMA disabled while other nodes of the job use it."""
    disabled: dict[str, list[LogLine]] = {}
    enabled: set[str] = set()
    for entry in a.lines:
        if "GPU Direct RDMA" not in entry.text and "GDRDMA" not in entry.text:
            continue
        if (m := _GDR_DISABLED.search(entry.text)) is not None:
            disabled.setdefault(m.group(1), []).append(entry)
        elif (m := _GDR_ENABLED.search(entry.text)) is not None:
            enabled.add(m.group(1))
    if not enabled:
        return {}  # no node has it: the site's choice, not one node's fault
    return {n: lines for n, lines in disabled.items() if n not in enabled}


def diagnose_slow_nodes(a: Analysis, culprits: list[str]) -> tuple[Category, list[LogLine]] | None:
    """The category the slow nodes' own diagnostics give, with the lines that say so."""
    found: list[tuple[Category, LogLine]] = []
    gdr = _gdr_outliers(a)
    for node in culprits:
        found += _node_causes(a, node)
        found += [(Category.SYSTEM_SOFTWARE, e) for e in gdr.get(node, [])[:1]]
    if not found:
        return None
    return found[0][0], [line for category, line in found if category == found[0][0]][:3]


def degraded_nodes(a: Analysis) -> list[str]:
    """Nodes of the job whose own diagnostics show a state that slows them down (a link
    trained below its width, a CPU governor at powersave, clocks left locked, GPUDirect RDMA
    off) when fewer than half of the job's nodes show it: the same state everywhere is the
    site's or the room's (a cooling failure throttles every node), not one node's."""
    hosts = {a.topo.hosts.canonical(n) or n for n in a.node_logs}
    hosts |= set(_gdr_outliers(a))
    flagged = sorted(
        h for h in hosts
        if a.in_job(h) and (_node_causes(a, h) or h in _gdr_outliers(a))
    )  # fmt: skip
    known = set(a.node_list) | hosts
    if not flagged or len(flagged) == len(known) or len(flagged) * 2 > len(known):
        return []
    return flagged


def slow_link_behind(a: Analysis, v: Verdict) -> Verdict:
    """A network fault the job's output places on no node, or only on the node that reported
    it (UCX's `Transport retry count exceeded` and NCCL's IB completion errors name the
    reporting side, not the faulty link), with no node's own files showing a fault, on a job
    where exactly one node's HCA links below the same HCA on its peers (ibstat's `Rate:`, the
    active width): that node's link is the degraded one (attribution-labels.md: a specific
    node's cable or port at fault is excluded)."""
    if v.category != Category.HARDWARE_NETWORK or v.kind == "straggler":
        return v
    if any(e.node in v.culprits and e.root and e.hardware for e in a.node_events):
        return v  # (a culprit's own files show its fault)
    hosts = {a.topo.hosts.canonical(n) or n for n in a.node_logs}
    fleet = fleet_rate_outliers(a, {h: _node_lines(a, h) for h in hosts})
    if len(fleet) != 1:
        return v
    node, line = next(iter(fleet.items()))
    if v.culprits and node not in v.culprits and len(v.culprits) > 1:
        return v
    v.culprits = [node]
    v.summary += f"; {node}'s HCA links below the same HCA on the job's other nodes"
    v.evidence = [*v.evidence, line]
    return v
