"""A node's NVSwitch fabric that cannot bind NVLS multicast memory (its fabric manager restarted
without a GPU reset), and a running job slowed by a debugging mode its own code turned on.

Real lines: NCCL's transport/nvls.cc (`Failed to bind NVLink SHARP (NVLS) Multicast memory ...
CUDA error 401`, quoted in pytorch/pytorch#177472; `transport/nvls.cc:158 NCCL WARN Cuda failure
1 'invalid argument'`, NVIDIA/nccl#1338), PyTorch's anomaly-mode warning
(torch/autograd/anomaly_mode.py, quoted in stas00/ml-engineering), HF Trainer's tqdm bar."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

DGX = ["dgx-h100-05", "dgx-h100-06", "dgx-h100-07", "dgx-h100-08"]
NVLS_JOB = """\
0: NCCL version 2.27.5+cuda12.9
2: [2026-03-16 08:41:37] dgx-h100-07:78210:79710 [0] transport/nvls.cc:254 NCCL WARN Cuda failure 401 'the operation cannot be performed in the present state'
2: [rank16]: Traceback (most recent call last):
2: [rank16]:   File "/workspace/megatron/training/initialize.py", line 339, in _initialize_distributed
2: [rank16]:     torch.distributed.barrier(device_ids=[args.local_rank])
2: [rank16]: ncclUnhandledCudaError: Call to CUDA function failed.
2: [rank16]: Last error:
2: [rank16]: Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the operation cannot be performed in the present state'.
2: [rank16]: This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches.
2: [rank16]: Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future.
0: dgx-h100-05:329451:342675 [4] misc/socket.cc:64 NCCL WARN socketProgress: Connection closed by remote peer dgx-h100-07<57589>
0: [rank4]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, remote process exited or there was a network error, NCCL version 2.27.5
0: [rank4]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
3: [rank27]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
srun: error: dgx-h100-07: task 2: Exited with exit code 1
srun: error: dgx-h100-05: task 0: Exited with exit code 1
"""


def test_one_nodes_nvls_bind_failure_is_its_fabric_and_the_node_is_excluded() -> None:
    a = attribute_text(NVLS_JOB, DGX)
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.CRASH, Category.SYSTEM_SOFTWARE, ["dgx-h100-07"],
    )  # fmt: skip
    assert first_action(a) == "requeue_excluding_nodes"


def test_the_nvls_warning_alone_names_the_node_too() -> None:
    only_warn = "\n".join(ln for ln in NVLS_JOB.splitlines() if "[rank16]" not in ln).replace(
        "Cuda failure 401 'the operation cannot be performed in the present state'",
        "Cuda failure 1 'invalid argument'",
    )
    assert attribute_text(only_warn, DGX).culprit_nodes == ["dgx-h100-07"]


def test_nvls_running_the_gpu_out_of_memory_is_not_the_fabric() -> None:
    oom = NVLS_JOB.replace(
        "Cuda failure 401 'the operation cannot be performed in the present state'",
        "Cuda failure 2 'out of memory'",
    )
    oom = "\n".join(ln for ln in oom.splitlines() if "NVLS) Multicast" not in ln)
    assert attribute_text(oom, DGX).category != Category.SYSTEM_SOFTWARE


# --- autograd anomaly detection left on in a running job --------------------------------
def _dpo(anomaly: bool) -> str:
    warn = (
        "[node-b21] /home/tgarcia/dpo/train.py:88: UserWarning: Anomaly Detection has been enabled. This mode will increase the runtime and should only be enabled for debugging.\n"
        "[node-b21]   torch.autograd.set_detect_anomaly(args.debug_anomaly)\n"
    ) if anomaly else ""  # fmt: skip
    bars = "".join(
        f"[node-b21]  {s * 100 // 360:2d}%|▎         | {s}/360 [{s * 62 // 3600}:{s * 62 // 60 % 60:02d}:{s * 62 % 60:02d}<5:00:00, 61.70s/it]\n"
        for s in range(5, 200, 5)
    )
    return (
        "# job still running at time of capture (squeue: R 3:27:20, node-b[21-22])\n" + warn + bars
    )


SQUEUE = """\
   JOBID         NAME ST       TIME NODELIST(REASON)
   80544   dpo-v3-dbg  R    3:27:20 node-b[21-22]
"""


def test_a_running_job_with_anomaly_detection_on_is_an_application_straggler() -> None:
    a = attribute_text(_dpo(anomaly=True), ["node-b21", "node-b22"], scheduler=SQUEUE)
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER,
        Category.APPLICATION,
        [],
    )
    assert first_action(a) == "none"


def test_the_same_run_without_it_is_healthy() -> None:
    assert (
        attribute_text(_dpo(anomaly=False), ["node-b21", "node-b22"], scheduler=SQUEUE).kind
        == "none"
    )
