"""Joining node-side files and Slurm's text to the job's failure.

An AER report whose failing PCI function is a GPU is the GPU's fault (Linux
drivers/pci/pcie/aer.c prints the port's `error received: BDF` and the device's own driver
prefix); hardware symptoms printed after Slurm began killing the job are teardown; a node's
fault that left the job silent until its time limit is a hang; a grep'd `scontrol show job`
still tells the job's state.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.peer_ends import common_end, numbered_owners
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu-c01", "gpu-c02", "gpu-c03"]


def _run(
    job: str,
    node_logs: dict[str, list[LogLine]] | None = None,
    scheduler: str = "",
    nodes: list[str] | None = None,
) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES if nodes is None else nodes,
        node_logs=node_logs, scheduler_lines=_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip


STALLED = (
    "0: 2025-06-02 18:47:02 | INFO | epoch 4 | step 18325 | loss 0.8212\n"
    "0: 2025-06-02 18:47:39 | INFO | epoch 4 | step 18350 | loss 0.8192\n"
    "0: [rank0]:[E0602 18:58:23.123456 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=729101, OpType=ALLREDUCE, NumelIn=25165824, "
    "NumelOut=25165824, Timeout(ms)=600000) ran for 600062 milliseconds before timing out.\n"
    "1: [rank4]:[E0602 18:58:24.123456 ProcessGroupNCCL.cpp:632] [Rank 4] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=729101, OpType=ALLREDUCE, NumelIn=25165824, "
    "NumelOut=25165824, Timeout(ms)=600000) ran for 600066 milliseconds before timing out.\n"
    "srun: error: gpu-c01: task 0: Aborted (core dumped)\n"
    "srun: error: gpu-c02: task 1: Aborted (core dumped)\n"
    "srun: error: gpu-c03: task 2: Killed\n"
)
# The shape of the kernel's AER report (drivers/pci/pcie/aer.c), as in NVIDIA/NVSentinel#155.
AER_ON = (
    "[Mon Jun  2 18:47:47 2025] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: "
    "0000:{bdf}\n"
    "[Mon Jun  2 18:47:47 2025] {driver} 0000:{bdf}: PCIe Bus Error: severity=Uncorrected "
    "(Fatal), type=Transaction Layer, (Requester ID)\n"
    "[Mon Jun  2 18:47:47 2025] {driver} 0000:{bdf}:   device [{vendor}] error "
    "status/mask=00004000/00000000\n"
)


def test_fatal_aer_on_a_gpu_function_is_the_gpu() -> None:
    dmesg = AER_ON.format(bdf="03:00.0", driver="nvidia", vendor="10de:26b9")
    a = _run(STALLED, {"gpu-c03": _lines(dmesg, "dmesg_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-c03"])


def test_fatal_aer_on_another_device_stays_the_host() -> None:
    dmesg = AER_ON.format(bdf="5e:00.0", driver="megaraid_sas", vendor="1000:10e2")
    a = _run(STALLED, {"gpu-c03": _lines(dmesg, "dmesg_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["gpu-c03"])


PREEMPTED = (
    "0: [rank0]: step: 3330  loss:  3.4067\n"
    "slurmstepd: error: *** STEP 140771.0 ON gpu-c01 CANCELLED AT 2026-05-27T02:21:30 DUE TO "
    "PREEMPTION ***\n"
    "1: gpu-c02:39123:39980 [3] transport/net_ib.cc:2213 NCCL WARN NET/IB : Got completion from "
    "peer 10.3.0.11<43122> with status=IBV_WC_WR_FLUSH_ERR(5) opcode=IBV_WC_SEND(0) reqSize=0 "
    "vendor_err=249 req_type=Send localGid ::ffff:10.3.0.12 remoteGids::ffff:10.3.0.11 hca "
    "mlx5_1\n"
    "slurmstepd: error: *** JOB 140771 ON gpu-c01 CANCELLED AT 2026-05-27T02:21:30 DUE TO "
    "PREEMPTION ***\n"
)


def test_queue_pair_flushes_after_a_preemption_are_teardown() -> None:
    sacct = "JobID           JobName  Partition      State ExitCode\n" + (
        "------------ ---------- ---------- ---------- --------\n"
        "140771         pretrain       spot  PREEMPTED      0:0\n"
    )
    a = _run(PREEMPTED, scheduler=sacct)
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_link_lost_then_silence_until_the_time_limit_is_a_hang() -> None:
    job = (
        "0: [2025-10-31 02:07:30] epoch 9 iter 3300/8000 loss 0.434\n"
        "slurmstepd: error: *** JOB 3019928 ON gpu-c01 CANCELLED AT 2025-10-31T06:00:21 DUE TO "
        "TIME LIMIT ***\n"
        "srun: error: gpu-c01: task 0: Terminated\n"
        "srun: error: gpu-c02: task 1: Killed\n"
    )
    journal = "Oct 31 02:07:50 gpu-c02 kernel: ice 0000:31:00.0 ens2f0: NIC Link is Down\n"
    a = _run(job, {"gpu-c02": _lines(journal, "journal_gpu-c02.txt")})
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.HANG, Category.HARDWARE_NETWORK, ["gpu-c02"],
    )  # fmt: skip


def test_a_grepped_scontrol_record_says_the_job_is_pending_again() -> None:
    # slurmctld's requeue RPC (src/slurmctld/proc_req.c) and the state a grep kept.
    job = (
        '0: {"step": 44250, "loss": 1.6070}\n'
        "slurmstepd: error: *** STEP 5521901.0 ON gpu-c01 CANCELLED AT 2026-08-30T14:36:40 ***\n"
        "slurmstepd: error: *** JOB 5521901 ON gpu-c01 CANCELLED AT 2026-08-30T14:36:40 DUE TO "
        "JOB REQUEUE ***\n"
    )
    scheduler = (
        "[2026-08-30T14:36:40.118] _slurm_rpc_requeue: Requeue of JobId=5521901 returned "
        "Success uid 0\n"
        "$ scontrol show job 5521901 | grep -E 'JobState|Restarts'\n"
        "   JobState=PENDING Reason=BeginTime Dependency=(null)\n"
        "   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
    )
    a = _run(job, scheduler=scheduler)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)
    assert default_advice(a).kind == AdviceKind.REQUEUE


# NCCL's verbs error (misc/ibvwrap.cc), as quoted in NVIDIA/nccl#426 and #769.
QP = (
    "{task}: {host}:2{task}013:2{task}180 [0] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp "
    "failed with 110 Connection timed out, on dev mlx5_bond_0:1, curr state INIT, next state "
    "RTR, local GID index 3, local GID {local}, remote GID {remote}\n"
)
ROCE = ["roce-11", "roce-12", "roce-13", "roce-14"]
ODD_GID = "fe80::9a03:9bff:fe5c:21f0"


def _qp_failures(pairs: list[tuple[int, str, str]]) -> str:
    out = "".join(
        QP.format(task=t, host=ROCE[t], local=local, remote=remote) for t, local, remote in pairs
    )
    return out + "".join(
        f"srun: error: {ROCE[t]}: task {t}: Exited with exit code 1\n" for t, _, _ in pairs
    )


def test_every_failing_queue_pair_ending_at_one_node_names_that_node() -> None:
    # roce-13's RoCE GID moved after a DHCP lease loss: its peers' queue pairs to it fail.
    job = _qp_failures(
        [
            (1, "::ffff:10.60.2.12", ODD_GID),
            (3, "::ffff:10.60.2.14", ODD_GID),
            (2, ODD_GID, "::ffff:10.60.2.12"),
        ]
    )
    a = _run(job, nodes=ROCE)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["roce-13"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_queue_pairs_failing_between_many_nodes_name_no_node() -> None:
    job = _qp_failures(
        [
            (1, "::ffff:10.60.2.12", "::ffff:10.60.2.13"),
            (3, "::ffff:10.60.2.14", "::ffff:10.60.2.11"),
            (2, "::ffff:10.60.2.13", "::ffff:10.60.2.14"),
        ]
    )
    assert _run(job, nodes=ROCE).culprit_nodes == []


def _versions(x03: str) -> str:
    nodes = ["gpu-c01", "gpu-c02", "gpu-c03"]
    lines = [
        f"{i}: {n}:3{i}118:3{i}118 [0] NCCL INFO NCCL version "
        f"{x03 if n == 'gpu-c03' else '2.19.3+cuda12.3'}\n"
        for i, n in enumerate(nodes)
    ]
    return "".join(lines) + (
        "0: [rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
        "distributed/c10d/ProcessGroupNCCL.cpp:1970, internal error - please report this issue "
        "to the NCCL developers, NCCL version 2.19.3\n"
        "0: [rank0]: ncclInternalError: Internal check failed.\n"
        "2: [rank16]: ncclInternalError: Internal check failed.\n"
        "srun: error: gpu-c03: task 2: Exited with exit code 1\n"
        "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
    )


def test_the_one_node_loading_another_nccl_is_named() -> None:
    # NVIDIA/nccl#1267: mixed NCCL versions across nodes fail bootstrap with internal errors.
    a = _run(_versions("2.20.5+cuda12.4"))
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c03"])


def test_the_same_nccl_everywhere_is_no_drift() -> None:
    a = _run(_versions("2.19.3+cuda12.3"))
    assert "gpu-c03" not in a.culprit_nodes
    assert "NCCL version differs" not in a.summary


OOM = (
    "[rank11]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has "
    "a total capacity of 79.11 GiB of which 1.21 GiB is free. Process 48812 has 36.02 GiB memory "
    "in use. Process 3301917 has 41.86 GiB memory in use. Of the allocated memory 38.40 GiB is "
    "allocated by PyTorch\n"
    "[rank0]:[E1110 07:23:31.889201003 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=118, OpType=_REDUCE_SCATTER_BASE, "
    "NumelIn=181141504, NumelOut=7547563, Timeout(ms)=600000) ran for 600077 milliseconds before "
    "timing out.\n"
    "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
)


def test_the_node_listing_the_process_that_holds_the_gpu_is_named() -> None:
    # nvidia-smi --query-compute-apps on the node lists the other process the OOM names.
    smi = "gpu_bus_id, pid, process_name, used_memory\n00000000:61:00.0, 48812, python, 36884 MiB\n"
    a = _run(OOM, {"gpu-c02": _lines(smi, "node_gpu-c02.txt")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])


def test_a_missing_kernel_module_in_one_nodes_files_names_it() -> None:
    job = (
        "1: FATAL:   container creation failed: mount hook function failure: mount "
        "/proc/self/fd/3->/var/lib/apptainer/mnt/session/rootfs error: while mounting image "
        "/proc/self/fd/3: squashfuse_ll exited with status 255: fuse: device not found, try "
        "'modprobe fuse' first\n"
        "srun: error: gpu-c02: task 1: Exited with exit code 255\n"
        "0: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
        "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])


# NCCL's completion error (src/transport/net_ib/p2p.cc, v2.29 format), as in NVIDIA/nccl#1710.
RETRY = (
    "{task}: gpu-c-{me}:70165:70605 [3] transport/net_ib/p2p.cc:550 NCCL WARN NET/IB: Got "
    "completion from peer 10.60.1.{peer}<44120> with status=IBV_WC_RETRY_EXC_ERR(12) "
    "opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_3\n"
)
C_NODES = ["gpu-c-111", "gpu-c-112", "gpu-c-113", "gpu-c-114"]


def _retries(pairs: list[tuple[int, int]]) -> str:
    out = "".join(RETRY.format(task=me - 111, me=me, peer=peer) for me, peer in pairs)
    return out + "".join(
        f"srun: error: gpu-c-{n}: task {n - 111}: Exited with exit code 1\n"
        for n in range(111, 115)
    )


def test_the_node_at_the_common_end_of_failing_pairs_is_the_culprit() -> None:
    # gpu-c-113 fails to reach three peers, and gpu-c-111 fails to reach gpu-c-113.
    a = _run(_retries([(113, 111), (113, 114), (113, 112), (111, 113)]), nodes=[])
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu-c-113"])


def test_failing_pairs_without_a_common_end_blame_no_single_node() -> None:
    a = _run(_retries([(113, 111), (112, 114)]), nodes=[])
    assert a.culprit_nodes != ["gpu-c-113"]


def test_common_end_needs_two_distinct_far_ends() -> None:
    assert common_end([("a", "b"), ("b", "a")]) is None
    assert common_end([("a", "b"), ("a", "c")]) == "a"
    assert common_end([("a", "b"), ("c", "d")]) is None


def test_addresses_map_to_hosts_only_by_a_one_to_one_numbering() -> None:
    hosts = ["gpu-c-111", "gpu-c-112"]
    assert numbered_owners(["10.0.0.111"], hosts, {}) == {"10.0.0.111": "gpu-c-111"}
    # Nobody reports failing to reach itself: such a mapping is not the convention.
    assert numbered_owners(["10.0.0.111"], hosts, {"10.0.0.111": {"gpu-c-111"}}) == {}
    assert numbered_owners(["10.0.0.7"], hosts, {}) == {}


UNIFORM_HANG = "".join(
    f"{t}: [rank{t * 8}]:[E330 02:24:33.118000808 ProcessGroupNCCL.cpp:632] [Rank {t * 8}] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1204511, OpType=ALLREDUCE, "
    "NumelIn=134217728, NumelOut=134217728, Timeout(ms)=600000) ran for 600031 milliseconds "
    "before timing out.\n"
    for t in range(3)
)


def test_a_noted_spine_outage_behind_a_uniform_hang_is_the_shared_network() -> None:
    note = "# network on-call: spine ib-sp-03 lost power 02:14:20-02:31:05 (PSU pair failure)\n"
    a = _run(note + UNIFORM_HANG)
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.HANG, Category.HARDWARE_NETWORK, [],
    )  # fmt: skip
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_note_about_an_old_switch_change_is_no_outage() -> None:
    note = "# leaf switch ib-leaf-r07 was replaced last week\n"
    assert _run(note + UNIFORM_HANG).category == Category.UNKNOWN


def test_fatal_aer_on_a_nic_function_is_the_network() -> None:
    dmesg = AER_ON.format(bdf="41:00.0", driver="mlx5_core", vendor="15b3:1021")
    a = _run(STALLED, {"gpu-c03": _lines(dmesg, "dmesg_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu-c03"])


def test_hca_firmware_command_timeouts_are_the_nodes_network() -> None:
    # openucx/ucx#7738 (drivers/net/ethernet/mellanox/mlx5/core/cmd.c).
    journal = (
        "Jun  2 18:47:47 gpu-c03 kernel: mlx5_core 0000:61:00.0: wait_func:1132:(pid 141181): "
        "CREATE_DCT(0x710) timeout. Will cause a leak of a command resource\n"
    )
    a = _run(STALLED, {"gpu-c03": _lines(journal, "journal_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu-c03"])


def test_a_port_down_in_the_nodes_ibstat_is_the_network() -> None:
    ibstat = "CA 'mlx5_0'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n"
    a = _run(STALLED, {"gpu-c03": _lines(ibstat, "node_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu-c03"])


def test_a_corrected_memory_error_storm_is_the_host() -> None:
    journal = (
        "Jun  2 18:47:47 gpu-c03 kernel: EDAC MC0: 4562 CE memory read error on "
        "CPU_SrcID#0_MC#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0x2ab5c offset:0x0 grain:32)\n"
    )
    a = _run(STALLED, {"gpu-c03": _lines(journal, "journal_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["gpu-c03"])


def _one_node_fails(lines: str) -> str:
    return (
        "0: [rank0] 2025-06-02 18:46:25 | step 18300 | loss 0.8232\n" + lines + "".join(
            f"srun: error: gpu-c0{t + 1}: task {t}: Exited with exit code 1\n" for t in (1, 0, 2)
        )
    )  # fmt: skip


def test_nccl_failing_to_allocate_its_buffers_is_the_gpus_memory() -> None:
    # NVIDIA/nccl#1235: NCCL's own allocation fails with the GPU full.
    job = _one_node_fails(
        "1: gpu-c02:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of "
        "memory'\n"
        "1: [rank8]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
    )
    a = _run(job)
    assert a.category == Category.APPLICATION
    assert a.culprit_nodes == []


def test_nccl_unable_to_size_dev_shm_is_that_nodes_state() -> None:
    # NVIDIA/nccl-tests#166 (misc/shmutils.cc).
    job = _one_node_fails(
        "1: gpu-c02:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend "
        "/dev/shm/nccl-fjwOOB to 5967876 bytes\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])


def test_the_container_gpu_hook_without_a_driver_is_the_nodes_driver() -> None:
    # NVIDIA/nvidia-docker#1393.
    job = _one_node_fails(
        "1: stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: "
        "unknown.\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])


def test_a_row_remap_pending_on_the_node_that_died_first_is_its_gpu() -> None:
    # The Xid 63 line as quoted in stas00/ml-engineering (compute/accelerator/nvidia/debug.md).
    dmesg = (
        "[Mon Jun  2 18:47:40 2025] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New "
        "row marked for remapping, reset gpu to activate.\n"
    )
    a = _run(STALLED, {"gpu-c03": _lines(dmesg, "dmesg_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-c03"])


def test_a_node_drained_for_a_lost_mount_is_its_software() -> None:
    sinfo = (
        "REASON               USER      TIMESTAMP           NODELIST\n"
        "NHC: check_fs_mount:  /lustre not mounted  root 2025-06-02T18:48:01 gpu-c03\n"
    )
    a = _run(STALLED, scheduler=sinfo)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c03"])


PROGRESS = "0: [rank0] 2025-06-02 18:46:25 | step 18300 | loss 0.8232\n"
SACCT = "JobID           JobName  Partition      State ExitCode\n" + (
    "------------ ---------- ---------- ---------- --------\n"
)


def test_slurms_out_of_memory_state_is_the_jobs_memory_use() -> None:
    # sacct truncates the state to ten characters by default (`OUT_OF_ME+`).
    a = _run(
        PROGRESS, scheduler=SACCT + "4242            train        gpu  OUT_OF_ME+      0:125\n"
    )
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_srun_reporting_a_node_failure_excludes_that_node() -> None:
    job = PROGRESS + (
        "srun: error: Node failure on gpu-c02\n"
        "srun: error: Aborting, io error and missing step on node gpu-c02\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, ["gpu-c02"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


REQUEUED = (
    '0: {"step": 44250, "loss": 1.6070}\n'
    "slurmstepd: error: *** STEP 5521901.0 ON gpu-c01 CANCELLED AT 2026-08-30T14:36:40 ***\n"
    "slurmstepd: error: *** JOB 5521901 ON gpu-c01 CANCELLED AT 2026-08-30T14:36:40 DUE TO "
    "JOB REQUEUE ***\n"
)


def test_a_run_killed_due_to_job_requeue_is_a_requeue() -> None:
    a = _run(REQUEUED)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_slurmctld_preempting_the_job_is_a_preemption() -> None:
    job = REQUEUED.replace(" DUE TO JOB REQUEUE", "")
    ctld = (
        "[2026-08-30T14:36:40.001] preempted JobId=5521901 has been requeued to reclaim "
        "resources for JobId=5521999\n"
    )
    a = _run(job, scheduler=ctld)
    assert (a.category, a.scheduler_outcome) == (Category.SCHEDULER, "preempted")
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_working_directory_missing_on_one_node_is_its_mount() -> None:
    job = _one_node_fails(
        "1: slurmstepd: error: couldn't chdir to `/lustre/proj/run7': No such file or directory: "
        "going to /tmp instead\n"
        "1: python: can't open file '/tmp/train.py': [Errno 2] No such file or directory\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])


EVICTED = (
    "Jun  2 18:47:40 {node} kernel: LustreError: 167-0: scratch-MDT0000-mdc-ffff9b2c: This "
    "client was evicted by scratch-MDT0000; in progress operations using this service will fail.\n"
)
MISSING = (
    "1: [rank8]: PermissionError: [Errno 13] Permission denied: '/lustre/data/shard-0041.tar'\n"
)


def test_a_path_error_after_the_nodes_lustre_eviction_is_its_file_system() -> None:
    journal = _lines(EVICTED.format(node="gpu-c02"), "journal_gpu-c02.txt")
    a = _run(_one_node_fails(MISSING), {"gpu-c02": journal})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])
    assert default_advice(a).kind != AdviceKind.STOP


def test_a_path_error_with_the_nodes_client_fine_stays_the_jobs() -> None:
    journal = _lines(EVICTED.format(node="gpu-c03"), "journal_gpu-c03.txt")
    a = _run(_one_node_fails(MISSING), {"gpu-c03": journal})
    assert a.category == Category.APPLICATION


def test_node_exporter_uncorrectable_memory_errors_are_the_host() -> None:
    metrics = _lines(
        'node_edac_uncorrectable_errors_total{controller="0",instance="gpu-c03:9100"} 3\n',
        "metrics.txt",
    )
    a = attribute(Registry.default(), None, _lines(STALLED), None, [], NODES, metrics=metrics)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["gpu-c03"])


def test_nvidia_smi_without_a_handle_for_a_gpu_is_the_gpu() -> None:
    # The node file of a GPU whose PCIe link failed (nvidia-smi(1) on the node).
    smi = "$ nvidia-smi\nUnable to determine the device handle for GPU0000:03:00.0: Unknown Error\n"
    a = _run(STALLED, {"gpu-c03": _lines(smi, "node_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-c03"])


def test_the_fabric_manager_failing_on_the_node_that_died_is_its_software() -> None:
    journal = (
        "Jun  2 18:40:01 gpu-c03 systemd[1]: nvidia-fabricmanager.service: Failed with result "
        "'exit-code'.\n"
    )
    a = _run(STALLED, {"gpu-c03": _lines(journal, "journal_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c03"])


# NCCL's completion error towards a peer (transport/net_ib.cc, NVIDIA/nccl#1283 format) and
# dhclient/NetworkManager taking a new lease (isc-dhcp `DHCPACK of`, `bound to`).
COMPLETION = (
    "0: roce-11:3468:3905 [4] transport/net_ib.cc:1615 NCCL WARN NET/IB : Got completion from "
    "peer 10.216.7.12<54862> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid "
    "::ffff:10.216.7.11 remoteGids::ffff:10.216.7.12\n"
    "srun: error: roce-11: task 0: Exited with exit code 1\n"
    "srun: error: roce-12: task 1: Exited with exit code 1\n"
)


def _lease(address: str) -> list[LogLine]:
    return _lines(
        f"Nov 25 03:18:40 roce-12 dhclient[2211]: DHCPACK of {address} from 10.216.0.1\n"
        f"Nov 25 03:18:40 roce-12 dhclient[2211]: bound to {address} -- renewal in 1720 seconds.\n",
        "journal_roce-12.txt",
    )


def test_a_peer_whose_lease_moved_its_address_is_named_not_the_reporter() -> None:
    a = _run(COMPLETION, {"roce-12": _lease("10.216.7.112")}, nodes=ROCE[:2])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["roce-12"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_lease_renewed_to_the_same_address_blames_no_lease() -> None:
    a = _run(COMPLETION, {"roce-12": _lease("10.216.7.12")}, nodes=ROCE[:2])
    assert "DHCP" not in a.summary


# NCCL's bootstrap and connect lines (bootstrap.cc, misc/socket.cc; NVIDIA/nccl#1515) and
# `ip route` on each node: gpu-c03 has two interfaces in one /20, the unreachable one first.
BOOTSTRAP = (
    "0: gpu-c01:8001:8001 [0] NCCL INFO Bootstrap : Using eno1:192.168.1.10<0>\n"
    "1: gpu-c02:8011:8011 [0] NCCL INFO Bootstrap : Using eno1:192.168.2.11<0>\n"
    "2: gpu-c03:8021:8021 [0] NCCL INFO Bootstrap : Using eno1:192.168.3.12<0>\n"
    "1: gpu-c02:8011:8090 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "192.168.3.8<41233> failed : Software caused connection abort\n"
    "1: [rank4]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
    "c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
    "details), NCCL version 2.23.4\n"
    "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
    "srun: error: gpu-c02: task 1: Exited with exit code 1\n"
    "srun: error: gpu-c03: task 2: Exited with exit code 1\n"
)


def _routes(first: str, second: str) -> str:
    return (
        "$ ip route | grep 192.168.0.0/20\n"
        f"192.168.0.0/20 dev {first} proto kernel scope link src 192.168.3.8 metric 100\n"
        f"192.168.0.0/20 dev {second} proto kernel scope link src 192.168.3.12 metric 100\n"
    )


def test_peers_sent_to_another_interface_of_one_node_name_that_node() -> None:
    routes = _lines(_routes("enp37s0f0", "eno1"), "node_gpu-c03.txt")
    a = _run(BOOTSTRAP, {"gpu-c03": routes})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c03"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_an_address_no_node_shows_as_its_own_names_no_node_for_it() -> None:
    a = _run(BOOTSTRAP)
    assert "gpu-c03" not in a.culprit_nodes


def test_nccls_own_version_check_names_the_odd_node_over_a_frameworks_message() -> None:
    # NCCL init.cc: `rank <peer> version <v> rank <self> version <own>`; PyTorch's error text
    # carries a version of its own beside it.
    job = (
        "0: NCCL version 2.19.3+cuda12.3\n"
        "2: gpu-c03:77116:77206 [0] init.cc:614 NCCL WARN Mismatched NCCL version detected : "
        "rank 0 version 21903 rank 2 version 21602\n"
        "0: gpu-c01:77100:77190 [0] init.cc:670 NCCL WARN Mismatched NCCL version detected : "
        "rank 2 version 21602 rank 0 version 21903\n"
        "1: gpu-c02:77108:77198 [0] init.cc:670 NCCL WARN Mismatched NCCL version detected : "
        "rank 2 version 21602 rank 1 version 21903\n"
        "2: [rank2]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/"
        "torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN "
        "for details), NCCL version 2.19.3\n"
        "srun: error: gpu-c03: task 2: Exited with exit code 1\n"
        "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
        "srun: error: gpu-c02: task 1: Exited with exit code 1\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c03"])


def test_a_lone_nccl_internal_error_on_a_clean_node_names_no_node() -> None:
    # `internal error - please report this issue to the NCCL developers` (NCCL's
    # ncclInternalError): an NCCL bug or mismatch, not evidence against the node that hit it.
    job = (
        "1: [rank5]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
        "c10d/ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL "
        "developers, NCCL version 2.18.1\n"
        "1: [rank5]: ncclInternalError: Internal check failed.\n"
        "srun: error: gpu-c02: task 1: Exited with exit code 1\n"
        "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
    )
    clean = "(no kernel messages in the job window)\n"
    a = _run(job, {n: _lines(clean, f"dmesg_{n}.txt") for n in NODES})
    assert a.culprit_nodes == []
    assert default_advice(a).kind == AdviceKind.REQUEUE
