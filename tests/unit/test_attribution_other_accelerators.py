"""The same failure classes on other vendors' accelerators, in their own words: Intel Gaudi's
habanalabs driver and HCCL, AWS Neuron's runtime, AMD's rocBLAS; and host evidence any vendor's
node shows (a BMC's fan sensors, ibv_devinfo's port state, a node file saved without `.txt`).

Real formats: Linux drivers/accel/habanalabs (gaudi2.c, device.c), habana_frameworks' HCCL
process group, the AWS Neuron runtime troubleshooting guide and nrt_status.h, rocBLAS's
tensile_host.cpp (ROCm/ROCm#4625), ipmitool sel elist, ibv_devinfo."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

GAUDI = [f"gaudi2-r3-n{i:02d}" for i in range(5, 13)]
# Every rank's HCCL collective fails alike, under the job's own frame: a peer or the fabric,
# never the job's code alone.
HCCL_JOB = "".join(
    f"{t}: [rank{8 * t + 3}]: Traceback (most recent call last):\n"
    f'{t}: [rank{8 * t + 3}]:   File "/root/train_sd.py", line 912, in main\n'
    f"{t}: [rank{8 * t + 3}]:     accelerator.backward(loss)\n"
    f'{t}: [rank{8 * t + 3}]:   File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py", line 1672, in _sync_buffers\n'
    f"{t}: [rank{8 * t + 3}]: RuntimeError: Collective call returned error\n"
    f"{t}: [rank{8 * t + 3}]: Exception raised from operator() at /npu-stack/pytorch-integration/python_packages/habana_frameworks/torch/distributed/hccl/process_group_hccl_base.cpp:286 (most recent call first):\n"
    for t in range(8)
) + "".join(
    f"srun: error: gaudi2-r3-n{t + 5:02d}: task {t}: Exited with exit code 1\n" for t in range(8)
)


def test_hccl_collective_errors_on_every_rank_are_not_the_jobs_code() -> None:
    a = attribute_text(HCCL_JOB, GAUDI)
    assert a.category != Category.APPLICATION and first_action(a) != "stop", a.summary


def test_a_critical_gaudi_ecc_error_is_that_nodes_accelerator() -> None:
    dmesg = (
        "[985930.357672] habanalabs hl5: ECC error detected. address: 0x1001fb3c40. Syndrom: 0x2. block id 41. critical 1.\n"
        "[985930.358472] habanalabs hl5: Going to reset device\n"
        "[985931.358115] habanalabs hl5: Killing user process pid=88346\n"
    )
    a = attribute_text(HCCL_JOB, GAUDI, {"dmesg_gaudi2-r3-n11": dmesg})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gaudi2-r3-n11"])
    corrected = dmesg.replace("critical 1.", "critical 0.")
    assert attribute_text(HCCL_JOB, GAUDI, {"dmesg_gaudi2-r3-n11": corrected}).category != (
        Category.HARDWARE_GPU
    )


def test_a_fatal_aer_under_the_gaudi_driver_is_the_accelerator() -> None:
    dmesg = (
        "[195080.006314] pcieport 0000:4c:01.0: AER: Uncorrected (Fatal) error received: 0000:4d:00.0\n"
        "[195080.006414] habanalabs 0000:4d:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)\n"
    )
    a = attribute_text(HCCL_JOB, GAUDI, {"dmesg_gaudi2-r3-n11": dmesg})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gaudi2-r3-n11"])


TRN = [f"compute-st-trn132xl-{i}" for i in range(1, 9)]


def test_a_neuron_hbm_uncorrectable_error_is_that_nodes_accelerator() -> None:
    job = (
        "5: 2025-Jun-03 09:28:41.483101 91437:91648 ERROR  TDRV:exec_consume_infer_status_notifications  Uncorrectable memory error is detected on Neuron device: 11:1 metadata: 0x2. Failing execution.\n"
        "5: [rank183]: RuntimeError: Bad StatusOr access: INTERNAL: RunNeuronCCImpl: error condition error != nullptr: <class 'RuntimeError'>: nrt_execute status=1201 (NRT_EXEC_HW_ERR_HBM_UE)\n"
        "srun: error: compute-st-trn132xl-6: task 5: Exited with exit code 1\n"
    )
    a = attribute_text(job, TRN)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["compute-st-trn132xl-6"])


def test_a_node_without_its_neuron_driver_is_that_nodes_software() -> None:
    job = (
        "".join(
            f"1: 2025-Sep-15 06:00:19.86498{r} 331{r}:331{r} ERROR   NRT:nrt_init                                Unable to determine Neuron Driver version. Please check aws-neuron-dkms package is installed.\n"
            for r in range(4)
        )
        + "srun: error: compute-st-trn132xl-2: task 1: Exited with exit code 1\n"
    )
    a = attribute_text(job, TRN)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["compute-st-trn132xl-2"])
    assert first_action(a) == "requeue_excluding_nodes"


def test_rocblas_without_kernels_for_the_gpu_on_two_nodes_is_those_nodes_install() -> None:
    nodes = [f"mi300-e0{i}" for i in range(1, 9)]
    job = "".join(
        f"{t}: rocBLAS error: Cannot read /opt/rocm-6.2.1/lib/rocblas/library/TensileLibrary.dat: No such file or directory for GPU arch : gfx942\n"
        f"srun: error: mi300-e0{t + 1}: task {t}: Aborted (core dumped)\n"
        for t in (2, 6)
    )
    a = attribute_text(job, nodes)
    assert (a.category, sorted(a.culprit_nodes)) == (
        Category.SYSTEM_SOFTWARE,
        ["mi300-e03", "mi300-e07"],
    )


def test_a_stopped_chassis_fan_is_the_host_not_the_throttled_gpu() -> None:
    job = (
        "".join(
            f"0: [step-timer] step {s}: rank 4 slowest, step {3.1 if s > 300 else 1.2:.2f}s\n"
            for s in range(100, 700, 100)
        )
        + "# job still running at collection time\n"
    )
    sel = (
        "$ ipmitool sel elist | tail -6    # BMC of gh-b-014\n"
        " 1f2 | 09/12/2025 | 00:30:25 | Fan FAN3_TACH | Lower Critical going low  | Asserted | Reading 0 < Threshold 1500 RPM\n"
    )
    nvsmi = "    Clocks Event Reasons\n        HW Thermal Slowdown               : Active\n"
    a = attribute_text(job, ["gh-b-013", "gh-b-014"], {"sel_gh-b-014": sel, "node_gh-b-014": nvsmi})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["gh-b-014"])
    assert a.kind == AnomalyKind.STRAGGLER


def test_ibv_devinfo_port_down_names_its_node() -> None:
    job = (
        "0: 2025-Aug-21 16:18:17.888243 52000:52300 [7] ofi_net.cc:1187 CCOM WARN NET/OFI Request completed with error. RC: 113. Error: Remote unreachable (EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE). peer 172.31.42.35\n"
        "srun: error: train-dy-trn132xl-1: task 0: Exited with exit code 1\n"
    )
    devinfo = "$ ibv_devinfo -d rdmap144s27\nhca_id:\trdmap144s27\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n"
    nodes = [f"train-dy-trn132xl-{i}" for i in range(1, 5)]
    a = attribute_text(job, nodes, {"node_train-dy-trn132xl-3": devinfo})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["train-dy-trn132xl-3"])
    healthy = devinfo.replace("PORT_DOWN (1)", "PORT_ACTIVE (4)")
    assert attribute_text(job, nodes, {"node_train-dy-trn132xl-3": healthy}).culprit_nodes != [
        "train-dy-trn132xl-3"
    ]
