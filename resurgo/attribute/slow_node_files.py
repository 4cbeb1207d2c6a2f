"""Why one node is slow, from more of its own files: states the `node_diagnostics` table of
single-line causes cannot see.

- nvidia-smi `--query-gpu=...,clocks_event_reasons.active` (older drivers:
  `clocks_throttle_reasons.active`) prints the NVML clocks event reason bitmask per GPU
  (nvml.h `nvmlClocksEventReason*`; nvidia-smi(1) "Clocks Event Reasons"): which bit is set
  says who slowed the clocks.
- The node's own log of a command that locked the GPU clocks (`nvidia-smi -lgc 1095,1095`,
  `--lock-gpu-clocks`) with no reset after it (`-rgc`; nvidia-smi(1)), or lowered the power
  limit (`-pl`); nvidia-smi -q's requested power limit below the default one: the node's
  configuration.
- nvidia-smi's `Processes:` table where one GPU runs processes of two different programs: a
  program that is not the job's (left over from an earlier job, or someone else's) shares it.
- `ibstat` (infiniband-diags ibstat(8)) `Rate:`, or the active width (`active_width: 1X`,
  ibv_devinfo(1) -v; `LinkWidthActive:....1X`, ibportstate(8)), of an HCA below what the same
  HCA has on the job's other nodes (a link that trained down: a cable or transceiver).
- rocm-smi's `Concise Info` table (ROCm SMI docs; AMD Instinct): one busy GPU whose shader
  clock (SCLK, the first `Mhz` column) is far below its busy siblings' on the same node. An
  idle GPU clocks down by design, so only GPUs at work are compared.

Each finding is (category, the line that shows it).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.contracts import Category, LogLine

# nvml.h: nvmlClocksEventReason* bits (nvidia-smi(1), "Clocks Event Reasons").
_APPLICATIONS_CLOCKS = 0x2  # ApplicationsClocksSetting: clocks set/locked by an admin
_HW_SLOWDOWN = 0x8
_SW_THERMAL = 0x20
_HW_THERMAL = 0x40
_POWER_BRAKE = 0x80  # HwPowerBrakeSlowdown: asserted by the system (power supply)
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
# nvidia-smi --help-query-gpu: one column per reason, `Active` / `Not Active`.
_REASON_BITS = {
    "applications_clocks_setting": _APPLICATIONS_CLOCKS, "hw_slowdown": _HW_SLOWDOWN,
    "sw_thermal_slowdown": _SW_THERMAL, "hw_thermal_slowdown": _HW_THERMAL,
    "hw_power_brake_slowdown": _POWER_BRAKE,
}  # fmt: skip
_HEX = re.compile(r"^0x[0-9A-Fa-f]{1,16}$")


def _reason_columns(cells: list[str]) -> dict[int, int | None]:
    """Column → its reason's bit (None: the `.active` bitmask) in a `--query-gpu` header."""
    out: dict[int, int | None] = {}
    for i, cell in enumerate(cells):
        name = cell.split(" [")[0]
        prefix = next((p for p in _REASON_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        reason = name.removeprefix(prefix)
        if reason == "active":
            out[i] = None
        elif reason in _REASON_BITS:
            out[i] = _REASON_BITS[reason]
    return out


def _reason_rows(lines: list[LogLine]) -> list[tuple[int, LogLine]]:
    """(bitmask, row) of each GPU row of a `--query-gpu` CSV with reason columns."""
    columns: dict[int, int | None] = {}
    out: list[tuple[int, LogLine]] = []
    for entry in lines:
        cells = [c.strip() for c in entry.text.split(",")]
        if found := _reason_columns(cells):
            columns = found
            continue
        if not columns or len(cells) <= max(columns):
            columns = {}
            continue
        mask = 0
        for i, bit in columns.items():
            if bit is None and _HEX.match(cells[i]):
                mask |= int(cells[i], 16)
            elif bit is not None and cells[i] == "Active":
                mask |= bit
            elif bit is None or cells[i] != "Not Active":
                columns = {}  # not a row of the table
                break
        else:
            out.append((mask, entry))
    return out


def _reason_causes(lines: list[LogLine]) -> list[tuple[Category, LogLine]]:
    found: list[tuple[Category, LogLine]] = []
    for mask, entry in _reason_rows(lines):
        if mask & _POWER_BRAKE:
            found.append((Category.HARDWARE_HOST, entry))
        elif mask & (_HW_THERMAL | _SW_THERMAL | _HW_SLOWDOWN):
            found.append((Category.HARDWARE_GPU, entry))
        elif mask & _APPLICATIONS_CLOCKS:
            found.append((Category.SYSTEM_SOFTWARE, entry))
    return found


# `sudo: opsadm : ... COMMAND=/usr/bin/nvidia-smi -lgc 1095,1095`; the reset commands undo it.
# (`-ac` is left out: sites set application clocks to their maximum on purpose, in a prolog;
# when they slow a GPU, its clocks event reasons say so.)
_CLOCK_LOCK = re.compile(
    r"\bnvidia-smi\b.*\s(?:-lgc|--lock-gpu-clocks|-lmc|--lock-memory-clocks|-pl|--power-limit)"
    r"[= ]\s*\d"
)
_CLOCK_RESET = re.compile(
    r"\bnvidia-smi\b.*\s(?:-rgc|--reset-gpu-clocks|-rmc|--reset-memory-clocks)\b"
)


# nvidia-smi -q `Power Readings`: the limit software asked for (`Requested Power Limit`, older
# drivers' `Power Limit`) below the board's `Default Power Limit`: someone ran `nvidia-smi -pl`.
_POWER_LIMIT = re.compile(
    r"^\s*(?P<which>Default|Requested|)\s*Power Limit\s*:\s*(?P<watts>\d+(?:\.\d+)?)\s*W\b"
)
LOWERED_POWER = 0.9


def _power_limit_lowered(lines: list[LogLine]) -> LogLine | None:
    default: float | None = None
    asked: tuple[float, LogLine] | None = None
    for entry in lines:
        if "Power Limit" not in entry.text or (m := _POWER_LIMIT.match(entry.text)) is None:
            continue
        if m["which"] == "Default":
            default = float(m["watts"])
        else:
            asked = (float(m["watts"]), entry)
        if default is not None and asked is not None:
            if asked[0] < LOWERED_POWER * default:
                return asked[1]
            default = asked = None
    return None


def _clocks_left_locked(lines: list[LogLine]) -> LogLine | None:
    locked: LogLine | None = None
    for entry in lines:
        if "nvidia-smi" not in entry.text:
            continue
        if _CLOCK_LOCK.search(entry.text):
            locked = entry
        elif _CLOCK_RESET.search(entry.text):
            locked = None
    return locked


# nvidia-smi's `Processes:` table: `|    0   N/A  N/A    1188210      C   python3   61204MiB |`.
_PROCESS_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d{1,2})\s+\S+\s+\S+\s+\d+\s+C\s+(?P<name>\S+)(?:\s+\S+)*?\s+\d+MiB\s*\|"
)


def _other_program(lines: list[LogLine]) -> LogLine | None:
    """A compute process of a second program on a GPU that a first one already runs on."""
    programs: dict[str, dict[str, LogLine]] = {}
    for entry in lines:
        if (m := _PROCESS_ROW.match(entry.text)) is not None:
            name = m["name"]
            programs.setdefault(m["gpu"], {}).setdefault(name, entry)
    shared = [rows for rows in programs.values() if len(rows) >= 2]
    if not shared:
        return None
    # The program on most GPUs is the job's; the line of another program is the evidence.
    counts: dict[str, int] = {}
    for rows in programs.values():
        for name in rows:
            counts[name] = counts.get(name, 0) + 1
    job = max(counts, key=counts.__getitem__)
    return next((e for rows in shared for n, e in rows.items() if n != job), None)


# A rocm-smi concise row: device index first, SCLK then MCLK in Mhz, GPU% last.
_ROCM_ROW = re.compile(
    r"^\s*\d{1,2}\s.*?\s(?P<sclk>\d{2,5})Mhz\s+\d{2,5}Mhz\s.*\s(?P<busy>\d{1,3})%\s*$"
)
ROCM_BUSY = 50  # GPU% at which a GPU is at work (an idle one clocks down by design)
ROCM_SLOW_CLOCK = 0.6  # SCLK share of the busy siblings' median that marks a throttled GPU


def _rocm_clock_outlier(lines: list[LogLine]) -> LogLine | None:
    """The row of a busy GPU clocked far below its busy siblings in rocm-smi's table."""
    rows = [
        (int(m["sclk"]), e) for e in lines
        if "Mhz" in e.text and (m := _ROCM_ROW.match(e.text)) and int(m["busy"]) >= ROCM_BUSY
    ]  # fmt: skip
    if len(rows) < 3:
        return None
    slowest = min(rows, key=lambda r: r[0])
    others = sorted(c for c, e in rows if e is not slowest[1])
    median = others[len(others) // 2]
    return slowest[1] if slowest[0] < ROCM_SLOW_CLOCK * median else None


def node_file_causes(lines: list[LogLine]) -> list[tuple[Category, LogLine]]:
    """Causes in one node's files (all of them: kernel logs, journal and diagnostics)."""
    found = _reason_causes(lines)
    if (shared := _other_program(lines)) is not None:
        found.append((Category.SYSTEM_SOFTWARE, shared))
    if (locked := _clocks_left_locked(lines)) is not None:
        found.append((Category.SYSTEM_SOFTWARE, locked))
    if (capped := _power_limit_lowered(lines)) is not None:
        found.append((Category.SYSTEM_SOFTWARE, capped))
    if (throttled := _rocm_clock_outlier(lines)) is not None:
        found.append((Category.HARDWARE_GPU, throttled))
    return found


_CA = re.compile(r"^(?:CA '(?P<ca>[\w.-]+)'|hca_id:\s*(?P<id>[\w.-]+))")
_RATE = re.compile(r"^\s*Rate:\s*(?P<rate>\d{1,4})\s*$")
_WIDTH = re.compile(
    r"^\s*(?:Active width|active_width|LinkWidthActive)\s*[:.]+\s*(?P<width>\d{1,2})X\b", re.I
)


def _links(lines: list[LogLine]) -> dict[tuple[str, str], tuple[int, LogLine]]:
    """(HCA, "rate" or "width") → its lowest port's value: ibstat `Rate:`, ibv_devinfo -v
    `active_width`, ibportstate `LinkWidthActive`."""
    out: dict[tuple[str, str], tuple[int, LogLine]] = {}
    ca = ""
    for entry in lines:
        if (c := _CA.match(entry.text)) is not None:
            ca = c["ca"] or c["id"]
            continue
        for what, regex in (("rate", _RATE), ("width", _WIDTH)):
            if (m := regex.match(entry.text)) is not None:
                value = int(m[what])
                if (ca, what) not in out or value < out[(ca, what)][0]:
                    out[(ca, what)] = (value, entry)
    return out


def fleet_rate_outliers(a: Analysis, files: dict[str, list[LogLine]]) -> dict[str, LogLine]:
    """Nodes whose HCA runs at a lower rate or a narrower width than the same HCA on the job's
    other nodes (a width of its own says nothing: 25 GbE ports run at 1X)."""
    links = {node: _links(lines) for node, lines in files.items() if a.in_job(node)}
    out: dict[str, LogLine] = {}
    for node, own in links.items():
        for key, (value, entry) in own.items():
            others = [r[key][0] for n, r in links.items() if n != node and key in r]
            if others and value < min(others):
                out.setdefault(node, entry)
    return out
