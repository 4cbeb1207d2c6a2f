"""A running job's own per-node profile lines single out a slow node; its diagnostics say why.

Profile lines in the `key=value` style training scripts print per node (`host=... *_ms=...`,
`*_busbw_GBps=...`); the diagnostics are lspci(8)'s ACSCtl line (pciutils) and the kernel's
IOMMU default-domain line (drivers/iommu/iommu.c), both named in NCCL's troubleshooting guide.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["l40s-01", "l40s-02", "l40s-03", "l40s-04"]
RUNNING = "# job 66012 still running at 2025-10-27 09:30:00\n"


def _run(job: str, node_files: dict[str, str] | None = None) -> Attribution:
    logs = {h: _lines(t, f"node_{h}.txt") for h, t in (node_files or {}).items()}
    return attribute(Registry.default(), None, _lines(job), None, [], NODES, node_logs=logs)


def _profile(slow: dict[str, int], steps: range = range(1000, 1700, 100)) -> str:
    """Per-node reduce times every 100 steps; `slow` maps a node to its reduce time."""
    out = RUNNING
    for step in steps:
        for t, host in enumerate(NODES):
            reduce_ms = slow.get(host, 240 + t * 3)
            out += (
                f"{t}: [2025-10-27 09:{step // 100:02d}:20] [perf] step={step} host={host} "
                f"compute_ms={1710 + t * 4} intra_node_reduce_ms={reduce_ms} inter_node_ms=402\n"
            )
        out += f"0: [2025-10-27 09:{step // 100:02d}:20] step {step} loss 5.350 step_time 2.90s\n"
    return out


ACS_ON = (
    "$ sudo lspci -vvv -s 17:00.0 | grep -E 'ACSCap|ACSCtl'\n"
    "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
    "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
)


def test_one_node_slow_in_every_profile_round_is_named_and_excluded() -> None:
    a = _run(_profile({"l40s-03": 1021}))
    assert (a.kind, a.culprit_nodes) == (AnomalyKind.STRAGGLER, ["l40s-03"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_acs_redirect_on_the_slow_node_is_its_configuration() -> None:
    a = _run(_profile({"l40s-03": 1021}), {"l40s-03": ACS_ON})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["l40s-03"])


def test_translated_iommu_on_the_slow_node_is_its_configuration() -> None:
    iommu = "[    1.918804] iommu: Default domain type: Translated\n"
    a = _run(_profile({"l40s-02": 990}), {"l40s-02": iommu})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["l40s-02"])


def test_even_profiles_or_a_rotating_slow_node_name_no_one() -> None:
    assert _run(_profile({})).culprit_nodes == []
    rotating = RUNNING + "".join(
        _profile({NODES[i % 4]: 1000}, range(1000 + i * 100, 1100 + i * 100)).replace(RUNNING, "")
        for i in range(6)
    )
    assert _run(rotating).culprit_nodes == []


# nvidia-smi nvlink --status (nvidia-smi(1)): four of one GPU's links down, the rest up.
NVLINK = "GPU 5: NVIDIA H100 80GB HBM3\n" + "".join(
    f"\t Link {i}: {'<inactive>' if i in (2, 3, 5, 9) else '26.562 GB/s'}\n" for i in range(18)
)
TITAN = (
    "+ srun --ntasks-per-node=1 torchrun --nnodes=4 --nproc_per_node=8 --rdzv_backend c10d "
    "--rdzv_endpoint=gpu-l05:29500 -m torchtitan.train\n"
    "# same config on gpu-l[01-04] last week: ~7,350 tps\n"
    + "".join(
        f"[rank0]:[titan] 2026-12-02 16:{m:02d}:00,000 - root - INFO - step: {m * 10}  loss:  "
        f"3.29  tps: 5,107  mfu: 29.59%\n"
        for m in range(1, 11)
    )
    + "# job 8841120 still running at 2026-12-02 16:12\n"
)


def _titan(node_files: dict[str, str]) -> Attribution:
    logs = {h: _lines(t, f"node_{h}.txt") for h, t in node_files.items()}
    # No node list given: the job's own output must say which nodes ran it.
    return attribute(Registry.default(), None, _lines(TITAN), None, [], [], node_logs=logs)


def test_a_gpu_with_some_nvlinks_inactive_on_a_running_job_is_its_straggler() -> None:
    clean = "(no kernel messages in the job window)\n"
    files = {"gpu-l05": clean, "gpu-l06": clean, "gpu-l07": NVLINK, "gpu-l08": clean}
    a = _titan(files)
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER,
        Category.HARDWARE_GPU,
        ["gpu-l07"],
    )


def test_a_gpu_without_nvlink_at_all_is_not_flagged() -> None:
    no_nvlink = "GPU 0: NVIDIA L40S\n" + "".join(f"\t Link {i}: <inactive>\n" for i in range(4))
    clean = "(no kernel messages in the job window)\n"
    files = {"gpu-l05": clean, "gpu-l06": clean, "gpu-l07": no_nvlink, "gpu-l08": clean}
    assert _titan(files).culprit_nodes == []


# nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv
APPS = "gpu_bus_id, pid, process_name, used_memory\n" + "".join(
    f"00000000:{bus}:00.0, {301772 + i}, /usr/bin/python3, 70211 MiB\n"
    for i, bus in enumerate(["18", "2A", "3A", "5D"])
)


def test_a_leftover_process_sharing_one_gpu_of_the_slow_node_is_its_software_state() -> None:
    leftover = APPS + "00000000:3A:00.0, 40112, python3, 30988 MiB\n"
    a = _run(_profile({"l40s-03": 1021}), {"l40s-03": leftover})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["l40s-03"])


def test_one_process_per_gpu_says_nothing_about_the_slow_node() -> None:
    a = _run(_profile({"l40s-03": 1021}), {"l40s-03": APPS})
    assert a.category != Category.SYSTEM_SOFTWARE and a.culprit_nodes == ["l40s-03"]
