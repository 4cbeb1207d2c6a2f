"""Classes from real issue threads (blind set s57): NVLink5 Xids the driver marks Nonfatal, a
retry-exceeded error placed by the one HCA linked below its peers, an error that looks like the
job's on the one node whose GPU stack is broken, an unlabelled FileNotFoundError of task 0, and
pyxis's seccomp failure on one node.

Line shapes: `NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 14 (...)` and
`145, RLW_RXPIPE Nonfatal` (NVIDIA Xid catalogue; leptonai/gpud's Xid tests); UCX's `Transport
retry count exceeded on mlx5_0:1/IB` (ucx ib_mlx5_log.c); ibstat's `Rate:` (infiniband-diags);
`Failed to initialize NVML: Driver/library version mismatch` (nvidia-smi); pyxis's
`pyxis: seccomp filter failed: %s` (NVIDIA/pyxis pyxis_slurmstepd.c).
"""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from tests.log_lines import bundle_verdict


def verdict(
    tmp_path: Path, job_log: str, scheduler: str, **files: str
) -> tuple[str, str, list[str], str]:
    return bundle_verdict(tmp_path, job_log, scheduler, **files)


GB200_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
5501873|hero|gb200|mc|FAILED|1:0|2026-09-10T03:12:04|2026-09-10T08:09:05|04:57:01|3|s9jvxs64,sa0axs64,sa0jxs64
"""
GB200_JOB = """\
+ srun -l --ntasks-per-node=1 python -m train --config hero.yaml
0: step 4100 loss 2.113
0: step 4200 loss 2.101
1: jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: Failed to synchronize stream: CUDA_ERROR_CONTAINED: 'cuStreamSynchronize(stream)': an error was encountered during the execution of a kernel and the GPU stopped it
srun: error: sa0axs64: task 1: Exited with exit code 1
"""
XID149 = "[Thu Sep 10 08:08:46 2026] NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 14 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n"
XID145 = "[Thu Sep 10 08:08:47 2026] NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 10 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)\n"


def test_the_node_whose_nvlink_went_down_not_the_peers_logging_nonfatal_xids(
    tmp_path: Path,
) -> None:
    got = verdict(
        tmp_path,
        GB200_JOB,
        GB200_SACCT,
        dmesg_s9jvxs64=XID149,
        dmesg_sa0axs64=XID145,
        dmesg_sa0jxs64=XID145,
    )
    assert got[1:] == ("hardware_gpu", ["s9jvxs64"], "requeue_excluding_nodes")


UCX_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
88120|lammps-ml|ib|ta|FAILED|1:0|2023-02-01T08:00:01|2023-02-01T09:31:40|01:31:39|3|hpc-[01-03]
"""
UCX_JOB = """\
+ srun -l python train.py
0: epoch 3 step 900 loss 0.231
[hpc-02:41872:0:41872] ib_mlx5_log.c:171  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)
[hpc-02:41872:0:41872] RC QP 0x1a5d wqe[3317]: RDMA_WRITE s-- [rva 0x7f2cc9a10000 rkey 0x2e41c] [va 0x7f9d51c20000 len 262144 lkey 0x11ad0] [rqpn 0x3fc lid 17]
srun: error: hpc-02: task 1: Aborted (core dumped)
"""


def _ibstat(rate: int, lid: int) -> str:
    return f"CA 'mlx5_0'\n\tCA type: MT4115\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: {rate}\n\t\tBase lid: {lid}\n\t\tLink layer: InfiniBand\n"


def test_a_retry_exceeded_error_on_no_node_names_the_hca_linked_below_its_peers(
    tmp_path: Path,
) -> None:
    got = verdict(
        tmp_path,
        UCX_JOB,
        UCX_SACCT,
        **{
            "ibstat_hpc-01": _ibstat(100, 11),
            "ibstat_hpc-02": _ibstat(100, 12),
            "ibstat_hpc-03": _ibstat(56, 17),
        },
    )
    assert got[1:] == ("hardware_network", ["hpc-03"], "requeue_excluding_nodes")


def test_every_hca_at_the_same_rate_names_no_link(tmp_path: Path) -> None:
    got = verdict(
        tmp_path,
        UCX_JOB,
        UCX_SACCT,
        **{
            "ibstat_hpc-01": _ibstat(100, 11),
            "ibstat_hpc-02": _ibstat(100, 12),
            "ibstat_hpc-03": _ibstat(100, 17),
        },
    )
    assert "hpc-03" not in got[2]


TF_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
39122|resnet-dist|gpu|ws|FAILED|1:0|2017-03-22T10:12:00|2017-03-22T10:13:02|00:01:02|3|gpu-[201-203]
"""
TF_JOB = """\
+ srun -l python tf_cnn_benchmarks.py --job_name=worker
1: E tensorflow/stream_executor/cuda/cuda_driver.cc:509] failed call to cuInit: CUDA_ERROR_NO_DEVICE
1: Traceback (most recent call last):
1:   File "tf_cnn_benchmarks.py", line 1108, in <module>
1:     tf.app.run()
1: tensorflow.python.framework.errors_impl.InvalidArgumentError: Cannot assign a device to node 'tower_0/conv0/weights': Could not satisfy explicit device specification '/job:worker/task:1/device:GPU:0' because no devices matching that specification are registered in this process
srun: error: gpu-202: task 1: Exited with exit code 1
"""
NVML = "$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\n"


def test_an_error_on_the_one_node_whose_driver_is_broken_is_the_nodes(tmp_path: Path) -> None:
    got = verdict(tmp_path, TF_JOB, TF_SACCT, **{"nvidia-smi_gpu-202": NVML})
    assert got[1:] == ("system_software", ["gpu-202"], "requeue_excluding_nodes")


def test_without_the_nodes_broken_driver_the_error_is_the_jobs(tmp_path: Path) -> None:
    got = verdict(
        tmp_path,
        TF_JOB,
        TF_SACCT,
        **{"nvidia-smi_gpu-202": "$ nvidia-smi -L\nGPU 0: Tesla P100-PCIE-16GB (UUID: GPU-5a1c)\n"},
    )
    assert got[1] == "application"


MMDET_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
4471|frcnn|p3dn|ec2|FAILED|1:0|2020-08-02T09:40:11|2020-08-02T10:32:47|00:52:36|2|compute-st-p3dn-[1-2]
"""
MMDET_JOB = """\
2020-08-02 10:30:31,268 - mmdet - INFO - Epoch [1][7300/7330]	lr: 2.000e-02, eta: 1 day, 7:31:26, time: 0.397, data_time: 0.011, memory: 3912, loss: 0.4546
Traceback (most recent call last):
  File "/home/ec2-user/mmdetection/mmdet/apis/test.py", line 137, in collect_results_cpu
    part_list.append(mmcv.load(part_file))
FileNotFoundError: [Errno 2] No such file or directory: '/scratch/local/work_dirs/faster_rcnn_r50_fpn_1x_coco/.eval_hook/part_8.pkl'
srun: error: compute-st-p3dn-1: task 0: Exited with exit code 1
srun: error: compute-st-p3dn-2: tasks 8-15: Terminated
srun: error: compute-st-p3dn-1: tasks 1-7: Terminated
"""


def test_an_unlabelled_file_not_found_of_task_zero_alone_is_the_jobs_configuration(
    tmp_path: Path,
) -> None:
    assert verdict(tmp_path, MMDET_JOB, MMDET_SACCT)[1:] == ("application", [], "stop")


def test_the_same_error_from_another_task_may_be_a_mount(tmp_path: Path) -> None:
    job = MMDET_JOB.replace(
        "compute-st-p3dn-1: task 0: Exited with exit code 1",
        "compute-st-p3dn-2: task 8: Exited with exit code 1",
    )
    assert verdict(tmp_path, job, MMDET_SACCT)[3] != "stop"


PYXIS_JOB = """\
+ srun -l --container-image=nvcr.io#nvidia/pytorch:21.03-py3 python train.py
slurmstepd: error: pyxis: seccomp filter failed: Function not implemented
slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1
slurmstepd: error: Failed to invoke spank plugin stack
srun: error: cn03: task 2: Exited with exit code 1
srun: error: cn01: task 0: Terminated
srun: error: cn02: task 1: Terminated
"""
PYXIS_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
224861|bert|gpu|jd|FAILED|1:0|2021-04-19T14:22:20|2021-04-19T14:22:31|00:00:11|3|cn[01-03]
"""


def test_pyxis_unable_to_set_its_seccomp_filter_on_one_node_is_that_nodes(tmp_path: Path) -> None:
    assert verdict(tmp_path, PYXIS_JOB, PYXIS_SACCT)[1:] == (
        "system_software",
        ["cn03"],
        "requeue_excluding_nodes",
    )


AUTOMODEL_JOB = """\
0: INFO:root:step 69990 | epoch 0 | loss 2.1357 | grad_norm 0.2521 | lr 2.85e-05 | mem 61.37 GiB | time 1.94s
0: INFO:root:Saving checkpoint to /lustre/runs/qwen3-8b/checkpoints/epoch_0_step_69999
0: [rank0]: Traceback (most recent call last):
0: [rank0]:   File "/opt/Automodel/nemo_automodel/recipes/base_recipe.py", line 241, in save_checkpoint
0: [rank0]:     os.makedirs(path)
0: [rank0]:   File "<frozen os>", line 225, in makedirs
0: [rank0]: FileExistsError: [Errno 17] File exists: '/lustre/runs/qwen3-8b/checkpoints/epoch_0_step_69999'
srun: error: h100-017: task 0: Exited with exit code 1
"""
AUTOMODEL_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
7712|qwen3|batch|ak|FAILED|1:0|2025-08-03T04:00:01|2025-08-03T08:02:10|04:02:09|2|h100-[017-018]
"""


def test_a_directory_the_job_creates_existing_already_is_the_jobs_code(tmp_path: Path) -> None:
    assert verdict(tmp_path, AUTOMODEL_JOB, AUTOMODEL_SACCT)[1:] == ("application", [], "stop")


LIGHTNING_JOB = (
    "".join(
        f"0: Epoch {e}: 100%|██████████| 412/412 [01:03<00:00,  6.44it/s, v_num=3, train_loss=0.0107]\n"
        for e in range(57, 60)
    )
    + """\
0: `Trainer.fit` stopped: `max_epochs=60` reached.
0: [rank0]:[E0525 15:35:12.482901172 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=124811, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800091 milliseconds before timing out.
0: [rank0]:[E0525 15:35:12.482901172 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=124811, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800091 milliseconds before timing out.
srun: error: gpu041: task 0: Aborted (core dumped)
"""
)
LIGHTNING_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
6120044|era5|gpu|ff|FAILED|6:0|2026-05-25T14:02:31|2026-05-25T15:35:19|01:32:48|2|gpu[041-042]
"""


def test_a_collective_timing_out_after_the_training_loop_finished_is_the_jobs(
    tmp_path: Path,
) -> None:
    assert verdict(tmp_path, LIGHTNING_JOB, LIGHTNING_SACCT) == ("hang", "application", [], "stop")


def test_a_collective_timing_out_mid_training_is_not_after_the_loop(tmp_path: Path) -> None:
    job = LIGHTNING_JOB.replace("0: `Trainer.fit` stopped: `max_epochs=60` reached.\n", "")
    assert verdict(tmp_path, job, LIGHTNING_SACCT)[1] != "application"


ILAB_JOB = """\
0: Epoch 3: 100%|██████████| 780/780 [41:02<00:00, 3.16s/it]
0: \x1b[93mSaving model in huggingface format at: /nfs/ilab/ckpts/hf_format/samples_249600[0m
1: [rank8]:[E0520 09:39:58.101010101 ProcessGroupNCCL.cpp:607] [Rank 8] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1311, OpType=_ALLGATHER_BASE, NumelIn=1050624, NumelOut=1050624, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.
1: [rank11]:[E0520 09:39:58.101010101 ProcessGroupNCCL.cpp:607] [Rank 11] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1311, OpType=_ALLGATHER_BASE, NumelIn=1050624, NumelOut=1050624, Timeout(ms)=600000) ran for 600024 milliseconds before timing out.
srun: error: gpu-h-08: task 1: Exited with exit code 1
0: \x1b[93mModel saved in /nfs/ilab/ckpts/hf_format/samples_249600[0m
0: [rank0]:[E0520 09:43:30.893015710 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1311, OpType=_ALLGATHER_BASE, NumelIn=1050624, NumelOut=1050624, Timeout(ms)=600000) ran for 600009 milliseconds before timing out.
srun: error: gpu-h-07: task 0: Exited with exit code 1
"""
ILAB_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
9981|granite|gpu|il|FAILED|1:0|2025-05-20T06:00:02|2025-05-20T09:43:31|03:43:29|2|gpu-h-[07-08]
"""


def test_a_save_that_ends_after_the_others_timed_out_outlasted_the_timeout(tmp_path: Path) -> None:
    assert verdict(tmp_path, ILAB_JOB, ILAB_SACCT) == ("hang", "application", [], "stop")


def test_a_save_that_ended_before_the_timeouts_explains_nothing(tmp_path: Path) -> None:
    lines = ILAB_JOB.splitlines(keepends=True)
    saved = next(x for x in lines if "Model saved" in x)
    lines.remove(saved)
    lines.insert(2, saved)
    assert verdict(tmp_path, "".join(lines), ILAB_SACCT)[1] != "application"


ACS_JOB = """\
0: gpu-b04:63112:63112 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:fe80::966d:ae03:8b:df54%ib0<0>
1: gpu-b05:63212:63884 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::966d:ae03:8b:df54%ib0<33397> with error 4, opcode 32611, len 32611, vendor err 81 (Recv)
0: gpu-b04:63119:63801 [7] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::966d:ae03:8b:df55%ib0<52110> with error 5, opcode 32767, len 0, vendor err 249 (Send)
srun: error: gpu-b04: task 0: Exited with exit code 1
srun: error: gpu-b05: task 1: Exited with exit code 1
"""
ACS_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
5120|llm|gpu|ab|FAILED|1:0|2024-03-02T10:00:01|2024-03-02T10:09:40|00:09:39|2|gpu-b[04-05]
"""
ACS_ON = "$ sudo lspci -vvv | grep -i acsctl | sort | uniq -c\n     12 \t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
ACS_OFF = "$ sudo lspci -vvv | grep -i acsctl | sort | uniq -c\n     16 \t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"


def test_an_ib_completion_error_from_a_link_local_ipv6_peer_joins_the_nodes_acs(
    tmp_path: Path,
) -> None:
    got = verdict(tmp_path, ACS_JOB, ACS_SACCT, **{"node_gpu-b04": ACS_OFF, "node_gpu-b05": ACS_ON})
    assert got[1:] == ("system_software", ["gpu-b05"], "requeue_excluding_nodes")


HVD_JOB = """\
+ mpirun -np 3 -H c4140-11:1,c4140-12:1,c4140-13:1 python train_hvd.py
[1,0]<stderr>:INFO:tensorflow:Done running local_init_op.
[1,1]<stderr>:INFO:tensorflow:Done running local_init_op.
[1,2]<stderr>:INFO:tensorflow:Done running local_init_op.
[1,0]<stdout>:NCCL version 2.3.5+cuda10.0
slurmstepd: error: *** JOB 71133 ON c4140-11 CANCELLED AT 2018-11-23T11:31:20 DUE TO TIME LIMIT ***
"""
HVD_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
71133|hvd|gpu|hp|TIMEOUT|0:0|2018-11-23T09:31:12|2018-11-23T11:31:20|02:00:08|3|c4140-[11-13]
"""


def _rpm(version: str) -> str:
    return f"$ rpm -qa | grep -i nccl\nlibnccl-{version}-1+cuda10.0.x86_64\nlibnccl-devel-{version}-1+cuda10.0.x86_64\n"


def test_the_one_node_with_another_nccl_package_is_that_nodes_software(tmp_path: Path) -> None:
    files = {
        "node_c4140-11": _rpm("2.3.5"),
        "node_c4140-12": _rpm("2.2.13"),
        "node_c4140-13": _rpm("2.3.5"),
    }
    got = verdict(tmp_path, HVD_JOB, HVD_SACCT, **files)
    assert got[1:] == ("system_software", ["c4140-12"], "requeue_excluding_nodes")


def test_a_note_in_a_nodes_file_speaks_for_the_hosts_it_names(tmp_path: Path) -> None:
    note = _rpm("2.2.13") + "# c4140-11 and c4140-13: libnccl-2.3.5-2+cuda10.0.x86_64\n"
    got = verdict(tmp_path, HVD_JOB, HVD_SACCT, **{"node_c4140-12": note})
    assert got[2] == ["c4140-12"]


def test_the_same_nccl_package_everywhere_names_no_node(tmp_path: Path) -> None:
    files = {f"node_c4140-1{i}": _rpm("2.3.5") for i in (1, 2, 3)}
    assert verdict(tmp_path, HVD_JOB, HVD_SACCT, **files)[2] == []


DEEPH_JOB = (
    "+ deeph-train --config train.ini\n"
    + "".join(
        f"Epoch #{2057 + i}  | Time: 23h 5{6 + i // 2}m {(41 + 42 * i) % 60:02d}s | LR: 4.00e-04 | Epoch time:  41.26 | Train loss: 0.00034544 | Val loss: 0.00037308\n"
        for i in range(5)
    )
    + "slurmstepd: error: *** JOB 8801723 ON gpu-k08 CANCELLED AT 2024-01-09T20:02:25 DUE TO TIME LIMIT ***\n"
)
DEEPH_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
8801723|deeph|gpu|fr|TIMEOUT|0:0|2024-01-08T20:02:19|2024-01-09T20:02:25|1-00:00:06|1|gpu-k08
"""


def test_a_run_reporting_once_per_epoch_until_its_time_limit_was_progressing(
    tmp_path: Path,
) -> None:
    assert verdict(tmp_path, DEEPH_JOB, DEEPH_SACCT) == ("crash", "scheduler", [], "requeue")


WATCHDOG_ABORT_JOB = """\
Epoch 8: 100%|██████████| 113/113 [02:26<00:00,  0.82it/s, v_num=0, fitting_loss=0.1660, val_loss=0.1820]
Epoch 9:  39%|███▉      | 44/113 [00:53<01:24,  0.82it/s, v_num=0, fitting_loss=0.1609, val_loss=0.1752]
[rank1]:[E ProcessGroupNCCL.cpp:523] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=44, OpType=ALLREDUCE, NumelIn=6832129, NumelOut=6832129, Timeout(ms)=1800000) ran for 1800772 milliseconds before timing out.
[rank1]:[E ProcessGroupNCCL.cpp:537] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank1]:[E ProcessGroupNCCL.cpp:543] To avoid data inconsistency, we are taking the entire process down.
terminate called after throwing an instance of 'c10::DistBackendError'
/var/spool/slurmd/job1382204/slurm_script: line 14: 3318841 Aborted                 (core dumped) ddw fit-model --config /scratch/config.yaml --gpu 0,1,2,3
"""
WATCHDOG_ABORT_SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
1382204|ddw_fit|gpu|ph|FAILED|134:0|2024-12-05T06:10:44|2024-12-05T07:04:57|00:54:13|1|gpu-r41
"""


def test_the_shells_abort_after_a_watchdog_timeout_is_the_watchdogs_not_a_crash(
    tmp_path: Path,
) -> None:
    got = verdict(
        tmp_path,
        WATCHDOG_ABORT_JOB,
        WATCHDOG_ABORT_SACCT,
        dmesg_gpu_r41="(no kernel messages in the job window)\n",
    )
    assert got == ("hang", "unknown", [], "requeue")


def test_an_abort_before_any_timeout_is_the_processs_own(tmp_path: Path) -> None:
    lines = WATCHDOG_ABORT_JOB.splitlines(keepends=True)
    job = "".join(lines[:2] + lines[-1:] + lines[2:-1])
    assert verdict(tmp_path, job, WATCHDOG_ABORT_SACCT)[0] == "crash"
