"""Node-side signatures the job-log registry does not carry (BMC event logs, EDAC, APEI, link
state), in the registry's own format so they are validated the same way (examples must match,
near misses must not). Used only on node-side files (`sel_`, `dmesg_`, `journal_`, ...).
"""

from __future__ import annotations

import functools
from typing import Any

from resurgo.detect.registry import Registry

_ENTRIES: list[dict[str, Any]] = [
    {
        "id": "sel_uncorrectable",
        "regex": (
            r"(?i)\|\s*(?:Memory|Processor|Critical Interrupt|Power Supply[^|]*|Power Unit[^|]*|"
            r"System Event|Add-in Card|Drive Slot[^|]*)(?:\s+#0x[0-9a-f]+)?\s*\|\s*"
            r"(?:Uncorrectable ECC|Uncorrectable machine check exception|IERR|Thermal Trip|"
            r"Bus (?:Fatal|Uncorrectable) Error|PCI SERR|Failure detected|Power Supply AC lost|"
            r"AC lost or out-of-range|Power Unit failure detected|"
            r"Drive Fault)[^|]*"
            r"(?:\|\s*Asserted)"
            # (a current or voltage sensor past its critical threshold: the supply under load)
            r"|\|\s*(?:Current|Voltage)[^|]*\|\s*(?:Upper|Lower) Critical going (?:high|low)"
            r"\s*\|\s*Asserted"
        ),
        "kind": "crash",
        "category": "hardware_host",
        "role": "root",
        "severity": "fatal",
        "description": "IPMI SEL: an uncorrectable hardware event was asserted by the BMC (a "
        "memory or CPU error, a bus error, the power unit or supply failing or powering off)",
        "examples": [
            "   1 | 11/20/2026 | 08:12:01 | Memory #0x87 | Uncorrectable ECC | Asserted",
            "  2c | 11/20/2026 | 08:12:03 | Critical Interrupt #0x19 | Bus Fatal Error | Asserted",
            "  31 | 11/20/2026 | 09:01:44 | Processor #0x04 | IERR | Asserted",
            "  2a1 | 04/23/2025 | 09:41:07 | Power Supply PS1 Status | Power Supply AC lost | "
            "Asserted",
            # (a threshold sensor of IPMI 2.0 sensor type 03h, Current)
            "  1f0 | 03/06/2018 | 13:58:02 | Current #0x94 | Upper Critical going high | Asserted",
        ],
        "near_misses": [
            "   1 | 11/20/2026 | 08:12:01 | Memory #0x87 | Correctable ECC | Asserted",
            "   2 | 11/20/2026 | 08:12:09 | Memory #0x87 | Uncorrectable ECC | Deasserted",
            "  1f5 | 03/06/2018 | 13:58:40 | Current #0x94 | Upper Critical going high | "
            "Deasserted",
            # (an operator's `ipmitool power off` asserts it too: no fault by itself)
            "  12 | 02/11/2025 | 10:02:14 | Power Unit Pwr Unit Status | Power off/down | Asserted",
        ],
    },
    {
        # cuda_memtest (cudagpumemtest, the fork PIConGPU keeps) finding bad GPU memory:
        # `ERROR: (%s) %d errors found in block %d`, `ERROR: the last %d error addresses are:`,
        # `ERROR: error_count=%d`. A test an admin ran on one GPU of the node.
        "id": "gpu_memory_test_failed",
        "regex": (
            r"\bERROR: (?:\([^)]{0,80}\) )?[1-9]\d* errors found in (?:the )?block\b"
            r"|\bERROR: the last [1-9]\d* error addresses are:|\bERROR: error_count=[1-9]"
        ),
        "kind": "crash",
        "category": "hardware_gpu",
        "role": "root",
        "severity": "fatal",
        "description": "a GPU memory test (cuda_memtest) on the node found errors: that GPU's "
        "memory",
        "examples": [
            "[02/14/2021 21:25:15][lab-gpu07][3]:ERROR: 4096 errors found in the block",
            "ERROR: (Test0 [Walking 1 bit]) 12 errors found in block 7",
            "[02/14/2021 21:25:15][n7][3]:ERROR: the last 12 error addresses are:\t0x7f4c9ba31f20",
        ],
        "near_misses": [
            "[02/14/2021 21:31:58][lab-gpu07][2]:Test10 finished in 17.9 seconds  (0 errors)",
        ],
    },
    {
        # A memory test an admin ran on the node finding errors: stressapptest's verdict
        # (`Status: FAIL - test discovered HW problems`, `Stats: Found 12 hardware incidents`,
        # `Hardware Error: miscompare ...`; google/stressapptest sat.cc), memtester's
        # `FAILURE`, or a summary naming memtest86+/stressapptest with its errors.
        "id": "host_memory_test_failed",
        "regex": (
            r"\bStatus: FAIL - test discovered HW problems\b|\bStats: Found [1-9]\d* hardware "
            r"incidents\b|\bHardware Error: miscompare\b"
            r"|\b(?:memtest86\+?|memtester|stressapptest)\b.{0,80}?(?:\b[1-9]\d* (?:errors|"
            r"miscompares)\b|\bFAIL(?:URE)?\b)"
        ),
        "kind": "crash",
        "category": "hardware_host",
        "role": "root",
        "severity": "fatal",
        "description": "a memory test on the node found errors: its RAM (or memory controller) "
        "corrupts data, whatever crashes on it",
        "examples": [
            "2026/01/15-10:20:45(KST) Status: FAIL - test discovered HW problems",
            "2026/01/15-10:20:45(KST) Stats: Found 1 hardware incidents",
            "memtest86+ v7.20 (4 passes)    17 errors (bit 23)     0 errors",
            "stressapptest -s 3600 -M 48000 FAIL: 9 miscompares   PASS",
        ],
        "near_misses": [
            "Status: PASS - please verify no corrected errors",
            "Stats: Found 0 hardware incidents",
            "memtest86+ v7.20 (4 passes)    0 errors",
        ],
    },
    {
        # ipmitool sel elist: a fan's tachometer below its lower critical threshold (a fan
        # stopped): the chassis cooling every component of the node (IPMI 2.0 sensor type 04h,
        # threshold events; ipmitool(1)).
        "id": "sel_fan_failed",
        "regex": (
            r"(?i)\|\s*Fan\b[^|]*\|\s*Lower (?:Critical|Non-recoverable) going low\s*\|\s*"
            r"Asserted\b"
        ),
        "kind": "straggler",
        "category": "hardware_host",
        "role": "root",
        "severity": "error",
        "description": "IPMI SEL: a chassis fan fell below its critical speed",
        "examples": [
            " 1f2 | 09/12/2025 | 00:30:25 | Fan FAN3_TACH | Lower Critical going low  | Asserted | "
            "Reading 0 < Threshold 1500 RPM",
        ],
        "near_misses": [
            " 1f2 | 09/12/2025 | 00:30:25 | Fan FAN3_TACH | Lower Critical going low  | Deasserted",
            " 1f4 | 09/12/2025 | 00:34:15 | Temperature CPU0_TEMP | Upper Non-critical going "
            "high | Asserted",
        ],
    },
    {
        "id": "edac_uncorrected",
        "regex": r"\bEDAC \w+: \d+ UE\b|\bEDAC\b.{0,80}\bUncorrected error\b",
        "kind": "crash",
        "category": "hardware_host",
        "role": "root",
        "severity": "fatal",
        "description": "EDAC reports an uncorrected memory error",
        "examples": [
            "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0",
            "EDAC skx MC1: HANDLING MCE MEMORY ERROR ... Uncorrected error",
        ],
        "near_misses": ["EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"],
    },
    {
        "id": "apei_fatal",
        "regex": r"\[Hardware Error\]: (?:event severity: fatal|.{0,80}\bUncorrected\b)",
        "kind": "crash",
        "category": "hardware_host",
        "role": "root",
        "severity": "fatal",
        "description": "APEI/GHES: a fatal or uncorrected platform hardware error",
        "examples": ["{1}[Hardware Error]: event severity: fatal"],
        "near_misses": ["{1}[Hardware Error]: event severity: corrected"],
    },
    {
        "id": "link_down_upper",
        "regex": (
            r"(?i)\bmlx5_core\b.{0,100}?\blink down\b|\bPort:? \d+ Link DOWN\b"
            r"|\bPort module event\b.{0,60}\bCable unplugged\b|\bib\d+: (?:link (?:is )?down|"
            r"lost carrier)\b"
            # HPE Slingshot's cxi driver (`cxi_core ...: cxi3[hsn3] CXI_EVENT_LINK_DOWN`, HPE
            # Slingshot troubleshooting guide; Ethernet's `NIC Link is Down` is nic_link_down's)
            r"|\bCXI_EVENT_LINK_DOWN\b"
        ),
        "kind": "crash",
        "category": "hardware_network",
        "role": "root",
        "severity": "error",
        "description": "a NIC/HCA port went down on the host",
        "examples": [
            "mlx5_core 0000:4b:00.0 mlx5_2: Port: 1 Link DOWN",
            "mlx5_core 0000:4b:00.0: mlx5_port_module_event:1158:(pid 0): Port module event: "
            "module 0, Cable unplugged",
            "cxi_core 0000:c3:00.0: cxi3[hsn3] CXI_EVENT_LINK_DOWN",
        ],
        "near_misses": [
            "mlx5_core 0000:4b:00.0 mlx5_2: Port: 1 Link ACTIVE",
            "cxi_core 0000:c3:00.0: cxi3[hsn3] CXI_EVENT_LINK_UP",
        ],
    },
    {
        "id": "port_state_down",
        # Diagnostics pasted from the node: ibstat's port block (`State: Down`, `Physical
        # state: Polling`), ibv_devinfo's (`state: PORT_DOWN (1)`, libibverbs
        # ibv_port_state_str; EFA and RoCE devices too) and ethtool's `Link detected: no`.
        "regex": (
            r"^\s*(?:State:\s*Down|Physical state:\s*(?:Polling|Disabled)"
            r"|state:\s*PORT_DOWN \(1\)|Link detected:\s*no)\s*$"
        ),
        "kind": "crash",
        "category": "hardware_network",
        "role": "root",
        "severity": "error",
        "description": "a network port of the node is down (ibstat / ethtool on the node)",
        "examples": [
            "\t\tState: Down",
            "\t\tPhysical state: Polling",
            "\tLink detected: no",
            "\t\t\tstate:\t\t\tPORT_DOWN (1)",
        ],
        "near_misses": [
            "\t\tState: Active",
            "\t\tPhysical state: LinkUp",
            "\tLink detected: yes",
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)",
        ],
    },
    {
        "id": "edac_corrected_storm",
        "regex": r"\bEDAC MC\d+: \d{3,} CE\b|\bCMCI storm detected\b",
        "kind": "crash",
        "category": "hardware_host",
        "role": "root",
        "severity": "error",
        "description": "a storm of corrected host memory errors (hundreds in one EDAC report, "
        "or the kernel's CMCI storm): a failing DIMM",
        "examples": [
            "EDAC MC0: 4562 CE memory read error on CPU_SrcID#0_MC#0_Chan#0_DIMM#0 (channel:0)",
            "mce: CMCI storm detected: switching to poll mode",
        ],
        "near_misses": ["EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"],
    },
    {
        "id": "gpu_unreachable_diag",
        # nvidia-smi(1) on the node: no handle for a GPU it enumerates, NVLinks down, a row
        # remap pending or failed; dcgmi diag failing a hardware test.
        "regex": (
            r"\bUnable to determine the device handle for GPU ?[0-9A-Fa-f:.]+: Unknown Error\b"
            r"|^\s*Link \d+: <inactive>\s*$"
            r"|^\s*(?:Pending|Remapping Failure Occurred)\s*:\s*Yes\s*$"
            r"|^\|\s*(?:(?:GPU )?Memory|Memory Bandwidth|Diagnostic|Targeted Stress|Targeted Power|"
            r"SM Stress|PCIe|NVLink)\s*\|\s*Fail\b"
            # A test some GPUs pass: dcgmi lists the failing ones on the row below
            # (`| GPU Memory | Pass - GPUs: 1, 2, ... |` then `|  | Fail - GPU: 0 |`).
            r"|^\|\s+\|\s*Fail - GPUs?: ?\d"
        ),
        "kind": "crash",
        "category": "hardware_gpu",
        "role": "root",
        "severity": "error",
        "description": "the node's own GPU diagnostics show a GPU failing (no device handle, "
        "NVLink inactive, row remap pending or failed, a failed DCGM diagnostic)",
        "examples": [
            "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error",
            "\t Link 1: <inactive>",
            "        Pending                           : Yes",
            "| Memory                    | Fail - All                                     |",
            # DCGM 3.x names the memory test `GPU Memory` (dcgmi diag -r 3)
            "| GPU Memory                | Fail - GPU: 0                                  |",
            # stas00/ml-engineering compute/accelerator/nvidia/debug.md (dcgmi diag -r 2)
            "|                           | Fail - GPU: 0                                  |",
        ],
        "near_misses": [
            "\t Link 0: 26.562 GB/s",
            "        Pending                           : No",
            "| Memory                    | Pass - All                                     |",
            "| GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |",
        ],
    },
    {
        "id": "fs_mount_failed",
        # A network file system the node could not mount (at boot, after a reimage): every
        # path under it is missing on this node until someone fixes the client. systemd's
        # mount unit (src/core/mount.c), mount.lustre / mount.nfs, Lustre's LNet (api-ni.c).
        "regex": (
            r"\bFailed to mount (?:\S{1,200}\.mount - )?/\S{1,200}\.\s*$"
            r"|\bmount\.(?:lustre|nfs4?|beegfs|gpfs)\S{0,10}: mount \S{1,200} at /\S{1,200} "
            r"failed\b"
            r"|\bLNetError: .{0,120}\bCan't load LND\b"
        ),
        "kind": "crash",
        "category": "system_software",
        "role": "root",
        "severity": "error",
        "description": "the node failed to mount a network file system (its client modules or "
        "configuration): paths under it are missing on that node only",
        "examples": [
            "Mar  3 06:13:22 gpu-a-23 systemd[1]: Failed to mount /lustre/work.",
            # (systemd 249 and later name the unit, then its description: the mount point)
            "Aug 27 11:34:02 n1032 systemd[1]: Failed to mount checkpoint.mount - /checkpoint.",
            "mount.lustre: mount 10.12.0.10@o2ib:/work at /lustre/work failed: No such device",
            "LNetError: 3318:0:(api-ni.c:3012:lnet_startup_lndnet()) Can't load LND o2ib, "
            "module ko2iblnd, rc=256",
        ],
        "near_misses": [
            "systemd[1]: Mounted /lustre/work.",
            "systemd[1]: Unmounting /lustre/work...",
        ],
    },
    {
        "id": "fabric_manager_failed",
        "regex": r"\bnvidia-fabricmanager\.service: Failed with result\b",
        "kind": "crash",
        "category": "system_software",
        "role": "root",
        "severity": "error",
        "description": "the node's NVIDIA Fabric Manager service failed (NVSwitch systems: CUDA "
        "reports the system not yet initialized until it runs)",
        "examples": ["systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'."],
        "near_misses": ["systemd[1]: Started NVIDIA fabric manager service."],
    },
    {
        "id": "gpu_lost",
        "regex": r"(?i)\bGPU is lost\b|\bGPU requires reset\b|\bfallen off the bus\b",
        "kind": "crash",
        "category": "hardware_gpu",
        "role": "root",
        "severity": "fatal",
        "description": "nvidia-smi/NVML: the GPU is lost or needs a reset",
        "examples": [
            "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.",
            "GPU 00000000:3B:00.0: GPU requires reset",
        ],
    },
    {
        "id": "gpu_unreadable",
        # nvidia-smi's table prints ERR! where NVML's query of the board failed. Fan, temperature
        # and performance state all ERR! on one GPU is a board NVML cannot read (the state
        # before it falls off the bus); a lone ERR! power reading is transient
        # (Azure/azhpc-diagnostics#77) and is not matched.
        "regex": r"^\|\s*ERR!\s+ERR!\s+ERR!(?=\s)",
        "kind": "crash",
        "category": "hardware_gpu",
        "role": "root",
        "severity": "error",
        "description": "nvidia-smi cannot read one GPU's fan, temperature or performance state "
        "(ERR!): the board does not answer NVML",
        "examples": [
            "|ERR!  ERR! ERR!      1W /  N/A |      0MiB / 80994MiB |    ERR!      Default |"
        ],
        "near_misses": [
            "| N/A   29C    P0   ERR! / 250W |    593MiB / 16160MiB |      0%      Default |"
        ],
    },
    {
        "id": "node_health_check_failed",
        # NHC names its checks: check_hw_* are the hardware; any other check_* (file
        # systems, processes, daemons such as nv-hostengine) is software.
        "regex": r"(?i)\bhealth check failed:\s+(?=\S)(?!check_(?!hw_))",
        "kind": "crash",
        "category": "hardware_host",
        "role": "root",
        "severity": "error",
        "description": "the node health check (NHC / HealthCheckProgram) failed a hardware check",
        "examples": [
            "ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port mlx5_0:1 ACTIVE"
        ],
    },
    {
        "id": "node_health_check_software",
        "regex": r"(?i)\bhealth check failed:\s+check_(?!hw_)\w+",
        "kind": "crash",
        "category": "system_software",
        "role": "root",
        "severity": "error",
        "description": "the node health check failed a software check (mount, process, daemon)",
        "examples": [
            "nhc[91]: Health check failed:  check_dcgm_hostengine:  nv-hostengine not responding"
        ],
    },
]


@functools.lru_cache(maxsize=1)
def node_registry() -> Registry:
    return Registry.from_data(
        {"version": 1, "patterns": _ENTRIES}, source="resurgo.attribute/node_patterns"
    )
