"""A running job's straggler is found from its nodes' own diagnostics when its output shows one
rank's rhythm only; the job's node list and id come from its own output when no scheduler
record is at hand."""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.log_header import job_id_in_log, nodes_in_log
from resurgo.attribute.offline import analyse_bundle, default_advice
from resurgo.attribute.rules import attribute
from resurgo.attribute.scheduler import parse_scheduler
from resurgo.contracts import AdviceKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]
# A steadily progressing job: Megatron's iteration line (megatron/training/training.py).
STEADY = "\n".join(
    f"0: [2025-05-21 09:{m:02d}:00] iteration {100 * m:>8}/   40000 | elapsed time per "
    f"iteration (ms): 4409.3 | lm loss: 2.88E+00"
    for m in range(1, 9)
)
RUNNING = "# job still running at 2025-05-21 09:09:00\n"


def _run(job: str, node_files: dict[str, str], nodes: list[str] | None = None) -> Attribution:
    logs = {h: _lines(t, f"node_{h}.txt") for h, t in node_files.items()}
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES if nodes is None else nodes,
        node_logs=logs,
    )  # fmt: skip


# nvidia-smi -q -d PCI (nvidia-smi(1)): the GPU's link trained at x4 of x16.
DOWNTRAINED = """GPU 00000000:3A:00.0
        GPU Link Info
            Link Width
                Max                       : 16x
                Current                   : 4x"""
FULL_WIDTH = DOWNTRAINED.replace(
    "Current                   : 4x", "Current                   : 16x"
)


def test_a_gpu_link_trained_below_its_width_on_one_node_is_the_straggler() -> None:
    a = _run(RUNNING + STEADY, {"gpu03": DOWNTRAINED, "gpu01": FULL_WIDTH})
    assert (a.kind, a.category, a.culprit_nodes) == ("straggler", Category.HARDWARE_GPU, ["gpu03"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_the_kernels_limited_by_line_is_a_downtrained_link() -> None:
    # Linux drivers/pci/pci.c __pcie_print_link_status, as dmesg prints it at boot.
    line = (
        "[    4.300000] pci 0000:3a:00.0: 126.028 Gb/s available PCIe bandwidth, limited by "
        "32.0 GT/s PCIe x4 link at 0000:38:01.0 (capable of 504.112 Gb/s with 32.0 GT/s "
        "PCIe x16 link)"
    )
    a = _run(RUNNING + STEADY, {"gpu02": line})
    assert (a.kind, a.culprit_nodes) == ("straggler", ["gpu02"])


def test_a_cpu_governor_at_powersave_on_one_node_is_node_software() -> None:
    # cpupower frequency-info (cpupower-frequency-info(1)).
    slow = '                  The governor "powersave" may decide which speed to use'
    fast = '                  The governor "performance" may decide which speed to use'
    a = _run(RUNNING + STEADY, {"gpu04": slow, "gpu01": fast})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu04"])


def test_the_same_state_on_every_node_is_not_one_nodes_fault() -> None:
    slow = '                  The governor "powersave" may decide which speed to use'
    a = _run(RUNNING + STEADY, {n: slow for n in NODES})
    assert a.culprit_nodes == []
    assert default_advice(a).kind != AdviceKind.REQUEUE_EXCLUDING


def test_a_clean_running_job_with_clean_node_files_stays_healthy() -> None:
    a = _run(RUNNING + STEADY, {"gpu01": FULL_WIDTH, "gpu02": FULL_WIDTH})
    assert a.kind == "none"


def test_gpudirect_rdma_off_on_one_node_only_names_it() -> None:
    # NCCL's INFO line as quoted in NVIDIA/nccl#1537; the other nodes' channels use GDRDMA.
    job = (
        "0: gpu01:12001:12170 [0] NCCL INFO Channel 00/0 : 24[0] -> 0[0] [receive] via "
        "NET/IB/0/GDRDMA\n"
        "1: gpu02:11566:11731 [0] NCCL INFO Channel 00/0 : 8[0] -> 16[0] [send] via "
        "NET/IB/0/GDRDMA\n"
        "2: gpu03:11873:12040 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
        "3: gpu04:12310:12477 [0] NCCL INFO Channel 00/0 : 16[0] -> 24[0] [receive] via "
        "NET/IB/0/GDRDMA\n"
    )
    a = _run(RUNNING + job + STEADY, {})
    assert (a.kind, a.category, a.culprit_nodes) == (
        "straggler",
        Category.SYSTEM_SOFTWARE,
        ["gpu03"],
    )


def test_gpudirect_rdma_off_everywhere_is_a_site_choice_not_a_straggler() -> None:
    job = "".join(
        f"{t}: gpu0{t + 1}:1200{t}:1217{t} [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for "
        f"HCA 0 'mlx5_0'\n"
        for t in range(4)
    )
    assert _run(RUNNING + job + STEADY, {}).kind == "none"


def test_the_node_list_comes_from_slurms_environment_in_the_log() -> None:
    lines = _lines("SLURM_JOB_ID=4412 SLURM_JOB_NODELIST=gpu[011-012] SLURM_NTASKS_PER_NODE=8")
    assert nodes_in_log(lines) == ["gpu011", "gpu012"]
    assert job_id_in_log(lines) == 4412


def test_an_operators_header_names_the_allocation() -> None:
    lines = _lines("# job 5512908  nodes=gdr-[1-4]  8 H100/node; ran fine on gdr-[5-8] last week")
    assert nodes_in_log(lines) == ["gdr-1", "gdr-2", "gdr-3", "gdr-4"]


def test_a_header_contradicted_by_the_hosts_nccl_names_is_ignored() -> None:
    lines = _lines(
        "# nodes=gdr-[1-2]\n"
        "0: other-7:12001:12001 [0] NCCL INFO Bootstrap : Using ens9f0:10.12.4.1<0>"
    )
    assert nodes_in_log(lines) == []


def test_another_jobs_sacct_row_is_not_this_jobs_state() -> None:
    text = (
        "JobID           JobName        NodeList      State    Elapsed\n"
        "------------ ---------- --------------- ---------- ----------\n"
        "4398         det-r101     gpu[011,019]  COMPLETED   09:41:12\n"
        "4412         det-r101     gpu[011-012]    RUNNING   03:02:55"
    )
    facts = parse_scheduler(_lines(text, "scheduler.txt"), 4412)
    assert facts.job is not None
    assert (facts.job.job_id, facts.job.state) == (4412, "RUNNING")
    assert facts.job_states == ["RUNNING"]


# ProcessGroupNCCL's watchdog (as the failure taxonomy quotes it) on ranks 0-2; rank 3 silent.
WATCHDOG = "\n".join(
    f"{t}: [rank{t}]:[E ProcessGroupNCCL.cpp:563] [Rank {t}] Watchdog caught collective "
    f"operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    f"Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
    for t in range(3)
)
# Every rank said hello first (so the job's world is known).
HELLO = "\n".join(f"{t}: [rank{t}]: world_size=4 backend=nccl" for t in range(4)) + "\n"
# torchelastic's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors).
SIGABRT_ROOT = """0: Root Cause (first observed failure):
0: [0]:
0:   time      : 2024-05-01_10:00:00
0:   host      : gpu01
0:   rank      : 0 (local_rank: 0)
0:   exitcode  : -6 (pid: 12345)
0:   error_file: <N/A>
0:   traceback : Signal 6 (SIGABRT) received by PID 12345"""


def test_the_watchdogs_own_sigabrt_after_its_timeouts_names_no_node() -> None:
    a = _run(HELLO + WATCHDOG + "\n" + SIGABRT_ROOT, {})
    assert a.kind == "hang"
    assert "gpu01" not in a.culprit_nodes
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_silent_node_whose_kernel_log_was_checked_clean_is_not_named() -> None:
    clean = {n: "(no kernel messages in the job window)" for n in NODES}
    logs = {h: _lines(t, f"dmesg_{h}.txt") for h, t in clean.items()}
    a = attribute(
        Registry.default(), None, _lines(HELLO + WATCHDOG), None, [], NODES, node_logs=logs
    )
    assert (a.kind, a.culprit_nodes) == ("hang", [])


def test_a_silent_node_without_any_node_logs_is_still_the_suspect() -> None:
    a = attribute(Registry.default(), None, _lines(HELLO + WATCHDOG), None, [], NODES)
    assert a.culprit_nodes == ["gpu04"]
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_every_node_throttling_hot_is_a_shared_cause_with_no_node_to_exclude() -> None:
    # dcgm-exporter's GPU temperature gauge (DCGM_FI_DEV_GPU_TEMP) at 92 C on every node.
    metrics = _lines(
        "\n".join(f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="{n}"}} 92' for n in NODES),
        "metrics.txt",
    )
    a = attribute(
        Registry.default(), None, _lines(RUNNING + STEADY), None, [], NODES, metrics=metrics
    )
    assert a.culprit_nodes == []
    assert default_advice(a).kind == AdviceKind.NONE


def test_one_node_throttling_hot_is_that_nodes_straggler() -> None:
    metrics = _lines(
        "\n".join(
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="{n}"}} {92 if n == "gpu02" else 61}'
            for n in NODES
        ),
        "metrics.txt",
    )
    a = attribute(
        Registry.default(), None, _lines(RUNNING + STEADY), None, [], NODES, metrics=metrics
    )
    assert a.culprit_nodes == ["gpu02"]


# torchtitan's step line (torchtitan/train.py metrics logging): throughput drops for good.
def _titan(tps: list[int]) -> str:
    return "".join(
        f"0: [rank0]:[titan] 2025-07-02 10:{36 + i:02d}:02,000 - root - INFO - "
        f"step: {1810 + 10 * i}  loss:  2.1211  memory: 58.71GiB(74.12%)  tps: {t:,}  mfu: 34.43%\n"
        for i, t in enumerate(tps)
    )


SLOWED = _titan([6102, 6109, 6116, 6123, 6130, 6107, 3919, 3892, 3905, 3918, 3891, 3904])


def test_a_job_wide_throughput_drop_in_a_log_that_starts_mid_run_is_a_straggler() -> None:
    a = _run(RUNNING + SLOWED, {})
    assert (a.kind, a.culprit_nodes) == ("straggler", [])
    assert default_advice(a).kind == AdviceKind.NONE


def test_link_errors_still_counting_on_one_node_name_the_slow_job_s_culprit() -> None:
    # node_exporter's infiniband collector, two scrapes ten minutes apart.
    scrapes = []
    for n in NODES:
        errors = (0, 44000) if n == "gpu03" else (0, 0)
        scrapes += [
            f'node_infiniband_symbol_error_total{{device="mlx5_2",instance="{n}:9100",port="1"}}'
            f" {v} {ts}"
            for v, ts in zip(errors, (1751453400000, 1751454000000), strict=True)
        ]
    a = attribute(
        Registry.default(), None, _lines(RUNNING + SLOWED), None, [], NODES,
        metrics=_lines("\n".join(scrapes), "metrics.txt"),
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu03"])


def _clock_metrics(slow_reason: int) -> list[LogLine]:
    # dcgm-exporter gauges: SM clock and the clock event (throttle) reason bitmask.
    rows = []
    for n in NODES:
        clock = 1095 if n == "gpu02" else 1980
        reason = slow_reason if n == "gpu02" else 0
        rows += [
            f'DCGM_FI_DEV_SM_CLOCK{{gpu="0",Hostname="{n}"}} {clock}',
            f'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{gpu="0",Hostname="{n}"}} {reason}',
        ]
    return _lines("\n".join(rows), "metrics.txt")


def test_slow_clocks_with_no_throttle_reason_are_clocks_left_locked() -> None:
    a = attribute(
        Registry.default(), None, _lines(RUNNING + STEADY), None, [], NODES,
        metrics=_clock_metrics(0),
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])


def test_slow_clocks_with_a_thermal_reason_are_the_gpu() -> None:
    # 0x20: SW thermal slowdown (NVML clocks event reasons).
    a = attribute(
        Registry.default(), None, _lines(RUNNING + STEADY), None, [], NODES,
        metrics=_clock_metrics(0x20),
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu02"])


# pytorch/examples imagenet/main.py ProgressMeter lines, then the job's own per-node summary.
IMAGENET = "\n".join(
    f"0: [rank0] Epoch: [4][{200 * i:>4}/2502]\tTime  0.781 ( 0.70)\tData  0.372 ( 0.30)\t"
    "Loss 2.111e+00\tAcc@1  51.2\tAcc@5  76.1"
    for i in range(5)
)
SUMMARY = (
    "0: [rank0] per-rank data wait (s, last 200 iters): ranks 0-3 (rtx-51) 0.004 | ranks 4-7 "
    "(rtx-52) 0.003 | ranks 8-11 (rtx-53) 0.371 | ranks 12-15 (rtx-54) 0.004"
)
# cpupower(1) frequency-info on the slow node (kernel admin-guide pm/cpufreq).
POWERSAVE = (
    "$ cpupower frequency-info | grep -E 'governor|current CPU'\n"
    '  The governor "powersave" may decide which speed to use\n'
    "  current CPU frequency: 800 MHz (asserted by call to kernel)\n"
)


def test_a_per_node_summary_names_the_slow_node_and_its_diagnostics_the_cause() -> None:
    v = _run(f"{IMAGENET}\n{SUMMARY}\n# job still running", {"rtx-53": POWERSAVE}, nodes=[])
    assert (v.kind, v.category, v.culprit_nodes) == (
        "straggler", Category.SYSTEM_SOFTWARE, ["rtx-53"]
    )  # fmt: skip


def test_a_per_node_summary_with_even_values_names_no_node() -> None:
    even = SUMMARY.replace("0.371", "0.004")
    v = _run(f"{IMAGENET}\n{even}\n# job still running", {}, nodes=[])
    assert v.culprit_nodes == []


def _slowest(ranks: str, value: float) -> str:
    # A job's own cross-rank summary line (the shape of per-step phase reports).
    return "\n".join(
        f" 0: [rank0] step {1000 + 200 * i} | loss 0.11 | step 2.94s | slowest 8 ranks by "
        f"(data+h2d): {ranks} ({value:.2f}s) | median (data+h2d) 0.34s"
        for i in range(6)
    )


def _bundle(tmp_path: Path, value: float) -> list[str]:
    header = "SLURM_JOB_ID=614022 SLURM_JOB_NODELIST=vis-[01-04] SLURM_NTASKS=32\n" + "".join(
        f"{r}: [rank{r}] host=vis-0{r // 8 + 1} gpu=0 cpu_affinity=0-13\n" for r in range(0, 32, 4)
    )
    (tmp_path / "job.log").write_text(
        header + _slowest("16,17,18,19,20,21,22,23", value) + "\n# job still running\n"
    )
    v = analyse_bundle(tmp_path).as_json()
    return [v["kind"], *v["culprit_nodes"]]


def test_the_same_slowest_ranks_report_after_report_are_their_node(tmp_path: Path) -> None:
    assert _bundle(tmp_path, 0.95) == ["straggler", "vis-03"]


def test_slowest_ranks_near_the_median_are_no_straggler(tmp_path: Path) -> None:
    assert _bundle(tmp_path, 0.38) == ["none"]
