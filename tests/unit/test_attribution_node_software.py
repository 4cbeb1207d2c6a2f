"""Node-local system software: a fault one node's own software state caused names that node.

Message formats are NCCL's (misc/shmutils.cc, misc/ibvwrap.cc, as quoted in NVIDIA/nccl issues
290 and 563 and NVIDIA/nccl-tests 166 and 206) and the NVIDIA kernel module's API-mismatch
message (as quoted in tinygrad/open-gpu-kernel-modules issue 47).
"""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu-r08", "gpu-r09", "gpu-r10"]
WATCHDOG = (
    "0: [rank0]:[E ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 0] Process group watchdog "
    "thread terminated with exception: NCCL error: remote process exited or there was a network "
    "error, NCCL version 2.21.5\n"
)


def _run(job: str, node_logs: dict[str, list[LogLine]] | None = None) -> Attribution:
    return attribute(Registry.default(), None, _lines(job), None, [], NODES, node_logs=node_logs)


def _nccl_failure(warn: str, last_error: str) -> str:
    """Task 1 (gpu-r09) fails NCCL setup with `warn`; the peers then see it go away."""
    return (
        f"1: gpu-r09:81102:81290 [0] {warn}\n"
        "1: [rank8]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
        "distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled system error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "1: [rank8]: ncclSystemError: System call (e.g. socket, malloc) or external library "
        "call failed or device error.\n"
        "1: [rank8]: Last error:\n"
        f"1: [rank8]: {last_error}\n"
        "srun: error: gpu-r09: task 1: Exited with exit code 1\n" + WATCHDOG
    )


def test_memory_registration_refused_on_one_node_excludes_that_node() -> None:
    # A memlock limit too low in the node's slurmd: ibv_reg_mr fails there only.
    a = _run(
        _nccl_failure(
            "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot "
            "allocate memory",
            "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
        )
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_full_dev_shm_on_one_node_is_that_nodes_state() -> None:
    # Leftover NCCL segments of earlier jobs fill the node's /dev/shm (a node-local path in an
    # unquoted NCCL message).
    a = _run(
        _nccl_failure(
            "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-Qv1ZkE to "
            "9637892 bytes, error: No space left on device (28)",
            "Error while creating shared memory segment /dev/shm/nccl-Qv1ZkE (size 9637888), "
            "error: No space left on device (28)",
        )
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_node_that_timed_out_reaching_a_peer_is_not_blamed_for_it() -> None:
    # The queue pair could not reach its peer: the reporter is not shown to be the one at fault.
    a = _run(
        _nccl_failure(
            "misc/ibvwrap.cc:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection "
            "timed out, on dev mlx5_bond_0:1, curr state INIT, next state RT",
            "Call to ibv_modify_qp failed with 110 Connection timed out",
        )
    )
    assert "gpu-r09" not in a.culprit_nodes
    assert default_advice(a).kind != AdviceKind.REQUEUE_EXCLUDING


CUDA_INIT = (
    "1: [rank8]: Traceback (most recent call last):\n"
    '1: [rank8]:   File "/home/ana/train.py", line 58, in <module>\n'
    "1: [rank8]:     torch.cuda.set_device(local_rank)\n"
    '1: [rank8]:   File "/opt/venv/lib/python3.10/site-packages/torch/cuda/__init__.py", line '
    "420, in set_device\n"
    "1: [rank8]:     torch._C._cuda_setDevice(device)\n"
    "1: [rank8]: RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some "
    "cuda functions before calling NumCudaDevices() that might have already set an error?\n"
    "srun: error: gpu-r09: task 1: Exited with exit code 1\n"
    "0: [W429 07:31:05.301442119 TCPStore.cpp:131] [c10d] recvValue failed on SocketImpl(fd=12, "
    "addr=[gpu-r08]:29500, remote=[gpu-r09]:51122): failed to recv, got 0 bytes\n"
    "srun: error: gpu-r08: task 0: Exited with exit code 1\n"
)
API_MISMATCH = (
    "[Tue Apr 29 07:30:58 2025] NVRM: API mismatch: the client has the version 550.127.05, but\n"
    "[Tue Apr 29 07:30:58 2025] NVRM: this kernel module has the version 550.90.07.  Please\n"
    "[Tue Apr 29 07:30:58 2025] NVRM: make sure that this kernel module and all NVIDIA driver\n"
    "[Tue Apr 29 07:30:58 2025] NVRM: components have the same version.\n"
)


def test_an_unclassified_error_on_a_node_whose_driver_is_mismatched_names_the_node() -> None:
    # The job's error is of no known class; the node's own kernel log explains it.
    dmesg = {"gpu-r09": _lines(API_MISMATCH, "dmesg_gpu-r09.txt")}
    a = _run(CUDA_INIT, dmesg)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_the_same_error_with_another_nodes_driver_mismatched_does_not_move_the_blame() -> None:
    # The mismatch is on a node whose rank did not fail first: nothing joins the two.
    dmesg = {"gpu-r10": _lines(API_MISMATCH, "dmesg_gpu-r10.txt")}
    a = _run(CUDA_INIT, dmesg)
    assert a.category != Category.SYSTEM_SOFTWARE and a.culprit_nodes != ["gpu-r10"]


# CUDA's cudaErrorInsufficientDriver as PyTorch raises it (pytorch/pytorch issues quoting
# "CUDA driver version is insufficient for CUDA runtime version").
DRIVER_TOO_OLD = (
    "{t}: [rank{r}]: RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA "
    "runtime version\n"
)


def test_site_software_broken_on_every_node_names_them_all_and_stops() -> None:
    job = "".join(DRIVER_TOO_OLD.format(t=t, r=t * 8) for t in range(3))
    job += "".join(f"srun: error: {n}: task {t}: Exited with exit code 1\n" for t, n in
                   enumerate(NODES))  # fmt: skip
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, NODES)
    assert default_advice(a).kind == AdviceKind.STOP


def test_the_same_fault_on_one_node_only_excludes_it_and_does_not_stop() -> None:
    a = _run(DRIVER_TOO_OLD.format(t=1, r=8) + "srun: error: gpu-r09: task 1: Exited with exit "
             "code 1\n" + WATCHDOG)  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


# torch.save through DeepSpeed writing a checkpoint into an exhausted Lustre project quota
# (CPython's OSError for EDQUOT; PytorchStreamWriter's message from caffe2/serialize).
QUOTA = (
    "0: [rank0]: RuntimeError: [enforce fail at inline_container.cc:783] . PytorchStreamWriter "
    "failed writing file data/14: file write failed\n"
    "1: [rank8]: OSError: [Errno 122] Disk quota exceeded: '/lustre/proj/p4102/runs/ckpt/"
    "global_step6000/bf16_zero_pp_rank_8_mp_rank_00_optim_states.pt'\n"
    "srun: error: gpu-r08: task 0: Exited with exit code 1\n"
)


def test_an_exhausted_quota_stops_with_no_node_named() -> None:
    a = _run(QUOTA)
    assert a.culprit_nodes == []
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_full_shared_file_system_is_still_retried() -> None:
    a = _run(QUOTA.replace("[Errno 122] Disk quota exceeded", "[Errno 28] No space left on device"))
    assert default_advice(a).kind == AdviceKind.REQUEUE


def _segfault(rank: int, frames: list[str]) -> str:
    # CPython faulthandler's dump (Python docs, faulthandler module), rank-prefixed by torchrun.
    body = "".join(f'[rank{rank}]:  File "{f}", line 41 in forward\n' for f in frames)
    return (
        f"[rank{rank}]:Fatal Python error: Segmentation fault\n[rank{rank}]:\n"
        f"[rank{rank}]:Current thread 0x00007f3c2a7fe740 (most recent call first):\n{body}"
    )


JOB_EXT = ["/home/dlin/llm/ops/fused_rope.py", "/home/dlin/llm/train.py"]
INSTALLED = [
    "/opt/conda/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
    "/home/dlin/llm/train.py",
]


def _every_rank(frames: list[str]) -> str:
    return "".join(_segfault(r, frames) for r in (0, 8, 16)) + "".join(
        f"srun: error: {n}: task {t}: Exited with exit code 1\n" for t, n in enumerate(NODES)
    )


def test_every_rank_crashing_natively_in_the_jobs_own_extension_is_the_jobs() -> None:
    a = _run(_every_rank(JOB_EXT))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_every_rank_crashing_in_installed_code_is_not_blamed_on_the_job() -> None:
    a = _run(_every_rank(INSTALLED))
    assert a.category != Category.APPLICATION
    assert default_advice(a).kind != AdviceKind.STOP


# slurmstepd's preemption kill line, then the NVIDIA driver's Xid 43 (NVIDIA Xid catalogue:
# "GPU stopped processing", the context of a killed process) half a minute later.
PREEMPTED = (
    "0: [2025-08-08 12:55:00] iteration 400 | elapsed time per iteration (ms): 6000.0\n"
    "0: [2025-08-08 12:55:06] iteration 401 | elapsed time per iteration (ms): 6000.0\n"
    "slurmstepd: error: *** JOB 3310421 ON gpu-r08 CANCELLED AT 2025-08-08T12:56:21 DUE TO "
    "PREEMPTION ***\n"
)


def _xid43(clock: str) -> list[LogLine]:
    return _lines(
        f"[Fri Aug  8 {clock} 2025] NVRM: Xid (PCI:0000:1b:00): 43, pid=41112, name=python, "
        "Ch 00000008\n",
        "dmesg_gpu-r08.txt",
    )


def test_an_xid_43_logged_after_the_preemption_kill_is_the_kills_doing() -> None:
    a = _run(PREEMPTED, {"gpu-r08": _xid43("12:56:54")})
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


# The Linux NFS client's and hung-task detector's kernel lines (fs/nfs, kernel/hung_task.c),
# as syslog writes them; srun's kill of the task stuck behind the mount.
NFS_HUNG = (
    "Jun 14 04:16:44 {node} kernel: nfs: server nfs-home01 not responding, still trying\n"
    "Jun 14 04:20:50 {node} kernel: INFO: task python3:88410 blocked for more than 245 seconds.\n"
)
KILLED = (
    "0: [2026-06-14 04:10:00] iteration 100 | elapsed time per iteration (ms): 6000.0\n"
    "srun: error: gpu-r08: task 0: Exited with exit code 1\n"
    "srun: error: gpu-r09: task 1: Killed\n"
)


def test_a_task_killed_on_the_one_node_whose_nfs_mount_hung_names_that_node() -> None:
    a = _run(KILLED, {"gpu-r09": _lines(NFS_HUNG.format(node="gpu-r09"), "syslog_gpu-r09.txt")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_every_node_losing_the_same_nfs_server_is_the_server_with_no_node_named() -> None:
    logs = {n: _lines(NFS_HUNG.format(node=n), f"syslog_{n}.txt") for n in NODES}
    a = _run(KILLED, logs)
    assert a.culprit_nodes == []
    assert default_advice(a).kind == AdviceKind.REQUEUE


# PyTorch's error when CUDA sees no device; `nvidia-smi mig -lgi` on a node left in MIG mode
# without GPU instances (NVIDIA MIG user guide).
NO_GPUS = (
    "1: [rank8]: Traceback (most recent call last):\n"
    '1: [rank8]:   File "/home/kim/vit/train.py", line 30, in <module>\n'
    "1: [rank8]:     torch.cuda.set_device(local_rank)\n"
    '1: [rank8]:   File "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py", '
    "line 319, in _lazy_init\n"
    "1: [rank8]:     torch._C._cuda_init()\n"
    "1: [rank8]: RuntimeError: No CUDA GPUs are available\n"
    "srun: error: gpu-r09: task 1: Exited with exit code 1\n" + WATCHDOG
)
MIG_LEFT = (
    "$ nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv\n"
    "index, mig.mode.current, mig.mode.pending\n0, Enabled, Enabled\n"
    "$ nvidia-smi mig -lgi\nNo GPU instances found: Not Found\n"
)


def test_no_gpus_on_the_node_left_in_mig_mode_names_that_node() -> None:
    a = _run(NO_GPUS, {"gpu-r09": _lines(MIG_LEFT, "node_gpu-r09.txt")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_no_gpus_on_one_node_alone_names_that_node() -> None:
    """Only gpu-r09's rank finds no GPU while its peers initialised theirs: PyTorch's own message
    is the node's evidence (its driver, module or device cgroup), even with no node file."""
    got = _run(NO_GPUS)
    assert got.category == Category.SYSTEM_SOFTWARE and got.culprit_nodes == ["gpu-r09"]


def _no_gpus(ranks_nodes: list[tuple[int, int, str]], word: str = "CUDA") -> str:
    """Tasks on some nodes fail PyTorch's lazy GPU init (torch/cuda/__init__.py _lazy_init)."""
    out = []
    for task, rank, _node in ranks_nodes:
        out += [
            f"{task}: [rank{rank}]: Traceback (most recent call last):",
            f'{task}: [rank{rank}]:   File "/home/u/train.py", line 12, in <module>',
            f"{task}: [rank{rank}]:     torch.cuda.set_device(local_rank)",
            f"{task}: [rank{rank}]: RuntimeError: No {word} GPUs are available",
        ]
    for task, _rank, node in ranks_nodes:
        out.append(f"srun: error: {node}: task {task}: Exited with exit code 1")
    return "\n".join(out) + "\n"


def test_no_gpu_visible_on_one_node_is_that_nodes_software() -> None:
    """ROCm/rccl-tests#120: the GPU kernel module is not loaded on one node (a new kernel
    without its DKMS build); only that node's ranks find no GPU."""
    got = _run(_no_gpus([(1, 1, "gpu-r09")], word="HIP"))
    assert got.category == Category.SYSTEM_SOFTWARE
    assert got.culprit_nodes == ["gpu-r09"]
    assert default_advice(got).kind == AdviceKind.REQUEUE_EXCLUDING


def test_no_gpu_visible_on_every_node_excludes_no_node() -> None:
    """Every node at once is no node's fault (the job asked for no GPU, or the site image):
    excluding them all would leave the job nowhere to run."""
    got = _run(_no_gpus([(0, 0, "gpu-r08"), (1, 1, "gpu-r09"), (2, 2, "gpu-r10")]))
    assert got.culprit_nodes == []
    assert default_advice(got).kind != AdviceKind.REQUEUE_EXCLUDING


def _ordinal(tasks: list[int]) -> str:
    """torch.cuda.set_device on local ranks 1-3 of each task in `tasks` (4 GPUs per node)."""
    out = ""
    for t in tasks:
        for local in (1, 2, 3):
            rank = t * 4 + local
            out += (
                f"{t}: [rank{rank}]: Traceback (most recent call last):\n"
                f'{t}: [rank{rank}]:   File "/workspace/train_ddp.py", line 57, in <module>\n'
                f"{t}: [rank{rank}]:     torch.cuda.set_device(local_rank)\n"
                f"{t}: [rank{rank}]: RuntimeError: CUDA error: invalid device ordinal\n"
            )
        out += f"srun: error: {NODES[t]}: task {t}: Exited with exit code 1\n"
    others = [t for t in range(3) if t not in tasks]
    if others:
        out += (
            f"{others[0]}: [rank0]: torch.distributed.DistStoreError: Timed out after 901 "
            "seconds waiting for clients. 9/12 clients joined.\n"
        )
    return out + "".join(
        f"srun: error: {NODES[t]}: task {t}: Exited with exit code 1\n" for t in others
    )


def test_one_node_short_of_gpus_is_that_nodes_configuration() -> None:
    # A node back from a MIG partition: one device per process (NVIDIA MIG user guide).
    a = _run(_ordinal([1]))
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_every_node_short_of_gpus_is_the_jobs_request() -> None:
    a = _run(_ordinal([0, 1, 2]))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


WRITE_FAILED = (
    "1: [rank12]: RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter "
    "failed writing file data/3: file write failed\n"
    "srun: error: gpu-r09: task 1: Exited with exit code 1\n"
    "srun: error: gpu-r08: task 0: Exited with exit code 1\n"
)


def _df(use: str) -> list[LogLine]:
    return _lines(
        "# df -h /local_scratch\nFilesystem      Size  Used Avail Use% Mounted on\n"
        f"/dev/nvme1n1    3.5T  3.5T     0 {use} /local_scratch\n",
        "node_gpu-r09.txt",
    )


def test_a_write_failing_on_the_node_whose_local_disk_is_full_names_it() -> None:
    # torch/serialization.py's PytorchStreamWriter (caffe2 inline_container.cc) on one node.
    a = _run(WRITE_FAILED, {"gpu-r09": _df("100%")})
    assert a.culprit_nodes == ["gpu-r09"]
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_write_failing_beside_a_disk_with_room_names_no_node() -> None:
    a = _run(WRITE_FAILED, {"gpu-r09": _df("41%")})
    assert a.culprit_nodes == []


# NCCL's net.cc when NCCL_NET names a network no loaded transport brings up on the node
# (`WARN("Error: network %s not found.")`, then ncclInvalidUsage under torch's DistBackendError).
def _net_job(failing: list[int], prelude: str = "") -> str:
    lines = [prelude] if prelude else []
    for t, node in enumerate(NODES):
        lines.append(
            f"{t}: {node}:3021{t}:3021{t} [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v7)"
        )
        if t in failing:
            lines.append(
                f"{t}: {node}:3021{t}:3022{t} [0] net.cc:1030 NCCL WARN Error: network AWS Libfabric not found."
            )
            lines.append(
                f"{t}: [rank{t}]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2006, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5"
            )
        else:
            lines.append(
                f"{t}: {node}:3021{t}:3022{t} [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)"
            )
    lines += [f"srun: error: {NODES[t]}: task {t}: Exited with exit code 1" for t in failing]
    return "\n".join(lines) + "\n"


def test_one_nodes_ranks_not_finding_the_network_the_others_use_is_that_nodes_software() -> None:
    a = _run(_net_job([1]))
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_the_sites_network_setting_failing_on_every_node_stops() -> None:
    site = "# the site's task prolog exports NCCL_NET='AWS Libfabric' on every node"
    a = _run(_net_job([0, 1, 2], site))
    assert a.category == Category.SYSTEM_SOFTWARE
    assert default_advice(a).kind == AdviceKind.STOP


def test_the_jobs_own_network_setting_failing_everywhere_is_the_job() -> None:
    a = _run(_net_job([0, 1, 2], "+ export NCCL_NET='AWS Libfabric'"))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_only_one_nodes_ranks_failing_cuda_initialisation_is_that_nodes_software() -> None:
    # PyTorch's cudaErrorUnknown at init (c10/cuda/CUDAFunctions.cpp): /dev/nvidia-uvm
    # unreadable or nvidia_uvm not loaded on that node (pytorch/pytorch#49081).
    job = (
        "0: gpu-r08:4102:4102 [0] NCCL INFO Bootstrap : Using ib0:10.2.0.8<0>\n"
        "2: gpu-r10:4310:4310 [0] NCCL INFO Bootstrap : Using ib0:10.2.0.10<0>\n"
        "1: [rank1]:     torch._C._cuda_init()\n"
        "1: [rank1]: RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.\n"
        "srun: error: gpu-r09: task 1: Exited with exit code 1\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r09"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING
