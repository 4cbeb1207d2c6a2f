"""One node slowing a running job: the node named by the job's own lines, the category by the
node's own files.

Line formats (public sources):
- nvidia-smi(1) `-q` "Clocks Event Reasons" and `--query-gpu=...,clocks_event_reasons.active`
  (the NVML bitmask, nvml.h `nvmlClocksEventReason*`: 0x2 applications clocks setting, 0x40
  HW thermal slowdown, 0x80 HW power brake); `nvidia-smi -lgc` / `-rgc` (lock / reset clocks);
  the `Processes:` table.
- ibstat(8) `Rate:`; ibv_devinfo(1) -v `active_width`; the NCCL tests README (pairwise
  `all_reduce_perf` runs, `# Avg bus bandwidth`).
- dcgm-exporter `DCGM_FI_DEV_PCIE_LINK_WIDTH` (DCGM field reference).
- pytorch/examples word_language_model `| 200/ 2983 batches | ms/batch 45.84 |`.
"""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.bundle import load_bundle
from resurgo.attribute.metrics import findings
from resurgo.attribute.offline import analyse_bundle
from resurgo.attribute.series import read_series
from resurgo.attribute.slow_node_files import node_file_causes
from resurgo.contracts import Category, LogLine

RUNNING = "# job still running; nodelist gpu[01-04]\n"


def _steps(seconds: float, n: int = 6) -> str:
    return "".join(
        f"2026-10-08T0{i // 6}:{(i % 6) * 10:02d}:00Z INFO train step={1000 + i * 100} "
        f"step_time={seconds:.2f}s\n"
        for i in range(n)
    )


def _verdict(tmp_path: Path, log: str, files: dict[str, str]) -> tuple[str, str, list[str]]:
    (tmp_path / "job.log").write_text(log)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    v = analyse_bundle(tmp_path).as_json()
    return str(v["kind"]), str(v["category"]), list(v["culprit_nodes"])


def _lines(text: str, source: str = "node_gpu03.txt") -> list[LogLine]:
    return [LogLine(source=source, line_no=i, text=t) for i, t in enumerate(text.splitlines(), 1)]


THERMAL = (
    "GPU 00000000:18:00.0\n    Clocks Event Reasons\n        HW Slowdown                       :"
    " Active\n            HW Thermal Slowdown           : Active\n"
)


def test_a_diagnostic_file_named_after_its_tool_is_the_nodes(tmp_path: Path) -> None:
    # nvidia-smi_<host>.txt was not read at all: the running job was `none`.
    assert load_bundle_hosts(tmp_path, "nvidia-smi_gpu03.txt") == ["gpu03"]
    got = _verdict(tmp_path, RUNNING + _steps(1.1), {"nvidia-smi_gpu03.txt": THERMAL})
    assert got == ("straggler", "hardware_gpu", ["gpu03"])


def load_bundle_hosts(tmp_path: Path, name: str) -> list[str]:
    (tmp_path / "job.log").write_text("x\n")
    (tmp_path / name).write_text("y\n")
    return sorted(load_bundle(tmp_path).node_logs)


CSV = (
    "index, clocks.current.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active\n"
    "0, 1095 MHz, 1410 MHz, {0}\n1, 1095 MHz, 1410 MHz, {0}\n"
)


def test_the_clocks_event_reason_bitmask_says_who_slowed_the_clocks() -> None:
    def category(mask: str) -> set[Category]:
        return {c for c, _ in node_file_causes(_lines(CSV.format(mask)))}

    assert category("0x0000000000000002") == {Category.SYSTEM_SOFTWARE}  # app clocks set
    assert category("0x0000000000000080") == {Category.HARDWARE_HOST}  # power brake
    assert category("0x0000000000000040") == {Category.HARDWARE_GPU}  # HW thermal
    assert category("0x0000000000000001") == set()  # idle
    assert category("0x0000000000000000") == set()


LOCKED = (
    "Nov 08 17:42:10 gpu03 sudo[551203]:   opsadm : TTY=pts/3 ; PWD=/root ; USER=root ; "
    "COMMAND=/usr/bin/nvidia-smi -lgc 1095,1095\n"
)


def test_clocks_locked_by_a_command_and_never_reset_are_the_nodes_configuration() -> None:
    assert [c for c, _ in node_file_causes(_lines(LOCKED, "journal_gpu03.txt"))] == [
        Category.SYSTEM_SOFTWARE
    ]
    reset = LOCKED + LOCKED.replace("-lgc 1095,1095", "-rgc")
    assert node_file_causes(_lines(reset, "journal_gpu03.txt")) == []
    prolog = LOCKED.replace("-lgc 1095,1095", "-ac 1593,1410")  # site sets app clocks to max
    assert node_file_causes(_lines(prolog, "journal_gpu03.txt")) == []


TABLE = (
    "|    0   N/A  N/A    1188210      C   python3                                     61204MiB |\n"
    "|    0   N/A  N/A     774031      C   /home/kli/venv/bin/python -m vllm.entryp    17810MiB |\n"
    "|    1   N/A  N/A    1188211      C   python3                                     61198MiB |\n"
    "|    1   N/A  N/A     774032      C   /home/kli/venv/bin/python -m vllm.entryp    17806MiB |\n"
)


def test_a_gpu_shared_with_another_program_is_a_leftover_process() -> None:
    found = node_file_causes(_lines(TABLE))
    assert [c for c, _ in found] == [Category.SYSTEM_SOFTWARE]
    assert "vllm" in found[0][1].text
    own = "".join(line for line in TABLE.splitlines(True) if "python3" in line)
    assert node_file_causes(_lines(own)) == []


def test_an_hca_narrower_than_the_same_hca_on_the_other_nodes(tmp_path: Path) -> None:
    def devinfo(width: str) -> str:
        return f"hca_id:\tmlx5_0\n\tport:\t1\n\t\t\tactive_width:\t\t{width}\n"

    files = {"ibv_devinfo_gpu01.txt": devinfo("4X (2)"), "ibv_devinfo_gpu03.txt": devinfo("1X (1)")}
    assert _verdict(tmp_path, RUNNING + _steps(1.1), files) == (
        "straggler", "hardware_network", ["gpu03"],
    )  # fmt: skip
    # A 1X port everywhere (25 GbE) is how the ports are.
    for name in files:
        (tmp_path / name).write_text(devinfo("1X (1)"))
    assert _verdict(tmp_path, RUNNING + _steps(1.1), {}) == ("none", "none", [])


def _ibstat(rate: int) -> str:
    return f"CA 'mlx5_2'\n\tPort 1:\n\t\tState: Active\n\t\tRate: {rate}\n"


def test_an_hca_slower_than_the_same_hca_on_the_other_nodes(tmp_path: Path) -> None:
    files = {"ibstat_gpu01.txt": _ibstat(400), "ibstat_gpu03.txt": _ibstat(200)}
    got = _verdict(tmp_path, RUNNING + _steps(1.1), files)
    assert got == ("straggler", "hardware_network", ["gpu03"])


def test_the_same_rate_everywhere_is_healthy(tmp_path: Path) -> None:
    files = {"ibstat_gpu01.txt": _ibstat(400), "ibstat_gpu03.txt": _ibstat(400)}
    assert _verdict(tmp_path, RUNNING + _steps(1.1), files) == ("none", "none", [])


def test_a_pairwise_test_names_the_node_every_slow_pair_shares(tmp_path: Path) -> None:
    log = (
        RUNNING
        + _steps(1.7)
        + (
            "INFO nccl-probe pairwise allreduce busbw (GB/s): gpu01-gpu02 371 | gpu03-gpu04 93\n"
            "INFO nccl-probe pairwise allreduce busbw (GB/s): gpu01-gpu03 94 | gpu02-gpu04 369\n"
        )
    )
    assert _verdict(tmp_path, log, {})[2] == ["gpu03"]


def _pair(a: str, b: str, busbw: float) -> str:
    return (
        f"## pair {a},{b}\n#       size         count      type   redop    root     time   algbw"
        f"   busbw #wrong\n  1073741824     268435456     float     sum      -1   10710.4  100.25"
        f"  {busbw:.2f}      0\n# Avg bus bandwidth    : {busbw:.3f}\n"
    )


def test_nccl_tests_runs_under_a_heading_naming_their_pair(tmp_path: Path) -> None:
    log = RUNNING + _steps(1.7) + "".join(
        _pair(a, b, bw)
        for a, b, bw in (("gpu01", "gpu02", 187.9), ("gpu03", "gpu04", 96.6),
                         ("gpu01", "gpu04", 96.2), ("gpu02", "gpu03", 188.1))
    )  # fmt: skip
    assert _verdict(tmp_path, log, {})[2] == ["gpu04"]


def test_a_per_node_summary_names_the_node_far_behind(tmp_path: Path) -> None:
    slow = (
        "per-node fwd+bwd (ms, mean of last 200): gpu01 301 | gpu02 298 | gpu03 604 | gpu04 300\n"
    )
    assert _verdict(tmp_path, RUNNING + _steps(1.7) + slow, {})[2] == ["gpu03"]
    rate = (
        "per-node allreduce busbw (GB/s) at init: gpu01 188.1 gpu02 187.6 gpu03 47.3 gpu04 188.4\n"
    )
    assert _verdict(tmp_path, RUNNING + _steps(1.7) + rate, {})[2] == ["gpu03"]
    even = (
        "per-node fwd+bwd (ms, mean of last 200): gpu01 301 | gpu02 298 | gpu03 311 | gpu04 300\n"
    )
    assert _verdict(tmp_path, RUNNING + _steps(1.1) + even, {}) == ("none", "none", [])


def test_a_gpu_link_narrower_than_the_others_in_dcgm() -> None:
    rows = [
        f'DCGM_FI_DEV_PCIE_LINK_WIDTH{{gpu="{g}",device="nvidia{g}",Hostname="{h}"}} '
        f"{4 if (h, g) == ('gpu02', 3) else 16}"
        for h in ("gpu01", "gpu02") for g in range(4)
    ]  # fmt: skip
    found = [
        f for f in findings(_lines("\n".join(rows), "metrics.txt")) if f.severity == "degraded"
    ]
    assert [(f.host, f.gpu, f.category) for f in found] == [
        ("gpu02", "gpu3", Category.HARDWARE_GPU)
    ]


def test_ms_per_batch_is_the_time_per_iteration(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        "|  epoch 2 | 12400/40000 batches | 412.3 ms/batch | loss 3.01\n"
        "| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 45.84 | loss  7.63\n"
    )
    from resurgo.attribute.analysis import Analysis
    from resurgo.attribute.scheduler import parse_scheduler
    from resurgo.detect.registry import Registry

    b = load_bundle(tmp_path)
    a = Analysis(Registry.default(), b.job, parse_scheduler([], None), [], {}, [])
    assert [s.value for s in read_series(a)["iteration_ms"]] == [412.3, 45.84]


def test_the_host_that_computes_longest_and_never_waits_is_waited_for(tmp_path: Path) -> None:
    line = (
        "I1203 09:14:22.018 per-host step breakdown (ms): gpu01 compute=5710 wait=2740 | "
        "gpu02 compute=5698 wait=2752 | gpu03 compute=8420 wait=21 | gpu04 compute=5703 wait=2739\n"
    )
    assert _verdict(tmp_path, RUNNING + _steps(8.5) + line, {})[2] == ["gpu03"]
    even = line.replace("compute=8420 wait=21", "compute=5702 wait=2741")
    assert _verdict(tmp_path, RUNNING + _steps(5.9) + even, {}) == ("none", "none", [])


def test_a_straggler_detectors_verdict_naming_one_node(tmp_path: Path) -> None:
    report = (
        "[default0]:=== Straggler Report at Step 3600 ===\n"
        "[default0]:  STRAGGLER: rank 16 (gpu03, local GPU 0) score 0.74\n"
    )
    assert _verdict(tmp_path, RUNNING + _steps(3.3) + report, {})[2] == ["gpu03"]
    enabled = "[default0]: straggler detection: enabled on gpu01 gpu02 gpu03 gpu04\n"
    assert _verdict(tmp_path, RUNNING + _steps(1.1) + enabled, {}) == ("none", "none", [])


def test_a_rank_named_alone_is_placed_by_the_gpus_per_node_the_job_states(
    tmp_path: Path,
) -> None:
    # Megatron-LM StragglerDetector (megatron/core/utils.py) names ranks only.
    log = "# SLURM_JOB_NODELIST=gpu[01-04], 8 GPUs per node\n" + "".join(
        f" 0: [2026-11-27 13:{i:02d}:10] iteration {12000 + i * 100}/ 500000 | elapsed time per "
        f"iteration (ms): 4633.9 |\n 0: INFO:megatron.core.utils:[2026-11-27 13:{i:02d}:10] | "
        f"MnRtt/Rnk: 3430.15ms/3 | MxRtt/Rnk: 4583.41ms/21 | MnClk/Rnk: 1275MHz/21 |\n"
        for i in range(6)
    )
    assert _verdict(tmp_path, log + "# job still running\n", {})[2] == ["gpu03"]


def test_a_slower_port_counts_against_its_siblings_of_the_same_link_layer() -> None:
    from resurgo.attribute.node_diagnostics import _causes

    def port(ca: str, rate: int, layer: str) -> str:
        return (
            f"CA '{ca}'\n\tPort 1:\n\t\tState: Active\n\t\tRate: {rate}\n\t\tLink layer: {layer}\n"
        )

    # ibstat on a node with 400G InfiniBand ports and a 200G Ethernet storage port.
    mixed = port("mlx5_0", 400, "InfiniBand") + port("mlx5_1", 400, "InfiniBand")
    assert _causes(_lines(mixed + port("mlx5_4", 200, "Ethernet"))) == []
    found = _causes(_lines(mixed + port("mlx5_2", 100, "InfiniBand")))
    assert [(c, e.text.strip()) for c, e in found] == [(Category.HARDWARE_NETWORK, "Rate: 100")]
    # `ibstat mlx5_0 | grep Rate` shows no link layer: it compares with any port.
    grep_rate = port("mlx5_3", 200, "InfiniBand") + "$ ibstat mlx5_0 | grep Rate\n\t\tRate: 400\n"
    assert [e.text.strip() for _, e in _causes(_lines(grep_rate))] == ["Rate: 200"]


QUIET = (
    "GPU 00000000:18:00.0\n    Clocks Event Reasons\n        Idle                              : "
    "Not Active\n        SW Power Cap                      : Not Active\n        HW Slowdown  "
    "                     : Not Active\n            HW Thermal Slowdown           : Not Active\n"
    "|    0   N/A  N/A    1188210      C   python3                                     61204MiB |\n"
    "|    1   N/A  N/A    1188211      C   python3                                     61198MiB |\n"
)


def test_a_healthy_job_with_quiet_node_files_and_even_pairs_stays_healthy(
    tmp_path: Path,
) -> None:
    log = RUNNING + _steps(1.1) + "".join(
        _pair(a, b, bw)
        for a, b, bw in (("gpu01", "gpu02", 187.9), ("gpu03", "gpu04", 186.6),
                         ("gpu01", "gpu04", 188.2), ("gpu02", "gpu03", 188.1))
    )  # fmt: skip
    files = {"nvidia-smi_gpu03.txt": QUIET, "ibstat_gpu01.txt": _ibstat(400)}
    assert _verdict(tmp_path, log, files) == ("none", "none", [])


def test_a_pair_heading_in_another_style(tmp_path: Path) -> None:
    runs = "".join(
        _pair(a, b, bw).replace(f"## pair {a},{b}", f"=== {a} <-> {b} ===")
        for a, b, bw in (("gpu01", "gpu02", 187.9), ("gpu03", "gpu04", 96.6),
                         ("gpu01", "gpu04", 96.2), ("gpu02", "gpu03", 188.1))
    )  # fmt: skip
    assert _verdict(tmp_path, RUNNING + _steps(1.7) + runs, {})[2] == ["gpu04"]


def test_a_downtrained_pcie_link_is_the_device_it_belongs_to() -> None:
    from resurgo.attribute.node_diagnostics import _causes

    gpu = (
        "[    9.411208] pci 0000:3b:00.0: 63.012 Gb/s available PCIe bandwidth, limited by 16.0 "
        "GT/s PCIe x4 link at 0000:3a:02.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)"
    )
    nic = gpu.replace("pci 0000:3b:00.0", "mlx5_core 0000:3b:00.0")
    assert [c for c, _ in _causes(_lines(gpu))] == [Category.HARDWARE_GPU]
    assert [c for c, _ in _causes(_lines(nic))] == [Category.HARDWARE_NETWORK]
    lspci = "{}\n\t\tLnkSta:\tSpeed 16GT/s (ok), Width x4 (downgraded)\n"
    hca = lspci.format("3b:00.0 Infiniband controller: Mellanox Technologies MT2910 Family")
    board = lspci.format("18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB]")
    assert [c for c, _ in _causes(_lines(hca))] == [Category.HARDWARE_NETWORK]
    assert [c for c, _ in _causes(_lines(board))] == [Category.HARDWARE_GPU]


def test_a_power_limit_set_below_the_default_is_the_nodes_configuration() -> None:
    readings = (
        "    Power Readings\n        Power Draw                        : 298.10 W\n"
        "        Current Power Limit               : 300.00 W\n"
        "        Requested Power Limit             : {} W\n"
        "        Default Power Limit               : 700.00 W\n"
    )
    found = node_file_causes(_lines(readings.format("300.00")))
    assert [(c, e.text.split(":")[0].strip()) for c, e in found] == [
        (Category.SYSTEM_SOFTWARE, "Requested Power Limit")
    ]
    assert node_file_causes(_lines(readings.format("700.00"))) == []
    command = LOCKED.replace("-lgc 1095,1095", "-pl 300")
    assert [c for c, _ in node_file_causes(_lines(command, "journal_gpu03.txt"))] == [
        Category.SYSTEM_SOFTWARE
    ]


def test_one_column_per_clocks_event_reason() -> None:
    table = (
        "index, clocks_throttle_reasons.hw_thermal_slowdown, "
        "clocks_throttle_reasons.hw_power_brake_slowdown\n0, Not Active, Not Active\n1, {}, {}\n"
    )
    assert [c for c, _ in node_file_causes(_lines(table.format("Active", "Not Active")))] == [
        Category.HARDWARE_GPU
    ]
    assert [c for c, _ in node_file_causes(_lines(table.format("Not Active", "Active")))] == [
        Category.HARDWARE_HOST
    ]
    assert node_file_causes(_lines(table.format("Not Active", "Not Active"))) == []
