"""AMD GPUs under ROCm: the same three questions as on NVIDIA, in ROCm's words.

- An uncorrectable error the amdgpu driver's RAS interrupt reports on one node (Linux
  drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c, `uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT)
  detected!`; amdgpu_device.c `GPU reset(%d) failed`) is that node's GPU: hardware_gpu, excluded.
- `hipErrorNoBinaryForGpu: Unable to find code object for all current devices!` (the HIP
  runtime; ROCm/legacy-rocm-build#1530) is CUDA's "no kernel image": the job's build, stop.
- `Memory access fault by GPU node-N (Agent handle: ...)` (ROCR-Runtime; ROCm/pytorch#797) is
  CUDA's illegal memory access; `node-N` is the HSA agent's number, never a host.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["mi-01", "mi-02", "mi-03"]


def _run(job: str, node_logs: dict[str, list[LogLine]] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES, node_logs=node_logs,
        scheduler_lines=[],
    )  # fmt: skip


PROGRESS = "".join(
    f"0: [default0]:[rank0]: step {s} | loss 2.31{s % 10} | 1.20 s/it\n" for s in range(100, 104)
)


def test_an_uncorrectable_error_on_one_nodes_amd_gpu_excludes_that_node() -> None:
    job = PROGRESS + (
        "1: [default0]:HW Exception by GPU node-2 (Agent handle: 0x55d7c41e9a30) reason :GPU Hang\n"
        "1: [2026-12-02 16:23:41,902] torch.distributed.elastic.multiprocessing.api: [ERROR] "
        "failed (exitcode: -6) local_rank: 0 (pid: 422101) of binary: /opt/conda/bin/python\n"
        "0: [default3]:[rank3]:[E1202 16:23:52.410211 301144 ProcessGroupNCCL.cpp:1575] [PG 0 "
        "(default_pg) Rank 3] Process group watchdog thread terminated with exception: NCCL "
        "error: remote process exited or there was a network error, NCCL version 2.20.5\n"
        "srun: error: mi-02: task 1: Exited with exit code 1\n"
        "srun: error: mi-[01,03]: tasks 0,2: Exited with exit code 1\n"
    )
    dmesg = (
        "[Wed Dec  2 16:23:38 2026] amdgpu 0000:1c:00.0: {1}uncorrectable hardware "
        "error(ERREVENT_ATHUB_INTERRUPT) detected!\n"
        "[Wed Dec  2 16:23:38 2026] amdgpu 0000:1c:00.0: amdgpu: GPU reset begin!\n"
        "[Wed Dec  2 16:23:47 2026] amdgpu 0000:1c:00.0: amdgpu: GPU reset(1) failed\n"
    )
    clean = _lines("(no kernel messages in the job window)", "dmesg_mi-01.txt")
    a = _run(job, {"mi-02": _lines(dmesg, "dmesg_mi-02.txt"), "mi-01": clean})
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.CRASH, Category.HARDWARE_GPU, ["mi-02"],
    )  # fmt: skip
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_reset_that_succeeded_after_correctable_errors_is_no_fault() -> None:
    dmesg = (
        "[ 8411.120455] amdgpu 0000:05:00.0: amdgpu: 4 correctable hardware errors detected in "
        "umc block\n"
        "[ 8411.120460] amdgpu 0000:05:00.0: amdgpu: GPU reset(1) succeeded!\n"
    )
    a = _run(PROGRESS, {"mi-02": _lines(dmesg, "dmesg_mi-02.txt")})
    assert a.category != Category.HARDWARE_GPU and a.culprit_nodes == []


def test_a_build_for_another_gfx_target_on_every_node_stops() -> None:
    job = (
        "".join(
            f'{t}: "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"\n'
            f"{t}: /usr/bin/bash: line 1: 70011{t} Aborted                 (core dumped) python "
            "train.py\n"
            for t in range(3)
        )
        + "srun: error: mi-[01-03]: tasks 0-2: Exited with exit code 134\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_memory_access_faults_on_every_rank_are_the_code_and_name_no_host() -> None:
    job = (
        "[default0]:Memory access fault by GPU node-2 (Agent handle: 0x5612e8c41a10) on address "
        "0x7f2a53193000. Reason: Page not present or supervisor privilege.\n"
        "[default3]:Memory access fault by GPU node-5 (Agent handle: 0x55a0b11c3e40) on address "
        "0x7fb0e2e4b000. Reason: Page not present or supervisor privilege.\n"
        "[default1]:Memory access fault by GPU node-3 (Agent handle: 0x560a77b1e2c0) on address "
        "(nil). Reason: Page not present or supervisor privilege.\n"
        "srun: error: mi-01: task 0: Exited with exit code 1\n"
        "srun: error: mi-02: task 1: Exited with exit code 1\n"
    )
    a = _run(job)
    assert a.category == Category.APPLICATION
    assert not any(n.startswith("node") for n in a.culprit_nodes)
    assert "mi-01" not in a.culprit_nodes and "mi-02" not in a.culprit_nodes
