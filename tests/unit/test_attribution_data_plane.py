"""Checkpoints, data and the node's view of them: a DCP error one rank relays for another, a
node-local disk full on one node, a file system a reimaged node failed to mount, a dataset file
that is not in its format, a container started with Docker's 64 MB /dev/shm, a NaN loss on a
node whose GPU fails its memory test, a GPU lost behind its PCIe port, and sacct rows of the
job beside another job's.

Real formats: torch.distributed.checkpoint's CheckpointException (`Traceback (most recent call
last): (RANK 10)`), df(1), systemd's mount unit and mount.lustre, Apache Arrow's Parquet reader,
NGC images' SHMEM banner and PyTorch's DataLoader bus error, dcgmi diag, the kernel's AER and
NVRM Xid 79 lines, srun's `Terminating StepId=`."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

# --- DCP: rank 0 relays rank 10's error; df says whose disk is full ---------------------
B_NODES = ["node-b05", "node-b06", "node-b07", "node-b08"]
RELAYED = """\
0: [rank0]: step  2000 | loss 3.0800 | lr 1.50e-04 | 900 ms/step
2: [rank16]: Traceback (most recent call last):
2: [rank16]:   File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1216, in _save
2: [rank16]:     zip_file.write_record(name, storage, num_bytes)
2: [rank16]: OSError: [Errno 28] No space left on device
0: [rank0]: Traceback (most recent call last): (RANK 16)
0: [rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1216, in _save
0: [rank0]:     zip_file.write_record(name, storage, num_bytes)
0: [rank0]: OSError: [Errno 28] No space left on device
0: [rank0]: torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([16])
srun: error: node-b07: task 2: Exited with exit code 1
srun: error: node-b05: task 0: Exited with exit code 1
"""


def _df(full: bool) -> str:
    use = (
        "/dev/md0        1.8T  1.8T     0 100% /tmp"
        if full
        else "/dev/md0        1.8T  196G  1.6T  11% /tmp"
    )
    return f"$ df -h /tmp\nFilesystem      Size  Used Avail Use% Mounted on\n{use}\n"


def test_an_error_rank_0_relays_for_rank_16_is_rank_16s_and_its_full_disk_names_the_node() -> None:
    files = {f"node_{n}": _df(full=n == "node-b07") for n in B_NODES}
    a = attribute_text(RELAYED, B_NODES, files)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["node-b07"])
    assert first_action(a) == "requeue_excluding_nodes"


def test_two_nodes_failing_need_every_nodes_df_to_name_the_full_one() -> None:
    own = RELAYED.replace(": (RANK 16)", "")  # rank 0's own error: two nodes failed
    assert attribute_text(own, B_NODES, {"node_node-b07": _df(full=True)}).culprit_nodes == []
    files = {f"node_{n}": _df(full=n == "node-b07") for n in B_NODES}
    assert attribute_text(own, B_NODES, files).culprit_nodes == ["node-b07"]


# --- a reimaged node that could not mount the file system --------------------------------
A_NODES = ["gpu-a-21", "gpu-a-22", "gpu-a-23", "gpu-a-24"]
MISSING = """\
2: [rank21]:     with self.fs.create_stream(path, "rb") as metadata_file:
2: [rank21]: FileNotFoundError: [Errno 2] No such file or directory: '/lustre/work/proj/ckpt/step_18000/.metadata'
srun: error: gpu-a-23: task 2: Exited with exit code 1
"""
UNMOUNTED = """\
Mar  3 06:13:22 gpu-a-23 kernel: LNetError: 3318:0:(api-ni.c:3012:lnet_startup_lndnet()) Can't load LND o2ib, module ko2iblnd, rc=256
Mar  3 06:13:22 gpu-a-23 mount.lustre[3301]: mount.lustre: mount 10.12.0.10@o2ib:10.12.0.11@o2ib:/work at /lustre/work failed: No such device
Mar  3 06:13:22 gpu-a-23 systemd[1]: Failed to mount /lustre/work.
"""
SACCT_A = """\
JobID|JobName|State|ExitCode|Elapsed|NodeList|Start|End
5519001|lm-7b-resume|FAILED|1:0|00:00:49|gpu-a-[21-24]|2025-03-03T09:30:00|2025-03-03T09:30:49
"""


def test_a_path_missing_on_the_node_that_failed_to_mount_its_file_system_is_that_node() -> None:
    a = attribute_text(MISSING, A_NODES, {"journal_gpu-a-23": UNMOUNTED}, SACCT_A)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-a-23"])


def test_systemds_newer_mount_failure_line_names_the_node_too() -> None:
    """systemd 249 and later: `Failed to mount <unit>.mount - <mount point>.` after the NFS
    client's own timeout; the job's ranks there are refused the path (a bare local directory)."""
    denied = (
        "2: [rank20]: PermissionError: [Errno 13] Permission denied: '/checkpoint/genai'\n"
        "srun: error: gpu-a-23: task 2: Exited with exit code 1\n"
    )
    journal = (
        "Aug 27 11:34:02 gpu-a-23 mount[2417]: mount.nfs4: Connection timed out\n"
        "Aug 27 11:34:02 gpu-a-23 systemd[1]: Failed to mount checkpoint.mount - /checkpoint.\n"
    )
    a = attribute_text(denied, A_NODES, {"journal_gpu-a-23": journal}, SACCT_A)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-a-23"])


def test_the_same_missing_path_with_every_mount_fine_is_the_jobs_path() -> None:
    a = attribute_text(
        MISSING,
        A_NODES,
        {"journal_gpu-a-23": "Mar  3 06:13:22 gpu-a-23 systemd[1]: Mounted /lustre/work.\n"},
        SACCT_A,
    )
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])


# --- a dataset file not in its format -----------------------------------------------------
def test_a_parquet_file_without_its_footer_is_the_jobs_data() -> None:
    job = """\
1: [rank11]: [data] worker 1 opening /lustre/datasets/web-v3/train-00417-of-01024.parquet
1: [rank11]: pyarrow.lib.ArrowInvalid: Caught ArrowInvalid in DataLoader worker process 1.
1: [rank11]: Original Traceback (most recent call last):
1: [rank11]:   File "pyarrow/_parquet.pyx", line 1497, in pyarrow._parquet.ParquetReader.open
1: [rank11]: pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet file.
0: [rank0]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
srun: error: a100-02: task 1: Exited with exit code 1
srun: error: a100-01: task 0: Exited with exit code 1
"""
    a = attribute_text(job, ["a100-01", "a100-02"])
    assert (a.category, a.culprit_nodes, first_action(a)) == (Category.APPLICATION, [], "stop")


# --- Docker's 64 MB /dev/shm in the container the job starts -------------------------------
def _docker(options: str) -> str:
    return f"""\
+ docker run --gpus all {options}--rm -v /home/kli/vit-l:/workspace nvcr.io/nvidia/pytorch:24.05-py3 bash -c 'torchrun --nproc-per-node 8 train.py'
NOTE: The SHMEM allocation limit is set to the default of 64MB.  This may be
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
[rank3]: RuntimeError: DataLoader worker (pid 412) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.
"""


def test_a_dataloader_bus_error_in_the_jobs_own_container_with_the_default_shm_is_the_job() -> None:
    a = attribute_text(_docker(""), ["dgx-17"])
    assert (a.category, a.culprit_nodes, first_action(a)) == (Category.APPLICATION, [], "stop")


def test_the_same_error_in_a_container_given_the_hosts_ipc_is_not_the_launch_line() -> None:
    assert attribute_text(_docker("--ipc=host "), ["dgx-17"]).category != Category.APPLICATION


# --- a NaN loss on a node whose GPU fails its memory test -------------------------------
NAN = """\
0: [NeMo E 2025-03-27 21:40:00 nan_guard:57] non-finite loss at global_step 20417: reduced_train_loss=nan (local losses: ranks 24-31 inf/nan, ranks 0-23 finite)
0: [rank0]: RuntimeError: non-finite loss at global_step 20417; aborting (set NAN_GUARD=0 to skip)
srun: error: dgx-a-09: task 0: Exited with exit code 1
"""
DIAG = """\
$ dcgmi diag -r 3 -i 0
| GPU Memory                | Fail - GPU: 0                                  |
| Warning                   | GPU 0 Memory test found 7 miscompare(s) with   |
"""
DGX_A = ["dgx-a-09", "dgx-a-10", "dgx-a-11", "dgx-a-12"]


def test_a_nan_loss_beside_a_gpu_failing_dcgms_memory_test_is_that_gpus_node() -> None:
    a = attribute_text(NAN, DGX_A, {"node_dgx-a-12": DIAG})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["dgx-a-12"])


def test_the_same_nan_with_the_memory_test_passing_stays_the_applications() -> None:
    a = attribute_text(
        NAN, DGX_A, {"node_dgx-a-12": DIAG.replace("Fail - GPU: 0", "Pass - All   ")}
    )
    assert a.category == Category.APPLICATION


# --- a GPU lost behind its PCIe switch port ---------------------------------------------
def test_a_fatal_aer_on_the_port_above_a_gpu_that_fell_off_the_bus_is_the_gpu() -> None:
    job = """\
0: [rank2]:[E614 03:24:53.000 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=881, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.
srun: error: dgx-h101: task 0: Exited with exit code 1
"""
    dmesg = """\
[Fri Jun 14 03:14:52 2024] pcieport 0000:97:01.0: AER: Uncorrected (Fatal) error received: 0000:97:01.0
[Fri Jun 14 03:14:52 2024] pcieport 0000:97:01.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)
[Fri Jun 14 03:14:52 2024] NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
"""
    a = attribute_text(job, ["dgx-h101", "dgx-h103"], {"dmesg_dgx-h103": dmesg})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["dgx-h103"])
    alone = attribute_text(
        job, ["dgx-h101", "dgx-h103"], {"dmesg_dgx-h103": "\n".join(dmesg.splitlines()[:2])}
    )
    assert alone.category == Category.HARDWARE_HOST


# --- the job's sacct row among another job's ------------------------------------------------
def test_srun_naming_the_step_picks_the_jobs_own_row_over_another_jobs_cancelled_one() -> None:
    job = """\
2: [rank18]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.11 GiB of which 1.56 GiB is free. Process 2281190 has 61.40 GiB memory in use. Including non-PyTorch memory, this process has 16.12 GiB memory in use.
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
srun: Terminating StepId=5521144.0
srun: error: c3-gpu09: task 2: Exited with exit code 1
"""
    sacct = """\
       JobID      User      State ExitCode         NodeList
------------ --------- ---------- -------- ---------------
5521088          mchen  CANCELLED      0:9        c3-gpu09
5521144        arivera     FAILED      1:0    c3-gpu[07-10]
"""
    a = attribute_text(job, ["c3-gpu07", "c3-gpu08", "c3-gpu09", "c3-gpu10"], scheduler=sacct)
    assert a.category != Category.SCHEDULER
    assert first_action(a) != "none"


# --- a synchronous rank-0 checkpoint save that stalls every rank, time after time -------------
def _fsdp(saves: bool) -> str:
    out = ["0: [rank0]: config: fsdp.sharding=FULL_SHARD ckpt.every=200 ckpt.type=full"]
    for step in range(50, 1650, 50):
        slow = step % 200 == 0
        out.append(
            f"0: [rank0]: step {step:4d} | loss 2.1000 | step_time {'97.20' if slow else '1.11'}s | tok/s {'1180' if slow else '103210'}"
        )
        if slow and saves:
            out.append(
                f"0: [rank0]: [ckpt] gathered full state dict in 31.2s, torch.save -> /home/o/runs/step_{step}.pt (26.1 GB) in 65.0s; ranks 1-15 waited at barrier"
            )
    out.append("# operator note: job still running at 2025-07-21T15:11:03 (squeue R 02:11:40)")
    return "\n".join(out) + "\n"


def test_a_save_rank_0_reports_after_each_slow_step_is_the_jobs_own_checkpointing() -> None:
    a = attribute_text(_fsdp(saves=True), ["hgx-101", "hgx-102"])
    assert (a.kind, a.category, a.culprit_nodes) == ("straggler", Category.APPLICATION, [])
    assert first_action(a) == "none"


def test_the_same_slow_steps_with_nothing_said_about_them_name_no_cause() -> None:
    assert (
        attribute_text(_fsdp(saves=False), ["hgx-101", "hgx-102"]).category != Category.APPLICATION
    )
